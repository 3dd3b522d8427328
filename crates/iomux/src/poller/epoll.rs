//! epoll: every operation is exactly one syscall, and `wait` is one
//! `epoll_pwait` (no signal mask: `epoll_wait` on every architecture that
//! has it) writing straight into the caller's [`Events`] (no per-wait
//! re-arming, no timerfd).

use super::{Events, Interest, Mode, Poller, Token, Waker};
use crate::error::{Error, Result};
use crate::sys::{self, EpollOp};
use crate::Syscall;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

const NAME: &str = "epoll";

/// The epoll mechanism behind the [`Poller`](super::Poller) contract.
pub struct EpollPoller {
    epfd: OwnedFd,
    waker: Option<Waker>,
}

impl EpollPoller {
    /// A new, empty poller.
    pub fn new() -> Result<EpollPoller> {
        let epfd = sys::epoll_create1().map_err(|e| Error::sys(NAME, Syscall::EpollCreate1, None, e))?;
        Ok(EpollPoller { epfd, waker: None })
    }

    fn ctl(&self, op: EpollOp, fd: RawFd, bits: u32, token: Token) -> Result<()> {
        if fd < 0 {
            // As every backend says it (the others never reach the kernel).
            return Err(match op {
                EpollOp::Add => Error::BadFd { backend: NAME, fd },
                _ => Error::NotFound { backend: NAME, fd },
            });
        }
        sys::epoll_ctl(self.epfd.as_fd(), op, fd, bits, token.0 as u64).map_err(|e| match e.raw_os_error() {
            Some(libc::EEXIST) => Error::AlreadyExists { backend: NAME, fd },
            Some(libc::ENOENT) => Error::NotFound { backend: NAME, fd },
            _ => Error::sys(NAME, Syscall::EpollCtl, Some(fd), e),
        })
    }
}

fn bits(interest: Interest, mode: Mode) -> u32 {
    interest.epoll_bits()
        | match mode {
            Mode::Level => 0,
            Mode::Edge => libc::EPOLLET as u32,
            Mode::Oneshot => libc::EPOLLONESHOT as u32,
        }
}

impl Poller for EpollPoller {
    fn name(&self) -> &'static str {
        NAME
    }

    fn supports(&self, _mode: Mode) -> bool {
        true
    }

    fn add(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        self.ctl(EpollOp::Add, fd, bits(interest, mode), token)
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        self.ctl(EpollOp::Modify, fd, bits(interest, mode), token)
    }

    fn delete(&mut self, fd: RawFd) -> Result<()> {
        self.ctl(EpollOp::Delete, fd, 0, Token(0))
    }

    #[inline]
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        match sys::epoll_wait(self.epfd.as_fd(), &mut events.list, timeout) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(Error::sys(NAME, Syscall::EpollPwait, Some(self.epfd.as_raw_fd()), e)),
        }
    }

    fn waker(&mut self, token: Token) -> Result<Waker> {
        if self.waker.is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd: -1 });
        }
        let (waker, fd) = Waker::new()?;
        // Edge-triggered: every eventfd write is a new edge, so the counter
        // never needs draining and a wake costs the waiting side nothing.
        self.add(fd, token, Interest::READABLE, Mode::Edge)?;
        self.waker = Some(waker.clone());
        Ok(waker)
    }
}
