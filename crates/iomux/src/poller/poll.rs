//! poll(2): the registered set lives in user space and is handed to the
//! kernel whole on every wait, which is why its cost grows with the number
//! of fds. Level and oneshot modes; edge triggering cannot be had from
//! poll, so it is refused.

use super::{unsupported, Events, Interest, Mode, Poller, Token, Waker};
use crate::error::{Error, Result};
use crate::sys;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

const NAME: &str = "poll";
const NO_SLOT: u32 = u32::MAX;

struct Entry {
    fd: RawFd,
    token: Token,
    interest: Interest,
    mode: Mode,
}

/// The poll mechanism behind the [`Poller`](super::Poller) contract.
pub struct PollPoller {
    /// Handed to the kernel as is; a disarmed oneshot entry has fd -1,
    /// which poll skips.
    pollfds: Vec<libc::pollfd>,
    entries: Vec<Entry>,
    /// fd number -> index in `pollfds`/`entries`.
    slot_of: Vec<u32>,
    /// Where the next scan starts, so a full `Events` cannot starve the
    /// fds at the end of the array.
    cursor: usize,
    waker_fd: Option<RawFd>,
    _waker: Option<Waker>,
}

impl PollPoller {
    /// A new, empty poller.
    pub fn new() -> Result<PollPoller> {
        Ok(PollPoller {
            pollfds: Vec::new(),
            entries: Vec::new(),
            slot_of: Vec::new(),
            cursor: 0,
            waker_fd: None,
            _waker: None,
        })
    }

    fn slot(&self, fd: RawFd) -> Option<usize> {
        let s = *self.slot_of.get(usize::try_from(fd).ok()?)?;
        (s != NO_SLOT).then_some(s as usize)
    }

    fn arm(&mut self, slot: usize) {
        let entry = &self.entries[slot];
        self.pollfds[slot] = libc::pollfd { fd: entry.fd, events: entry.interest.poll_bits(), revents: 0 };
    }
}

fn check_mode(mode: Mode) -> Result<()> {
    match mode {
        Mode::Level | Mode::Oneshot => Ok(()),
        Mode::Edge => Err(unsupported(NAME, mode)),
    }
}

impl Poller for PollPoller {
    fn name(&self) -> &'static str {
        NAME
    }

    fn supports(&self, mode: Mode) -> bool {
        check_mode(mode).is_ok()
    }

    fn add(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        check_mode(mode)?;
        if fd < 0 {
            return Err(Error::sys(NAME, "add", Some(fd), io::Error::from_raw_os_error(libc::EBADF)));
        }
        if self.slot(fd).is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd });
        }
        sys::fd_is_open(fd).map_err(|e| Error::sys(NAME, "fcntl", Some(fd), e))?;
        let idx = fd as usize;
        if self.slot_of.len() <= idx {
            self.slot_of.resize(idx + 1, NO_SLOT);
        }
        let slot = self.entries.len();
        self.slot_of[idx] = slot as u32;
        self.entries.push(Entry { fd, token, interest, mode });
        self.pollfds.push(libc::pollfd { fd: -1, events: 0, revents: 0 });
        self.arm(slot);
        Ok(())
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        check_mode(mode)?;
        let slot = self.slot(fd).ok_or(Error::NotFound { backend: NAME, fd })?;
        self.entries[slot] = Entry { fd, token, interest, mode };
        self.arm(slot);
        Ok(())
    }

    fn delete(&mut self, fd: RawFd) -> Result<()> {
        let slot = self.slot(fd).ok_or(Error::NotFound { backend: NAME, fd })?;
        self.slot_of[fd as usize] = NO_SLOT;
        self.entries.swap_remove(slot);
        self.pollfds.swap_remove(slot);
        if let Some(moved) = self.entries.get(slot) {
            self.slot_of[moved.fd as usize] = slot as u32;
        }
        if self.waker_fd == Some(fd) {
            self.waker_fd = None;
        }
        Ok(())
    }

    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        events.clear();
        let ready = match sys::poll(&mut self.pollfds, sys::timeout_ms(timeout)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) => return Err(Error::sys(NAME, "poll", None, e)),
        };
        let len = self.pollfds.len();
        let mut seen = 0;
        let mut i = self.cursor.min(len);
        for _ in 0..len {
            if seen == ready || events.is_full() {
                break;
            }
            if i == len {
                i = 0;
            }
            let revents = self.pollfds[i].revents;
            if revents != 0 {
                seen += 1;
                let entry = &self.entries[i];
                // poll's bits have epoll's values on Linux; POLLNVAL (fd not
                // open) has no epoll twin and is reported as an error.
                let mut bits = (revents as u16 as u32) & !(libc::POLLNVAL as u32);
                if revents & libc::POLLNVAL != 0 {
                    bits |= libc::EPOLLERR as u32;
                }
                events.push(entry.token, bits);
                if Some(entry.fd) == self.waker_fd {
                    sys::eventfd_drain(entry.fd).map_err(|e| Error::sys(NAME, "read", Some(entry.fd), e))?;
                } else if entry.mode == Mode::Oneshot {
                    self.pollfds[i].fd = -1;
                }
            }
            i += 1;
        }
        self.cursor = i;
        Ok(events.len())
    }

    fn waker(&mut self, token: Token) -> Result<Waker> {
        if self.waker_fd.is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd: -1 });
        }
        let (waker, fd) = Waker::new()?;
        self.add(fd, token, Interest::READABLE, Mode::Level)?;
        self.waker_fd = Some(fd);
        self._waker = Some(waker.clone());
        Ok(waker)
    }
}
