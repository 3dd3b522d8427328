//! poll(2): the registered set lives in user space and is handed to the
//! kernel whole on every wait, which is why its cost grows with the number
//! of fds. Level and oneshot modes; edge triggering cannot be had from
//! poll, so it is refused.

use super::{unsupported, Events, Interest, Mode, Poller, Token, Waker};
use crate::error::{Error, Result};
use crate::sys;
use crate::Syscall;
use rustix::event::{PollFd, PollFlags};
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
    /// One pollfd per registration, parallel to `entries`. The first
    /// `armed` are handed to the kernel as is; a disarmed oneshot entry
    /// waits after them, left out of the call (a pollfd cannot hold the
    /// -1 that poll would skip).
    pollfds: Vec<PollFd<'static>>,
    entries: Vec<Entry>,
    armed: usize,
    /// fd number -> index in `pollfds`/`entries`.
    slot_of: Vec<u32>,
    /// Where the next scan starts, so a full `Events` cannot starve the
    /// fds at the end of the array.
    cursor: usize,
    /// Oneshot fds reported by the current wait, disarmed after the scan.
    fired: Vec<RawFd>,
    waker_fd: Option<RawFd>,
    _waker: Option<Waker>,
}

impl PollPoller {
    /// A new, empty poller.
    pub fn new() -> Result<PollPoller> {
        Ok(PollPoller {
            pollfds: Vec::new(),
            entries: Vec::new(),
            armed: 0,
            slot_of: Vec::new(),
            cursor: 0,
            fired: Vec::new(),
            waker_fd: None,
            _waker: None,
        })
    }

    fn slot(&self, fd: RawFd) -> Option<usize> {
        let s = *self.slot_of.get(usize::try_from(fd).ok()?)?;
        (s != NO_SLOT).then_some(s as usize)
    }

    /// Exchanges two slots, keeping `slot_of` right.
    fn swap(&mut self, a: usize, b: usize) {
        if a != b {
            self.entries.swap(a, b);
            self.pollfds.swap(a, b);
            self.slot_of[self.entries[a].fd as usize] = a as u32;
            self.slot_of[self.entries[b].fd as usize] = b as u32;
        }
    }

    /// Watches `slot` for its entry's interest from the next wait on.
    fn arm(&mut self, slot: usize) -> Result<()> {
        let entry = &self.entries[slot];
        self.pollfds[slot] = sys::pollfd(entry.fd, entry.interest.poll_bits())
            .map_err(|_| Error::BadFd { backend: NAME, fd: entry.fd })?;
        if slot >= self.armed {
            self.swap(slot, self.armed);
            self.armed += 1;
        }
        Ok(())
    }

    /// Stops watching `slot` (a oneshot that fired, or a delete).
    fn disarm(&mut self, slot: usize) {
        if slot < self.armed {
            self.armed -= 1;
            self.swap(slot, self.armed);
        }
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
            return Err(Error::BadFd { backend: NAME, fd });
        }
        if self.slot(fd).is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd });
        }
        sys::fd_is_open(fd).map_err(|e| Error::sys(NAME, Syscall::Fcntl, Some(fd), e))?;
        let pollfd = sys::pollfd(fd, interest.poll_bits()).map_err(|_| Error::BadFd { backend: NAME, fd })?;
        let idx = fd as usize;
        if self.slot_of.len() <= idx {
            self.slot_of.resize(idx + 1, NO_SLOT);
        }
        let slot = self.entries.len();
        self.slot_of[idx] = slot as u32;
        self.entries.push(Entry { fd, token, interest, mode });
        self.pollfds.push(pollfd);
        self.arm(slot)
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        check_mode(mode)?;
        let slot = self.slot(fd).ok_or(Error::NotFound { backend: NAME, fd })?;
        self.entries[slot] = Entry { fd, token, interest, mode };
        self.arm(slot)
    }

    fn delete(&mut self, fd: RawFd) -> Result<()> {
        let slot = self.slot(fd).ok_or(Error::NotFound { backend: NAME, fd })?;
        self.disarm(slot);
        // Disarmed, it sits after the armed ones: move it last and drop it.
        let (slot, last) = (self.slot_of[fd as usize] as usize, self.entries.len() - 1);
        self.swap(slot, last);
        self.entries.pop();
        self.pollfds.pop();
        self.slot_of[fd as usize] = NO_SLOT;
        if self.waker_fd == Some(fd) {
            self.waker_fd = None;
        }
        Ok(())
    }

    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        events.clear();
        let ready = match sys::poll(&mut self.pollfds[..self.armed], timeout) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) => return Err(Error::sys(NAME, Syscall::Ppoll, None, e)),
        };
        let len = self.armed;
        let mut seen = 0;
        let mut i = self.cursor.min(len);
        for _ in 0..len {
            if seen == ready || events.is_full() {
                break;
            }
            if i == len {
                i = 0;
            }
            let revents = self.pollfds[i].revents();
            if !revents.is_empty() {
                seen += 1;
                let entry = &self.entries[i];
                // poll's bits have epoll's values on Linux; POLLNVAL (fd not
                // open) has no epoll twin and is reported as an error.
                let mut bits = u32::from((revents - PollFlags::NVAL).bits());
                if revents.contains(PollFlags::NVAL) {
                    bits |= libc::EPOLLERR as u32;
                }
                events.push(entry.token, bits);
                if Some(entry.fd) == self.waker_fd {
                    sys::eventfd_drain(entry.fd).map_err(|e| Error::sys(NAME, Syscall::Read, Some(entry.fd), e))?;
                } else if entry.mode == Mode::Oneshot {
                    self.fired.push(entry.fd);
                }
            }
            i += 1;
        }
        self.cursor = i;
        for k in 0..self.fired.len() {
            let fd = self.fired[k];
            if let Some(slot) = self.slot(fd) {
                self.disarm(slot);
            }
        }
        self.fired.clear();
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
