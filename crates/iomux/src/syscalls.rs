//! Syscall counters: how many system calls of each kind the library issued.
//!
//! Every syscall iomux makes goes through one private module, which bumps a
//! per-thread counter for its kind just before entering the kernel. That is
//! how the lab reports "syscalls per message" without strace (perf agrees
//! with the counters). The counters are plain `Cell`s in a thread local: no
//! atomics and no lazy initialisation on the hot path.
//!
//! A counter is named after the system call actually made, as strace
//! prints it. Where an architecture lacks the classic call, iomux issues
//! the one every architecture has (aarch64 has no `epoll_wait`, `poll` or
//! `select`), so the readiness waits are counted as `epoll_pwait`, `ppoll`
//! and `pselect6` everywhere.
//!
//! ```
//! use iomux::syscalls::{counts, Syscall};
//!
//! let before = counts();
//! // ... run a loop on this thread ...
//! let spent = counts().since(&before);
//! for (kind, n) in spent.nonzero() {
//!     println!("{}: {n}", kind.name());
//! }
//! assert_eq!(spent.get(Syscall::Read), 0);
//! ```

use std::cell::Cell;

macro_rules! syscalls {
    ($($(#[$doc:meta])* $variant:ident => $name:literal),+ $(,)?) => {
        /// A kind of system call that iomux issues and counts.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(usize)]
        pub enum Syscall { $($(#[$doc])* $variant),+ }

        impl Syscall {
            /// Every kind, in counter order.
            pub const ALL: &'static [Syscall] = &[$(Syscall::$variant),+];

            /// The kernel's name for the call (as strace prints it).
            pub const fn name(self) -> &'static str {
                match self { $(Syscall::$variant => $name),+ }
            }
        }
    };
}

syscalls! {
    /// `epoll_create1`: a new epoll instance.
    EpollCreate1 => "epoll_create1",
    /// `epoll_ctl`: add, modify or delete a registration.
    EpollCtl => "epoll_ctl",
    /// `epoll_pwait` with no signal mask: the epoll wait (every
    /// architecture has it; aarch64 has no `epoll_wait`).
    EpollPwait => "epoll_pwait",
    /// `ppoll` with no signal mask: the poll backend's wait.
    Ppoll => "ppoll",
    /// `pselect6` with no signal mask: the select backend's wait.
    Pselect6 => "pselect6",
    /// `io_uring_setup`: a new ring (one per flag set tried).
    IoUringSetup => "io_uring_setup",
    /// `io_uring_enter`: submit, wait for completions, or both.
    IoUringEnter => "io_uring_enter",
    /// `io_uring_register`: (un)register the provided-buffer ring.
    IoUringRegister => "io_uring_register",
    /// `read`.
    Read => "read",
    /// `write`.
    Write => "write",
    /// `sendto` (how `send` reaches the kernel).
    Sendto => "sendto",
    /// `sendmsg`: a send of several buffers at once.
    Sendmsg => "sendmsg",
    /// `recvfrom` (how `recv` reaches the kernel).
    Recvfrom => "recvfrom",
    /// `splice`: bytes between a socket and a pipe, never in user space.
    Splice => "splice",
    /// `pipe2`: the pipe a splice passes through.
    Pipe2 => "pipe2",
    /// `accept4`.
    Accept4 => "accept4",
    /// `connect`.
    Connect => "connect",
    /// `socket`.
    Socket => "socket",
    /// `bind`.
    Bind => "bind",
    /// `listen`.
    Listen => "listen",
    /// `setsockopt`.
    Setsockopt => "setsockopt",
    /// `getsockopt`.
    Getsockopt => "getsockopt",
    /// `getsockname`.
    Getsockname => "getsockname",
    /// `getpeername`.
    Getpeername => "getpeername",
    /// `shutdown`.
    Shutdown => "shutdown",
    /// `ioctl` (FIONREAD: is input unread?; FIONBIO; SIOCATMARK: is the
    /// next byte urgent?).
    Ioctl => "ioctl",
    /// `close`.
    Close => "close",
    /// `fcntl` (F_GETFD: is a descriptor open?).
    Fcntl => "fcntl",
    /// `eventfd2`: a waker's descriptor.
    Eventfd2 => "eventfd2",
    /// `mmap`: the provided-buffer ring's data block.
    Mmap => "mmap",
    /// `munmap`.
    Munmap => "munmap",
    /// `sched_getaffinity`: the CPUs a lone loop's thread (the caller's)
    /// may run on, before the loop.
    SchedGetaffinity => "sched_getaffinity",
    /// `sched_setaffinity`: those CPUs given back after the loop.
    SchedSetaffinity => "sched_setaffinity",
    /// `rt_sigaction`: installing the SIGINT/SIGTERM handler (made by the
    /// signal-hook crate, so never counted; named in errors).
    RtSigaction => "rt_sigaction",
}

const KINDS: usize = Syscall::ALL.len();

thread_local! {
    static COUNTS: [Cell<u64>; KINDS] = const { [const { Cell::new(0) }; KINDS] };
}

/// Counts one call of `kind` on this thread (the `sys` module calls it
/// just before each syscall).
#[inline(always)]
pub(crate) fn count(kind: Syscall) {
    COUNTS.with(|c| {
        let cell = &c[kind as usize];
        cell.set(cell.get() + 1);
    });
}

/// A snapshot of syscall counters (one thread's, or several merged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallCounts([u64; KINDS]);

impl Default for SyscallCounts {
    fn default() -> Self {
        SyscallCounts([0; KINDS])
    }
}

impl SyscallCounts {
    /// How many calls of this kind.
    pub fn get(&self, kind: Syscall) -> u64 {
        self.0[kind as usize]
    }

    /// All calls of every kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The kinds with a non-zero count, in counter order.
    pub fn nonzero(&self) -> impl Iterator<Item = (Syscall, u64)> + '_ {
        Syscall::ALL.iter().map(|&k| (k, self.get(k))).filter(|&(_, n)| n > 0)
    }

    /// Counts since `earlier` (saturating, so a stale snapshot cannot underflow).
    pub fn since(&self, earlier: &SyscallCounts) -> SyscallCounts {
        let mut out = [0; KINDS];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = self.0[i].saturating_sub(earlier.0[i]);
        }
        SyscallCounts(out)
    }

    /// Adds another snapshot (e.g. another thread's) into this one.
    pub fn merge(&mut self, other: &SyscallCounts) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter()) {
            *mine += theirs;
        }
    }
}

/// The calling thread's counters since it started.
pub fn counts() -> SyscallCounts {
    COUNTS.with(|c| {
        let mut out = [0; KINDS];
        for (slot, cell) in out.iter_mut().zip(c.iter()) {
            *slot = cell.get();
        }
        SyscallCounts(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_subtract_and_merge() {
        let before = counts();
        count(Syscall::Read);
        count(Syscall::Read);
        count(Syscall::Write);
        let spent = counts().since(&before);
        assert_eq!((spent.get(Syscall::Read), spent.get(Syscall::Write), spent.total()), (2, 1, 3));
        assert_eq!(spent.nonzero().collect::<Vec<_>>(), vec![(Syscall::Read, 2), (Syscall::Write, 1)]);
        let mut merged = spent;
        merged.merge(&spent);
        assert_eq!(merged.total(), 6);
        assert_eq!(before.since(&counts()).total(), 0, "saturating");
    }

    #[test]
    fn names_are_the_calls_strace_prints() {
        assert_eq!(Syscall::EpollPwait.name(), "epoll_pwait");
        assert_eq!(Syscall::Ppoll.name(), "ppoll");
        assert_eq!(Syscall::Pselect6.name(), "pselect6");
        assert_eq!(Syscall::ALL.len(), KINDS);
    }
}
