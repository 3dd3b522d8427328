//! io_uring as a readiness source: IORING_OP_POLL_ADD per registration.
//!
//! - Edge: one multishot poll (IORING_POLL_ADD_MULTI), which posts a
//!   completion per wake-up of the socket (each new arrival), never again
//!   for data that merely sits unread.
//! - Oneshot: one single-shot poll; `modify` arms a new one.
//! - Level: a single-shot poll that is armed again at the start of the next
//!   `wait`. A poll armed on a ready fd completes at once, so a fd that was
//!   not drained is reported on every wait, exactly as level triggering says.
//!
//! add/modify are queued and reach the kernel with the next `wait`, in the
//! same `io_uring_enter` (batched, as libev batches its changes). `delete`
//! is submitted at once, because an armed poll holds a reference to the
//! file: a socket closed after `delete` must really close.
//!
//! A wait with a zero timeout, nothing queued and nothing in the kernel
//! makes no syscall at all: the completion ring is shared memory.

use super::{Events, Interest, Mode, Poller, Token, Waker};
use crate::error::{Error, Result};
use crate::sys::uring::Ring;
use crate::sys::{self};
use crate::Syscall;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

const NAME: &str = "uring";
/// user_data of our own poll-remove requests, whose completions say nothing.
const INTERNAL: u64 = 1 << 63;
const RING_ENTRIES: u32 = 256;

#[derive(Clone, Copy)]
struct Reg {
    token: Token,
    interest: Interest,
    mode: Mode,
    /// Tells this registration's completions from a cancelled one's.
    gen: u32,
    armed: bool,
}

fn user_data(fd: RawFd, gen: u32) -> u64 {
    (u64::from(gen & 0x7fff_ffff) << 32) | u64::from(fd as u32)
}

fn decode(user_data: u64) -> (RawFd, u32) {
    ((user_data & 0xffff_ffff) as u32 as RawFd, (user_data >> 32) as u32)
}

/// io_uring at the readiness layer (IORING_OP_POLL_ADD), behind the
/// [`Poller`](super::Poller) contract.
pub struct UringPoller {
    ring: Ring,
    regs: Vec<Option<Reg>>,
    /// Level (and ended multishot) registrations to arm again at the next wait.
    rearm: Vec<(RawFd, u32)>,
    next_gen: u32,
    waker: Option<Waker>,
}

/// Why io_uring_setup failed, in words a user can act on.
pub(crate) fn uring_unavailable(e: io::Error) -> Error {
    let reason = match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "this kernel has no io_uring (built without CONFIG_IO_URING, or older than 5.1)".to_string()
        }
        Some(libc::EPERM) => match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .map(|s| s.trim().to_string())
        {
            Ok(v) if v == "2" => {
                "disabled by sysctl kernel.io_uring_disabled=2; as root: sysctl -w kernel.io_uring_disabled=0".into()
            }
            Ok(v) if v == "1" => {
                "restricted by sysctl kernel.io_uring_disabled=1 to members of kernel.io_uring_group; \
                 join that group or, as root: sysctl -w kernel.io_uring_disabled=0"
                    .into()
            }
            _ => "refused (EPERM): a seccomp filter (container runtime) or LSM blocks io_uring_setup".into(),
        },
        Some(libc::ENOMEM) => "not enough locked memory for the rings; raise RLIMIT_MEMLOCK (ulimit -l)".into(),
        _ => "io_uring_setup failed".into(),
    };
    Error::UringUnavailable { reason, source: e }
}

impl UringPoller {
    /// How long an SQPOLL thread spins idle before it sleeps.
    pub const SQPOLL_IDLE: Duration = Duration::from_millis(50);

    /// A new, empty poller on its own ring.
    pub fn new() -> Result<UringPoller> {
        Self::build(None)
    }

    /// With IORING_SETUP_SQPOLL: a kernel thread takes submissions, so a
    /// busy loop submits without syscalls.
    pub fn with_sqpoll() -> Result<UringPoller> {
        Self::build(Some(Self::SQPOLL_IDLE))
    }

    fn build(sqpoll: Option<Duration>) -> Result<UringPoller> {
        let ring = Ring::new(RING_ENTRIES, sqpoll).map_err(uring_unavailable)?;
        if !ring.has_ext_arg() {
            return Err(Error::UringUnavailable {
                reason: "kernel lacks IORING_FEAT_EXT_ARG (Linux 5.11+), needed for wait timeouts".into(),
                source: io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        Ok(UringPoller { ring, regs: Vec::new(), rearm: Vec::new(), next_gen: 0, waker: None })
    }

    fn reg(&self, fd: RawFd) -> Option<Reg> {
        *self.regs.get(usize::try_from(fd).ok()?)?
    }

    fn queue_error(fd: RawFd, e: io::Error) -> Error {
        Error::sys(NAME, Syscall::IoUringEnter, Some(fd), e)
    }

    /// Queues the poll for `reg` and marks it armed.
    fn arm(&mut self, fd: RawFd, reg: &mut Reg) -> Result<()> {
        let mask = reg.interest.poll_bits() as u16 as u32;
        self.ring
            .push_poll_add(fd, mask, reg.mode == Mode::Edge, user_data(fd, reg.gen))
            .map_err(|e| Self::queue_error(fd, e))?;
        reg.armed = true;
        Ok(())
    }

    fn disarm(&mut self, fd: RawFd, reg: &Reg) -> Result<()> {
        if reg.armed {
            self.ring.push_poll_remove(user_data(fd, reg.gen), INTERNAL).map_err(|e| Self::queue_error(fd, e))?;
        }
        Ok(())
    }

    fn new_gen(&mut self) -> u32 {
        self.next_gen = self.next_gen.wrapping_add(1) & 0x7fff_ffff;
        self.next_gen
    }

    /// Turns one completion into an event (or nothing, if it is stale).
    fn complete(&mut self, user_data: u64, result: i32, more: bool, events: &mut Events) {
        if user_data & INTERNAL != 0 {
            return;
        }
        let (fd, gen) = decode(user_data);
        let Some(mut reg) = self.reg(fd) else { return };
        if reg.gen != gen {
            return; // a completion of a poll that modify/delete replaced
        }
        let bits = if result < 0 { libc::EPOLLERR as u32 } else { result as u32 };
        events.push(reg.token, bits);
        let still_armed = result >= 0 && reg.mode == Mode::Edge && more;
        if !still_armed {
            reg.armed = false;
            if reg.mode != Mode::Oneshot && result >= 0 {
                self.rearm.push((fd, gen));
            }
        }
        self.regs[fd as usize] = Some(reg);
    }
}

impl Poller for UringPoller {
    fn name(&self) -> &'static str {
        NAME
    }

    fn supports(&self, _mode: Mode) -> bool {
        true
    }

    fn add(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        if fd < 0 {
            return Err(Error::BadFd { backend: NAME, fd });
        }
        if self.reg(fd).is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd });
        }
        // The poll itself would fail only later, at the next wait; say
        // EBADF now, where the caller can tell which fd it was.
        sys::fd_is_open(fd).map_err(|e| Error::sys(NAME, Syscall::Fcntl, Some(fd), e))?;
        let mut reg = Reg { token, interest, mode, gen: self.new_gen(), armed: false };
        self.arm(fd, &mut reg)?;
        let idx = fd as usize;
        if self.regs.len() <= idx {
            self.regs.resize(idx + 1, None);
        }
        self.regs[idx] = Some(reg);
        Ok(())
    }

    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()> {
        let old = self.reg(fd).ok_or(Error::NotFound { backend: NAME, fd })?;
        self.disarm(fd, &old)?;
        let mut reg = Reg { token, interest, mode, gen: self.new_gen(), armed: false };
        self.arm(fd, &mut reg)?;
        self.regs[fd as usize] = Some(reg);
        Ok(())
    }

    fn delete(&mut self, fd: RawFd) -> Result<()> {
        let old = self.reg(fd).ok_or(Error::NotFound { backend: NAME, fd })?;
        self.disarm(fd, &old)?;
        self.regs[fd as usize] = None;
        if old.armed {
            // Submit now: the armed poll keeps the file open until removed.
            self.ring.enter(0, None).map_err(|e| Self::queue_error(fd, e))?;
        }
        Ok(())
    }

    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize> {
        events.clear();
        for (fd, gen) in std::mem::take(&mut self.rearm) {
            if let Some(mut reg) = self.reg(fd).filter(|r| r.gen == gen && !r.armed) {
                self.arm(fd, &mut reg)?;
                self.regs[fd as usize] = Some(reg);
            }
        }
        let blocking = timeout != Some(Duration::ZERO);
        let deadline = timeout.filter(|_| blocking).map(|t| Instant::now() + t);
        loop {
            let completions_ready = !self.ring.completions_empty();
            let must_enter = self.ring.pending_submissions() > 0 || self.ring.kernel_has_work();
            let mut stop = !blocking;
            if must_enter || (blocking && !completions_ready) {
                let min_complete = u32::from(blocking && !completions_ready);
                let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                if let Err(e) = self.ring.enter(min_complete, remaining) {
                    match e.raw_os_error() {
                        // The timeout passed, or a signal came: return what we have.
                        Some(libc::ETIME) | Some(libc::EINTR) => stop = true,
                        // The completion ring is full: reaping below makes room.
                        Some(libc::EBUSY) => {}
                        _ => return Err(Error::sys(NAME, Syscall::IoUringEnter, None, e)),
                    }
                }
            }
            while !events.is_full() {
                let Some(c) = self.ring.pop_completion() else { break };
                let more = c.more();
                self.complete(c.user_data, c.result, more, events);
            }
            // Completions of replaced polls are dropped; if that was all a
            // blocking wait got, it waits on for the rest of its time.
            // (An enter may also return early without a completion, e.g.
            // when it woke an SQPOLL thread: the deadline decides then.)
            if stop || !events.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        Ok(events.len())
    }

    fn waker(&mut self, token: Token) -> Result<Waker> {
        if self.waker.is_some() {
            return Err(Error::AlreadyExists { backend: NAME, fd: -1 });
        }
        let (waker, fd) = Waker::new()?;
        // Multishot: each eventfd write is a wake-up and so a completion;
        // the counter never needs draining.
        self.add(fd, token, Interest::READABLE, Mode::Edge)?;
        self.waker = Some(waker.clone());
        Ok(waker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_io_uring_says_why_and_how_to_fix_it() {
        let nosys = uring_unavailable(io::Error::from_raw_os_error(libc::ENOSYS)).to_string();
        assert!(nosys.contains("no io_uring") && nosys.contains("5.1"), "{nosys}");
        let nomem = uring_unavailable(io::Error::from_raw_os_error(libc::ENOMEM)).to_string();
        assert!(nomem.contains("RLIMIT_MEMLOCK"), "{nomem}");
        let perm = uring_unavailable(io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(perm.raw_os_error(), Some(libc::EPERM));
        let text = perm.to_string();
        assert!(text.contains("io_uring_disabled") || text.contains("seccomp"), "{text}");
    }
}
