//! The lab's door into the library's internals, for `iomux bench`
//! (cargo feature `lab`, off by default).
//!
//! E1 (syscall-rate) compares the library's waits with what one
//! `io_uring_enter` costs on a ring with many polls armed. The poller API
//! never makes that call when nothing is pending (it reads the shared
//! completion ring instead), so the experiment reaches the ring here; the
//! uring-features experiment times the same enter with the ring's
//! descriptor registered. Nothing else of the library's private syscall
//! layer is exposed.

use crate::sys::uring::Ring;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// An io_uring instance with a one-shot `POLLIN` poll (IORING_OP_POLL_ADD)
/// armed on each of a set of descriptors, for timing empty enters.
pub struct PollRing {
    ring: Ring,
}

impl PollRing {
    /// Sets up a ring (256 submission slots, cooperative task running
    /// where the kernel has it, as the poller's rings), arms a poll on
    /// each of `fds` and submits them. The polls hold references to the
    /// files, not the descriptors: closing a descriptor early is harmless.
    pub fn new<F: AsFd>(fds: &[F]) -> io::Result<PollRing> {
        let mut ring = Ring::new(256, None)?;
        for (i, fd) in fds.iter().enumerate() {
            ring.push_poll_add(fd.as_fd().as_raw_fd(), libc::POLLIN as u32, false, i as u64)?;
        }
        ring.enter(0, None)?;
        Ok(PollRing { ring })
    }

    /// Registers the ring's descriptor with the calling thread
    /// (IORING_REGISTER_RING_FDS), as a loop with the `uring_register_ring`
    /// feature does: later enters from this thread pass its index instead
    /// of the descriptor, which the kernel then need not look up.
    pub fn register_ring_fd(&mut self) -> io::Result<()> {
        self.ring.register_ring_fd()
    }

    /// One `io_uring_enter(GETEVENTS)` that waits for nothing, counted
    /// as [`Syscall::IoUringEnter`](crate::Syscall::IoUringEnter): what an
    /// empty wait costs when it does enter the kernel.
    pub fn enter_getevents(&mut self) -> io::Result<()> {
        self.ring.enter_getevents().map(drop)
    }
}
