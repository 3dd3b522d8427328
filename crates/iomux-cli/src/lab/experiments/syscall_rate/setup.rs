//! E1's set-up for one N: the registered fds, each mechanism's poller,
//! and the timed loops of library and raw calls.

use super::*;
use anyhow::Context as _;

/// Everything registered for one N. Field order is drop order: every
/// poller goes before the fds it watches.
pub(super) struct Setup {
    pub(super) select: Result<SelectPoller, String>,
    pub(super) poll: PollPoller,
    pub(super) epoll: EpollPoller,
    pub(super) uring: Result<UringPoller, String>,
    pub(super) mio: MioPeer,
    pub(super) polling: PollingPeer,
    pub(super) raw_pollfds: Vec<libc::pollfd>,
    pub(super) raw_epoll: OwnedFd,
    pub(super) raw_ring: Result<PollRing, String>,
    pub(super) epoll_events: Vec<libc::epoll_event>,
    pub(super) events: Events,
    pub(super) fds: Vec<OwnedFd>,
    pub(super) _writer: std::io::PipeWriter,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.polling.delete_all(&self.fds);
    }
}

pub(super) fn register_all(p: &mut dyn Poller, fds: &[OwnedFd]) -> iomux::Result<()> {
    for (i, fd) in fds.iter().enumerate() {
        p.add(fd.as_raw_fd(), Token(i), Interest::READABLE, Mode::Level)?;
    }
    // Let queued registrations (io_uring) reach the kernel before timing.
    p.wait(&mut Events::with_capacity(1), Some(Duration::ZERO))?;
    Ok(())
}

impl Setup {
    pub(super) fn new(n: usize) -> CliResult<Setup> {
        let (reader, writer) = std::io::pipe().context("pipe")?;
        let reader = OwnedFd::from(reader);
        let mut fds = Vec::with_capacity(n);
        for _ in 0..n {
            fds.push(
                reader.try_clone().with_context(|| format!("dup of the pipe's read end ({} of {n})", fds.len() + 1))?,
            );
        }
        drop(reader);

        let select =
            SelectPoller::new().and_then(|mut p| register_all(&mut p, &fds).map(|()| p)).map_err(|e| crate::chain(&e));
        let mut poll = PollPoller::new()?;
        register_all(&mut poll, &fds)?;
        let mut epoll = EpollPoller::new()?;
        register_all(&mut epoll, &fds)?;
        let uring =
            UringPoller::new().and_then(|mut p| register_all(&mut p, &fds).map(|()| p)).map_err(|e| crate::chain(&e));
        let mio = MioPeer::new(&fds).context("mio")?;
        let polling = PollingPeer::new(&fds).context("polling")?;

        let raw_pollfds =
            fds.iter().map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        let raw_epoll = raw::epoll_with(&fds).context("raw epoll")?;
        let raw_ring = PollRing::new(&fds).map_err(|e| format!("io_uring: {e}"));
        Ok(Setup {
            select,
            poll,
            epoll,
            uring,
            mio,
            polling,
            raw_pollfds,
            raw_epoll,
            raw_ring,
            epoll_events: Vec::with_capacity(1),
            events: Events::with_capacity(1),
            fds,
            _writer: writer,
        })
    }

    /// Times one subject for `duration`: (calls/s, calls, counted syscalls),
    /// or why it cannot be measured.
    pub(super) fn measure(&mut self, subject: Subject, duration: Duration) -> Result<(f64, u64, u64), String> {
        let before = syscalls::counts();
        let mut failure: Option<String> = None;
        let events = &mut self.events;
        let (rate, calls) = match subject {
            Subject::NullSyscall => calls_per_sec(duration, || {
                black_box(raw::getppid());
            }),
            Subject::RawPoll => {
                let fds = &mut self.raw_pollfds;
                calls_per_sec(duration, || {
                    if let Err(e) = raw::poll(black_box(fds), 0) {
                        failure = Some(format!("poll: {e}"));
                    }
                })
            }
            Subject::RawEpoll => {
                let (epfd, evs) = (self.raw_epoll.as_fd(), &mut self.epoll_events);
                calls_per_sec(duration, || {
                    if let Err(e) = raw::epoll_wait(epfd, black_box(evs), 0) {
                        failure = Some(format!("epoll_wait: {e}"));
                    }
                })
            }
            Subject::RawUringEnter => {
                let ring = self.raw_ring.as_mut().map_err(|e| e.clone())?;
                calls_per_sec(duration, || {
                    if let Err(e) = ring.enter_getevents() {
                        failure = Some(format!("io_uring_enter: {e}"));
                    }
                })
            }
            Subject::Poll => library_loop(&mut self.poll, events, duration, &mut failure),
            Subject::Epoll => library_loop(&mut self.epoll, events, duration, &mut failure),
            Subject::Select => {
                let p = self.select.as_mut().map_err(|e| e.clone())?;
                library_loop(p, events, duration, &mut failure)
            }
            Subject::Uring => {
                let p = self.uring.as_mut().map_err(|e| e.clone())?;
                library_loop(p, events, duration, &mut failure)
            }
            Subject::Mio => {
                let mio = &mut self.mio;
                calls_per_sec(duration, || {
                    if let Err(e) = mio.wait_zero() {
                        failure = Some(format!("mio: {e}"));
                    }
                })
            }
            Subject::Polling => {
                let polling = &mut self.polling;
                calls_per_sec(duration, || {
                    if let Err(e) = polling.wait_zero() {
                        failure = Some(format!("polling: {e}"));
                    }
                })
            }
        };
        if let Some(f) = failure {
            return Err(f);
        }
        let syscalls = syscalls::counts().since(&before).total();
        Ok((rate, calls, syscalls))
    }
}

#[inline(never)]
pub(super) fn library_loop<P: Poller>(
    p: &mut P,
    events: &mut Events,
    duration: Duration,
    failure: &mut Option<String>,
) -> (f64, u64) {
    calls_per_sec(duration, || {
        if let Err(e) = p.wait(black_box(&mut *events), Some(Duration::ZERO)) {
            *failure = Some(crate::chain(&e));
        }
    })
}
