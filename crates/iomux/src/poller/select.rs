//! select(2): fixed-size bit sets of FD_SETSIZE (1024) descriptors. A fd
//! numbered 1024 or more cannot be stored in them at all, so `add` refuses
//! it with [`Error::FdSetSize`] rather than writing past the set (the
//! classic select memory corruption). Level and oneshot modes only.
//! select reports no hang-up: a peer's close shows as a readable fd whose
//! read returns 0.

use super::{unsupported, Events, Interest, Mode, Poller, Token, Waker};
use crate::error::{Error, Result};
use crate::sys::{self, FdSet};
use crate::Syscall;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

const NAME: &str = "select";

/// FD_SETSIZE (1024): the most descriptors, and one past the highest
/// descriptor number, that the select backend can watch.
pub const FD_SETSIZE: usize = sys::FD_SETSIZE;

#[derive(Clone, Copy)]
struct Entry {
    token: Token,
    mode: Mode,
}

/// The select mechanism behind the [`Poller`](super::Poller) contract.
pub struct SelectPoller {
    entries: Vec<Option<Entry>>,
    registered: usize,
    read: FdSet,
    write: FdSet,
    /// One past the highest registered fd: select's `nfds`.
    nfds: usize,
    cursor: usize,
    waker_fd: Option<RawFd>,
    _waker: Option<Waker>,
}

impl SelectPoller {
    /// A new, empty poller.
    pub fn new() -> Result<SelectPoller> {
        Ok(SelectPoller {
            entries: vec![None; FD_SETSIZE],
            registered: 0,
            read: FdSet::default(),
            write: FdSet::default(),
            nfds: 0,
            cursor: 0,
            waker_fd: None,
            _waker: None,
        })
    }

    fn entry(&self, fd: RawFd) -> Option<Entry> {
        if FdSet::fits(fd) {
            self.entries[fd as usize]
        } else {
            None
        }
    }

    fn arm(&mut self, fd: RawFd, interest: Interest) {
        self.read.remove(fd);
        self.write.remove(fd);
        if interest.is_readable() {
            self.read.insert(fd);
        }
        if interest.is_writable() {
            self.write.insert(fd);
        }
    }

    /// select says EBADF for the whole set; find which fd it meant.
    fn closed_fd(&self) -> Option<RawFd> {
        (0..self.nfds as RawFd).find(|&fd| self.entries[fd as usize].is_some() && sys::fd_is_open(fd).is_err())
    }
}

fn check_mode(mode: Mode) -> Result<()> {
    match mode {
        Mode::Level | Mode::Oneshot => Ok(()),
        Mode::Edge => Err(unsupported(NAME, mode)),
    }
}

impl Poller for SelectPoller {
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
        if !FdSet::fits(fd) || self.registered >= FD_SETSIZE {
            return Err(Error::FdSetSize { fd, registered: self.registered });
        }
        if self.entry(fd).is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd });
        }
        sys::fd_is_open(fd).map_err(|e| Error::sys(NAME, Syscall::Fcntl, Some(fd), e))?;
        self.entries[fd as usize] = Some(Entry { token, mode });
        self.registered += 1;
        self.nfds = self.nfds.max(fd as usize + 1);
        self.arm(fd, interest);
        Ok(())
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        check_mode(mode)?;
        if self.entry(fd).is_none() {
            return Err(Error::NotFound { backend: NAME, fd });
        }
        self.entries[fd as usize] = Some(Entry { token, mode });
        self.arm(fd, interest);
        Ok(())
    }

    fn delete(&mut self, fd: RawFd) -> Result<()> {
        if self.entry(fd).is_none() {
            return Err(Error::NotFound { backend: NAME, fd });
        }
        self.entries[fd as usize] = None;
        self.registered -= 1;
        self.read.remove(fd);
        self.write.remove(fd);
        while self.nfds > 0 && self.entries[self.nfds - 1].is_none() {
            self.nfds -= 1;
        }
        if self.waker_fd == Some(fd) {
            self.waker_fd = None;
        }
        Ok(())
    }

    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        events.clear();
        let (mut read, mut write) = (self.read, self.write);
        let ready = match sys::select(self.nfds, &mut read, &mut write, timeout) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(0),
            Err(e) => return Err(Error::sys(NAME, Syscall::Pselect6, self.closed_fd(), e)),
        };
        if ready == 0 || self.nfds == 0 {
            return Ok(0);
        }
        let (read, write) = (read.bits(), write.bits());
        let mut fd = self.cursor % self.nfds;
        for _ in 0..self.nfds {
            if events.is_full() {
                break;
            }
            let raw = fd as RawFd;
            let mut bits = 0;
            if read.contains(raw) {
                bits |= libc::EPOLLIN as u32;
            }
            if write.contains(raw) {
                bits |= libc::EPOLLOUT as u32;
            }
            if let (true, Some(entry)) = (bits != 0, self.entries[fd]) {
                events.push(entry.token, bits);
                if Some(raw) == self.waker_fd {
                    sys::eventfd_drain(raw).map_err(|e| Error::sys(NAME, Syscall::Read, Some(raw), e))?;
                } else if entry.mode == Mode::Oneshot {
                    self.read.remove(raw);
                    self.write.remove(raw);
                }
            }
            fd = (fd + 1) % self.nfds;
        }
        self.cursor = fd;
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
