//! The lab's baselines "written directly on libc": glibc's wrappers,
//! uncounted, exactly as a C program would call them. The library's own
//! waits (counted, through rustix) are measured against these.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Turns a `-1` return into the thread's errno.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `getppid`: the cheapest syscall there is, the floor for any wait.
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

/// A raw epoll instance with `fds` registered for readability, each with
/// its index as data.
pub fn epoll_with(fds: &[OwnedFd]) -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers.
    let epfd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: a successful epoll_create1 returns a new descriptor nobody
    // else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(epfd) };
    for (i, fd) in fds.iter().enumerate() {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
        // SAFETY: ev is a live epoll_event the kernel only reads.
        check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) })
            .map_err(|e| io::Error::new(e.kind(), format!("epoll_ctl ADD fd {}: {e}", fd.as_raw_fd())))?;
    }
    Ok(epoll)
}

/// `epoll_wait` into the spare capacity of `events` (cleared first).
#[inline(always)]
pub fn epoll_wait(
    epfd: BorrowedFd<'_>,
    events: &mut Vec<libc::epoll_event>,
    timeout_ms: libc::c_int,
) -> io::Result<usize> {
    events.clear();
    let spare: &mut [MaybeUninit<libc::epoll_event>] = events.spare_capacity_mut();
    let max = spare.len().min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: the kernel writes at most `max` entries into the spare
    // capacity, which is that long; after success exactly `n` of them are
    // initialised, so set_len(n) exposes only written entries.
    unsafe {
        let n = check(libc::epoll_wait(epfd.as_raw_fd(), spare.as_mut_ptr().cast(), max, timeout_ms))? as usize;
        events.set_len(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn baselines_report_readiness_and_errors() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let reader = OwnedFd::from(reader);
        let epoll = epoll_with(std::slice::from_ref(&reader)).unwrap();
        let mut events = Vec::with_capacity(4);
        assert_eq!(epoll_wait(epoll.as_fd(), &mut events, 0).unwrap(), 0);
        std::io::Write::write_all(&mut writer, b"x").unwrap();
        assert_eq!(epoll_wait(epoll.as_fd(), &mut events, 0).unwrap(), 1);
        let mut fds = [libc::pollfd { fd: reader.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        assert_eq!(poll(&mut fds, 0).unwrap(), 1);
        fds[0].fd = i32::MAX;
        assert_eq!(poll(&mut fds, 0).unwrap(), 1, "POLLNVAL");
        assert!(getppid() > 0);
    }
}
