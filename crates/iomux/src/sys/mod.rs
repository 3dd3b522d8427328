//! The only place iomux makes system calls.
//!
//! Every wrapper bumps the per-thread counter for its syscall kind
//! ([`crate::syscalls`]) just before it enters the kernel.
//!
//! The calls go through rustix's linux_raw backend, which issues the
//! syscall instruction itself on every architecture: no glibc wrapper, so
//! no pthread cancellation-point check around the blocking calls (epoll,
//! poll, select, read), which costs ~8 ns per call on top of a ~100 ns
//! kernel round trip. The ring goes through the io-uring crate
//! ([`uring`]). Where a call does not exist on every architecture, the one
//! that does is made, as rustix does, and counted under its own name:
//! `epoll_pwait`, `ppoll` and `pselect6` (each with no signal mask).
#![allow(unsafe_code)]

mod buf_ring;
pub(crate) mod net;
pub(crate) mod payload;
pub(crate) mod uring;

use crate::syscalls::{count, Syscall};
// The runtime reads the counters through `sys`, where they are bumped.
pub(crate) use crate::syscalls::{counts, SyscallCounts};
use rustix::event::{epoll, EventfdFlags, FdSetElement, FdSetIter, PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Borrows descriptor number `fd` for one syscall on a number the caller
/// holds (the library's APIs take raw numbers, as the kernel does).
#[inline(always)]
fn borrow<'a>(fd: RawFd) -> io::Result<BorrowedFd<'a>> {
    if fd < 0 {
        // No descriptor has a negative number; the kernel would say the same.
        return Err(rustix::io::Errno::BADF.into());
    }
    // SAFETY: fd is not -1 (BorrowedFd's niche) and the borrow is used for
    // one call only. Whether the number is open is the kernel's to check,
    // as for any syscall on a raw number: a closed one gives EBADF. rustix
    // passes the number through; no memory safety depends on it.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// A kernel timespec for `d` (seconds saturate at i64::MAX).
fn timespec(d: Duration) -> Timespec {
    Timespec { tv_sec: d.as_secs().min(i64::MAX as u64) as i64, tv_nsec: d.subsec_nanos().into() }
}

/// Milliseconds for a kernel timeout, rounded up so a wait never ends
/// earlier than asked; `None` waits forever (-1).
fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) if d.is_zero() => 0,
        Some(d) => {
            let ms = d.as_secs().saturating_mul(1000).saturating_add(u64::from(d.subsec_nanos().div_ceil(1_000_000)));
            ms.min(i32::MAX as u64) as i32
        }
    }
}

/// epoll_pwait's timeout: whole milliseconds that fit in an `int`, so
/// rustix always issues `epoll_pwait` (a longer one would make it switch
/// to `epoll_pwait2`).
fn epoll_timeout(timeout: Option<Duration>) -> Option<Timespec> {
    match timeout_ms(timeout) {
        -1 => None,
        ms => Some(timespec(Duration::from_millis(ms as u64))),
    }
}

// ---------------------------------------------------------------- epoll

/// What an `epoll_ctl` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EpollOp {
    Add,
    Modify,
    Delete,
}

pub(crate) fn epoll_create1() -> io::Result<OwnedFd> {
    count(Syscall::EpollCreate1);
    Ok(epoll::create(epoll::CreateFlags::CLOEXEC)?)
}

/// One `epoll_ctl` of `fd` on `epfd`, with epoll's event bits and `data`
/// handed back in its events (both ignored by a delete).
pub(crate) fn epoll_ctl(epfd: BorrowedFd<'_>, op: EpollOp, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
    let fd = borrow(fd)?;
    let (flags, data) = (epoll::EventFlags::from_bits_retain(events), epoll::EventData::new_u64(data));
    count(Syscall::EpollCtl);
    match op {
        EpollOp::Add => epoll::add(epfd, fd, data, flags),
        EpollOp::Modify => epoll::modify(epfd, fd, data, flags),
        EpollOp::Delete => epoll::delete(epfd, fd),
    }?;
    Ok(())
}

/// One `epoll_pwait` into the spare capacity of `events` (cleared first).
#[inline]
pub(crate) fn epoll_wait(
    epfd: BorrowedFd<'_>,
    events: &mut Vec<epoll::Event>,
    timeout: Option<Duration>,
) -> io::Result<usize> {
    events.clear();
    let timeout = epoll_timeout(timeout);
    count(Syscall::EpollPwait);
    Ok(epoll::wait(epfd, rustix::buffer::spare_capacity(events), timeout.as_ref())?)
}

// ---------------------------------------------------------------- poll

/// A `pollfd` for `fd` with poll(2) bits `events`, kept from registration
/// to deletion.
pub(crate) fn pollfd(fd: RawFd, events: i16) -> io::Result<PollFd<'static>> {
    if fd < 0 {
        return Err(rustix::io::Errno::BADF.into());
    }
    // SAFETY: fd is not -1 (BorrowedFd's niche). The poll poller keeps
    // this pollfd from `add`, which checked that fd is open, to `delete`,
    // and callers delete a fd before closing it. ppoll only reads the
    // number (a closed one comes back as POLLNVAL): no memory safety
    // depends on it staying open.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    Ok(PollFd::from_borrowed_fd(fd, PollFlags::from_bits_retain(events as u16)))
}

/// One `ppoll` (no signal mask) over `fds`; `revents` are updated in place.
#[inline]
pub(crate) fn poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<usize> {
    let timeout = timeout.map(timespec);
    count(Syscall::Ppoll);
    Ok(rustix::event::poll(fds, timeout.as_ref())?)
}

// ---------------------------------------------------------------- select

/// FD_SETSIZE: the most descriptors, and the highest descriptor number + 1,
/// that `select` can watch.
pub(crate) const FD_SETSIZE: usize = 1024;

const SET_BITS: usize = std::mem::size_of::<FdSetElement>() * 8;
const SET_WORDS: usize = FD_SETSIZE / SET_BITS;

/// A descriptor set of FD_SETSIZE bits, with bit operations that refuse
/// descriptors outside it.
#[derive(Clone, Copy)]
pub(crate) struct FdSet([FdSetElement; SET_WORDS]);

impl Default for FdSet {
    fn default() -> Self {
        FdSet([FdSetElement::default(); SET_WORDS])
    }
}

/// The members of an [`FdSet`] as a plain bitmap, for O(1) lookups.
pub(crate) struct FdBits([u64; FD_SETSIZE / 64]);

impl FdBits {
    pub(crate) fn contains(&self, fd: RawFd) -> bool {
        FdSet::fits(fd) && self.0[fd as usize / 64] & (1 << (fd as usize % 64)) != 0
    }
}

impl FdSet {
    /// Whether `fd` can be stored in an fd_set at all.
    pub(crate) fn fits(fd: RawFd) -> bool {
        fd >= 0 && (fd as usize) < FD_SETSIZE
    }
    pub(crate) fn insert(&mut self, fd: RawFd) {
        assert!(Self::fits(fd), "fd {fd} outside FD_SETSIZE");
        rustix::event::fd_set_insert(&mut self.0, fd);
    }
    pub(crate) fn remove(&mut self, fd: RawFd) {
        if Self::fits(fd) {
            rustix::event::fd_set_remove(&mut self.0, fd);
        }
    }
    /// The members (after a select: the ready ones), visiting only set bits.
    pub(crate) fn bits(&self) -> FdBits {
        let mut bits = [0u64; FD_SETSIZE / 64];
        for fd in FdSetIter::new(&self.0) {
            bits[fd as usize / 64] |= 1 << (fd as usize % 64);
        }
        FdBits(bits)
    }
}

/// One `pselect6` (no signal mask) over `nfds` descriptors; the sets are
/// updated in place.
pub(crate) fn select(nfds: usize, read: &mut FdSet, write: &mut FdSet, timeout: Option<Duration>) -> io::Result<usize> {
    let timeout = timeout.map(timespec);
    // The sets hold FD_SETSIZE bits: never let the kernel look past them.
    let nfds = nfds.min(FD_SETSIZE) as i32;
    count(Syscall::Pselect6);
    // SAFETY: rustix's select is unsafe for I/O safety only: the fds in
    // the sets must be open. The select poller checks each one when it is
    // registered, and callers delete a fd before closing it; a number
    // closed anyway gets EBADF, which the poller reports with the fd. For
    // memory, both sets hold FD_SETSIZE bits and nfds <= FD_SETSIZE, so the
    // kernel touches only their bits (rustix also asserts the sets cover
    // nfds).
    let n = unsafe { rustix::event::select(nfds, Some(&mut read.0), Some(&mut write.0), None, timeout.as_ref()) }?;
    Ok(n as usize)
}

// ---------------------------------------------------------------- eventfd, fcntl, fds

/// A non-blocking, close-on-exec eventfd (a waker's descriptor).
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    count(Syscall::Eventfd2);
    Ok(rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?)
}

/// Checks that `fd` is an open descriptor (`fcntl(F_GETFD)`), for backends
/// whose `add` makes no syscall of its own that would say EBADF.
pub(crate) fn fd_is_open(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Fcntl);
    rustix::io::fcntl_getfd(fd)?;
    Ok(())
}

/// The soft RLIMIT_NOFILE: one more than the highest descriptor number
/// this process may open.
pub(crate) fn nofile_soft_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Grows this process's descriptor table so that descriptors below `n`
/// need no further growth, by duplicating a descriptor to number `n - 1`
/// and closing it (the kernel never shrinks the table).
///
/// Why: the kernel grows the table by doubling, and while the process has
/// more than one thread each growth waits for an RCU grace period
/// (`expand_fdtable` calls `synchronize_rcu`). Measured here: a loop
/// thread blocked 8-23 ms at each of descriptors 256, 512, ..., 8192 while
/// 10,000 clients connected at once, and the listen queue overflowed.
pub(crate) fn reserve_fd_table(n: u64) -> io::Result<()> {
    let Some(highest) = n.checked_sub(1).and_then(|h| RawFd::try_from(h).ok()) else { return Ok(()) };
    let probe = eventfd()?;
    count(Syscall::Fcntl);
    let high = rustix::io::fcntl_dupfd_cloexec(&probe, highest)?;
    count(Syscall::Close);
    drop(high);
    count(Syscall::Close);
    drop(probe);
    Ok(())
}

/// The calling thread's CPU affinity, given back when dropped: a lone
/// loop runs on the caller's thread, and a CPU pin its handler made there
/// is the loop's, gone when the loop ends (as with a loop's own thread).
/// Left alone when it could not be read.
pub(crate) struct KeepAffinity(Option<rustix::thread::CpuSet>);

impl KeepAffinity {
    pub(crate) fn now() -> KeepAffinity {
        count(Syscall::SchedGetaffinity);
        KeepAffinity(rustix::thread::sched_getaffinity(None).ok())
    }
}

impl Drop for KeepAffinity {
    fn drop(&mut self) {
        if let Some(cpus) = &self.0 {
            count(Syscall::SchedSetaffinity);
            // Fails when none of those CPUs is usable any more (taken
            // offline, or out of the cpuset since); the thread then keeps
            // the affinity it was given during the loop.
            let _ = rustix::thread::sched_setaffinity(None, cpus);
        }
    }
}

pub(crate) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    let fd = borrow(fd)?;
    count(Syscall::Read);
    Ok(rustix::io::read(fd, buf)?)
}

pub(crate) fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let fd = borrow(fd)?;
    count(Syscall::Write);
    Ok(rustix::io::write(fd, buf)?)
}

/// Adds 1 to an eventfd (the Waker's wake).
pub(crate) fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    write(fd, &1u64.to_ne_bytes()).map(drop)
}

/// What a runtime's stop signals touch: whether one came already, the
/// runtime's stop flag, and each loop's eventfd (set once the loop has
/// its waker). All are safe to use inside a signal handler (atomics,
/// `OnceLock` reads).
#[derive(Debug)]
pub(crate) struct SignalTarget {
    signalled: AtomicBool,
    stopped: Arc<AtomicBool>,
    pub(crate) wakers: Box<[OnceLock<Arc<OwnedFd>>]>,
}

impl SignalTarget {
    /// For `loops` loops, stopping by `stopped` (their Control's flag).
    pub(crate) fn new(stopped: Arc<AtomicBool>, loops: usize) -> SignalTarget {
        SignalTarget {
            signalled: AtomicBool::new(false),
            stopped,
            wakers: (0..loops).map(|_| OnceLock::new()).collect(),
        }
    }
}

/// Makes `signal` set `target`'s stop flag and wake each of its loops,
/// from the signal handler itself, so no thread has to wait for signals
/// (a process whose one loop runs on its one thread stays
/// single-threaded: the kernel then takes no file reference per syscall).
/// The second signal to reach this target acts as by default: a second
/// Ctrl-C ends the process.
pub(crate) fn stop_on_signal(signal: i32, target: Arc<SignalTarget>) -> io::Result<signal_hook::SigId> {
    let action = move || {
        if target.signalled.swap(true, Ordering::SeqCst) {
            let _ = signal_hook::low_level::emulate_default_handler(signal);
            return;
        }
        target.stopped.store(true, Ordering::SeqCst);
        // Either this sees a loop's waker, or that loop, setting it, then
        // sees the stop (Core::wake_with fences the same way).
        std::sync::atomic::fence(Ordering::SeqCst);
        for fd in target.wakers.iter().filter_map(OnceLock::get) {
            // Not `write`: its syscall count is a plain thread-local
            // update, which this handler may have interrupted.
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
    };
    // SAFETY: the action is async-signal-safe: atomic loads and stores,
    // `OnceLock::get` (an atomic load), write(2) to eventfds the target
    // keeps open, and `emulate_default_handler` (async-signal-safe by its
    // documentation). It allocates nothing, takes no lock and does not
    // panic.
    unsafe { signal_hook::low_level::register(signal, action) }
}

/// Resets an eventfd to zero; EAGAIN (already zero) is not an error.
pub(crate) fn eventfd_drain(fd: RawFd) -> io::Result<()> {
    let mut buf = [0u8; 8];
    match read(fd, &mut buf) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
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
        assert_eq!(timeout_ms(Some(Duration::from_secs(u64::MAX))), i32::MAX);
        let ts = epoll_timeout(Some(Duration::from_micros(1500))).unwrap();
        assert_eq!((ts.tv_sec, ts.tv_nsec), (0, 2_000_000));
        assert!(epoll_timeout(None).is_none());
    }

    #[test]
    fn fd_set_refuses_numbers_outside_it() {
        let mut set = FdSet::default();
        assert!(FdSet::fits(1023) && !FdSet::fits(1024) && !FdSet::fits(-1));
        set.insert(1023);
        set.insert(3);
        assert!(set.bits().contains(1023) && set.bits().contains(3) && !set.bits().contains(1024));
        set.remove(4096); // outside: a no-op, not a write past the set
        set.remove(1023);
        assert!(!set.bits().contains(1023) && set.bits().contains(3));
    }

    #[test]
    fn syscalls_report_errno_and_are_counted() {
        let before = counts();
        let err = read(-1, &mut [0u8; 1]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        assert_eq!(counts().since(&before).total(), 0, "a negative fd makes no syscall");
        let (r, w) = std::io::pipe().unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(write(w.as_raw_fd(), b"ab").unwrap(), 2);
        let mut buf = [0u8; 4];
        assert_eq!(read(r.as_raw_fd(), &mut buf).unwrap(), 2);
        let spent = counts().since(&before);
        assert_eq!((spent.get(Syscall::Read), spent.get(Syscall::Write), spent.total()), (1, 1, 2));
    }
}
