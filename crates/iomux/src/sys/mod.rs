//! The only place iomux makes raw system calls.
//!
//! Every wrapper bumps a per-thread counter for its syscall kind before it
//! enters the kernel, so experiments can report "syscalls per message"
//! without strace. The counters are plain `Cell`s in a `const`-initialised
//! thread local: no atomics and no lazy-init branch on the hot path.
//!
//! The wrappers issue the `syscall` instruction directly ([`direct`]), not
//! glibc's cancellation-point wrappers. The [`raw`] submodule holds the
//! glibc versions, uncounted, for the lab's baselines ("the same loop
//! written directly on libc").
#![allow(unsafe_code)]

mod direct;
pub mod net;
pub mod uring;

use direct::syscall;

use std::cell::Cell;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

macro_rules! syscalls {
    ($($variant:ident => $name:literal),+ $(,)?) => {
        /// A kind of system call that iomux issues and counts.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(usize)]
        pub enum Syscall { $($variant),+ }

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
    EpollCreate1 => "epoll_create1",
    EpollCtl => "epoll_ctl",
    EpollWait => "epoll_wait",
    Poll => "poll",
    Select => "select",
    IoUringSetup => "io_uring_setup",
    IoUringEnter => "io_uring_enter",
    IoUringRegister => "io_uring_register",
    Read => "read",
    Write => "write",
    Recv => "recvfrom",
    Send => "sendto",
    Accept4 => "accept4",
    Connect => "connect",
    Socket => "socket",
    Bind => "bind",
    Listen => "listen",
    Setsockopt => "setsockopt",
    Getsockopt => "getsockopt",
    Getsockname => "getsockname",
    Shutdown => "shutdown",
    Close => "close",
    Fcntl => "fcntl",
    Eventfd2 => "eventfd2",
    Getppid => "getppid",
    Prlimit => "prlimit64",
    Getrusage => "getrusage",
    Mmap => "mmap",
    Munmap => "munmap",
}

const KINDS: usize = Syscall::ALL.len();

thread_local! {
    static COUNTS: [Cell<u64>; KINDS] = const { [const { Cell::new(0) }; KINDS] };
}

#[inline(always)]
fn count(kind: Syscall) {
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

/// Turns a `-1` return into the thread's errno.
#[inline(always)]
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Milliseconds for a kernel timeout, rounded up so a wait never ends
/// earlier than asked; `None` waits forever (-1).
pub fn timeout_ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        Some(d) if d.is_zero() => 0,
        Some(d) => {
            let ms = d.as_secs().saturating_mul(1000).saturating_add(u64::from(d.subsec_nanos().div_ceil(1_000_000)));
            ms.min(libc::c_int::MAX as u64) as libc::c_int
        }
    }
}

// ---------------------------------------------------------------- epoll

pub fn epoll_create1() -> io::Result<OwnedFd> {
    count(Syscall::EpollCreate1);
    // SAFETY: epoll_create1 takes no pointers; on success the returned fd is
    // new and owned by nobody else, so OwnedFd may take it.
    unsafe {
        let fd = syscall!(libc::SYS_epoll_create1, libc::EPOLL_CLOEXEC)?;
        Ok(OwnedFd::from_raw_fd(fd as RawFd))
    }
}

pub fn epoll_ctl(epfd: RawFd, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
    count(Syscall::EpollCtl);
    let mut ev = libc::epoll_event { events, u64: data };
    let ev_ptr: *mut libc::epoll_event = &mut ev;
    // SAFETY: `ev` is a valid epoll_event on our stack for the whole call;
    // the kernel ignores it for EPOLL_CTL_DEL.
    unsafe { syscall!(libc::SYS_epoll_ctl, epfd, op, fd, ev_ptr) }.map(drop)
}

/// One `epoll_wait` into the spare capacity of `events` (cleared first).
#[inline]
pub fn epoll_wait(epfd: RawFd, events: &mut Vec<libc::epoll_event>, timeout_ms: libc::c_int) -> io::Result<usize> {
    count(Syscall::EpollWait);
    events.clear();
    let spare: &mut [MaybeUninit<libc::epoll_event>] = events.spare_capacity_mut();
    let max = spare.len().min(libc::c_int::MAX as usize);
    // SAFETY: the kernel writes at most `max` entries into the spare
    // capacity, which is that long; after success exactly `n` of them are
    // initialised, so set_len(n) exposes only written entries.
    unsafe {
        let n = syscall!(libc::SYS_epoll_wait, epfd, spare.as_mut_ptr(), max, timeout_ms)?;
        events.set_len(n);
        Ok(n)
    }
}

// ---------------------------------------------------------------- poll

#[inline]
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    count(Syscall::Poll);
    // SAFETY: fds is a live, writable slice of fds.len() pollfd entries.
    unsafe { syscall!(libc::SYS_poll, fds.as_mut_ptr(), fds.len(), timeout_ms) }
}

// ---------------------------------------------------------------- select

/// FD_SETSIZE: the most descriptors, and the highest descriptor number + 1,
/// that `select` can watch.
pub const FD_SETSIZE: usize = libc::FD_SETSIZE;

/// A descriptor set with the kernel's `fd_set` layout (1024 bits), with
/// safe bit operations that refuse descriptors outside it.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct FdSet([u64; FD_SETSIZE / 64]);

const _: () = assert!(std::mem::size_of::<FdSet>() == std::mem::size_of::<libc::fd_set>());

impl Default for FdSet {
    fn default() -> Self {
        FdSet([0; FD_SETSIZE / 64])
    }
}

impl FdSet {
    /// Whether `fd` can be stored in an fd_set at all.
    pub fn fits(fd: RawFd) -> bool {
        fd >= 0 && (fd as usize) < FD_SETSIZE
    }
    pub fn insert(&mut self, fd: RawFd) {
        assert!(Self::fits(fd), "fd {fd} outside FD_SETSIZE");
        self.0[fd as usize / 64] |= 1 << (fd as usize % 64);
    }
    pub fn remove(&mut self, fd: RawFd) {
        if Self::fits(fd) {
            self.0[fd as usize / 64] &= !(1 << (fd as usize % 64));
        }
    }
    pub fn contains(&self, fd: RawFd) -> bool {
        Self::fits(fd) && self.0[fd as usize / 64] & (1 << (fd as usize % 64)) != 0
    }
    fn as_mut_ptr(&mut self) -> *mut libc::fd_set {
        (self as *mut FdSet).cast()
    }
}

/// One `select` over `nfds` descriptors; the sets are updated in place.
pub fn select(nfds: usize, read: &mut FdSet, write: &mut FdSet, timeout: Option<Duration>) -> io::Result<usize> {
    count(Syscall::Select);
    let mut tv = timeout.map(|d| libc::timeval {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        // Round up to the next microsecond: never wake earlier than asked.
        tv_usec: d.subsec_nanos().div_ceil(1000) as libc::suseconds_t,
    });
    let tv_ptr = tv.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut libc::timeval);
    // The sets hold FD_SETSIZE bits: never let the kernel look past them.
    let nfds = nfds.min(FD_SETSIZE);
    // SAFETY: both sets have fd_set's size and layout (asserted above) and
    // nfds <= FD_SETSIZE, so the kernel touches only their 1024 bits; tv_ptr
    // is null or points at a live timeval on our stack.
    unsafe { syscall!(libc::SYS_select, nfds, read.as_mut_ptr(), write.as_mut_ptr(), 0usize, tv_ptr) }
}

// ---------------------------------------------------------------- eventfd, fcntl, fds

pub fn eventfd() -> io::Result<OwnedFd> {
    count(Syscall::Eventfd2);
    // SAFETY: no pointers; a successful return is a fresh fd we own.
    unsafe {
        let fd = syscall!(libc::SYS_eventfd2, 0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?;
        Ok(OwnedFd::from_raw_fd(fd as RawFd))
    }
}

/// Checks that `fd` is an open descriptor (`fcntl(F_GETFD)`), for backends
/// whose `add` makes no syscall of its own that would say EBADF.
pub fn fd_is_open(fd: RawFd) -> io::Result<()> {
    count(Syscall::Fcntl);
    // SAFETY: F_GETFD reads only the descriptor flags; no pointers.
    unsafe { syscall!(libc::SYS_fcntl, fd, libc::F_GETFD) }.map(drop)
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    count(Syscall::Read);
    // SAFETY: buf is a live, writable slice of buf.len() bytes.
    unsafe { syscall!(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) }
}

pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    count(Syscall::Write);
    // SAFETY: buf is a live slice of buf.len() bytes, only read by the kernel.
    unsafe { syscall!(libc::SYS_write, fd, buf.as_ptr(), buf.len()) }
}

/// Adds 1 to an eventfd (the Waker's wake).
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    write(fd, &1u64.to_ne_bytes()).map(drop)
}

/// Resets an eventfd to zero; EAGAIN (already zero) is not an error.
pub fn eventfd_drain(fd: RawFd) -> io::Result<()> {
    let mut buf = [0u8; 8];
    match read(fd, &mut buf) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// `getppid`: the cheapest syscall there is, the floor for any wait.
#[inline]
pub fn getppid() -> u32 {
    count(Syscall::Getppid);
    // SAFETY: getppid takes no arguments and cannot fail.
    unsafe { syscall!(libc::SYS_getppid) }.map_or(0, |p| p as u32)
}

// ---------------------------------------------------------------- limits

/// RLIMIT_NOFILE as (soft, hard).
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    count(Syscall::Prlimit);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: lim is a live rlimit the kernel fills in.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let (soft, hard) = nofile_limit()?;
    if soft >= hard {
        return Ok(soft);
    }
    count(Syscall::Prlimit);
    let lim = libc::rlimit { rlim_cur: hard, rlim_max: hard };
    // SAFETY: lim is a live rlimit the kernel only reads.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(hard)
}

/// Sets the soft RLIMIT_NOFILE (at most the hard limit).
pub fn set_nofile_soft(limit: u64) -> io::Result<()> {
    let (_, hard) = nofile_limit()?;
    count(Syscall::Prlimit);
    let lim = libc::rlimit { rlim_cur: limit.min(hard), rlim_max: hard };
    // SAFETY: lim is a live rlimit the kernel only reads.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(())
}

/// The descriptor numbers this process has open now (from /proc/self/fd).
pub fn open_fd_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count().saturating_sub(1))
}

/// Uncounted syscalls for the lab's "written directly on libc" baselines.
/// The counted wrappers above call these too, so both paths run the same
/// code but for the counter.
pub mod raw {
    use super::*;

    #[inline(always)]
    pub fn getppid() -> u32 {
        // SAFETY: getppid takes no arguments and cannot fail.
        unsafe { libc::getppid() as u32 }
    }

    #[inline(always)]
    pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
        // SAFETY: fds is a live, writable slice of fds.len() pollfd entries.
        check(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }).map(|n| n as usize)
    }

    /// `epoll_wait` into the spare capacity of `events` (cleared first).
    #[inline(always)]
    pub fn epoll_wait(epfd: RawFd, events: &mut Vec<libc::epoll_event>, timeout_ms: libc::c_int) -> io::Result<usize> {
        events.clear();
        let spare: &mut [MaybeUninit<libc::epoll_event>] = events.spare_capacity_mut();
        let max = spare.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: the kernel writes at most `max` entries into the spare
        // capacity, which is that long; after success exactly `n` of them
        // are initialised, so set_len(n) exposes only written entries.
        unsafe {
            let n = check(libc::epoll_wait(epfd, spare.as_mut_ptr().cast(), max, timeout_ms))? as usize;
            events.set_len(n);
            Ok(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(timeout_ms(None), -1);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(timeout_ms(Some(Duration::from_micros(1500))), 2);
        assert_eq!(timeout_ms(Some(Duration::from_millis(7))), 7);
        assert_eq!(timeout_ms(Some(Duration::from_secs(u64::MAX))), libc::c_int::MAX);
    }

    #[test]
    fn fd_set_refuses_numbers_outside_it() {
        let mut set = FdSet::default();
        assert!(FdSet::fits(1023) && !FdSet::fits(1024) && !FdSet::fits(-1));
        set.insert(1023);
        assert!(set.contains(1023) && !set.contains(1024));
        set.remove(4096); // outside: a no-op, not a write past the set
        set.remove(1023);
        assert!(!set.contains(1023));
    }

    #[test]
    fn direct_syscalls_report_errno() {
        let err = read(-1, &mut [0u8; 1]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        assert_eq!(getppid(), raw::getppid());
        let counted = counts();
        getppid();
        assert_eq!(counts().since(&counted).get(Syscall::Getppid), 1);
    }
}
