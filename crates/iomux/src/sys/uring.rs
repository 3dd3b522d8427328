//! io_uring: the ring, and a safe, counted interface to it.
//!
//! Only operations whose submission entries point at no user memory are
//! offered here (poll add/remove), so pushing them is safe whatever the
//! caller does afterwards. `io_uring_enter` is issued by [`Ring::enter`]
//! alone, which decides (as liburing does) whether a syscall is needed at
//! all and counts it when it is.
#![allow(unsafe_code)]

use super::direct::syscall;
use super::{count, Syscall};
use io_uring::{opcode, squeue, types, EnterFlags, IoUring};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// How a ring was set up, after falling back from what was asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingSetup {
    /// IORING_SETUP_COOP_TASKRUN | TASKRUN_FLAG: no IPI per completion;
    /// the kernel flags pending work in the SQ ring instead.
    pub coop_taskrun: bool,
    /// IORING_SETUP_SQPOLL: a kernel thread consumes submissions.
    pub sqpoll: bool,
}

/// `struct io_uring_getevents_arg` (include/uapi/linux/io_uring.h).
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// `struct __kernel_timespec`.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// One io_uring instance.
pub struct Ring {
    ring: IoUring,
    setup: RingSetup,
}

/// What a completion said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub user_data: u64,
    pub result: i32,
    pub flags: u32,
}

impl Completion {
    /// IORING_CQE_F_MORE: a multishot request stays armed.
    pub fn more(&self) -> bool {
        io_uring::cqueue::more(self.flags)
    }
}

impl Ring {
    /// Sets up a ring of `entries` submission slots (and 8x that many
    /// completion slots, so a burst of readiness rarely overflows), asking
    /// for cooperative task running and falling back when the kernel lacks it.
    pub fn new(entries: u32, sqpoll_idle: Option<Duration>) -> io::Result<Ring> {
        let mut last_err = None;
        for coop in [true, false] {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(entries.saturating_mul(8)).setup_clamp();
            if coop {
                builder.setup_coop_taskrun().setup_taskrun_flag();
            }
            if let Some(idle) = sqpoll_idle {
                builder.setup_sqpoll(idle.as_millis().min(u32::MAX as u128) as u32);
            }
            count(Syscall::IoUringSetup);
            match builder.build(entries) {
                Ok(ring) => {
                    let setup = RingSetup { coop_taskrun: coop, sqpoll: sqpoll_idle.is_some() };
                    return Ok(Ring { ring, setup });
                }
                // EINVAL: this kernel does not know a flag; try with fewer.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
    }

    pub fn setup(&self) -> RingSetup {
        self.setup
    }

    /// Whether `io_uring_enter` can take a timeout (IORING_FEAT_EXT_ARG, 5.11).
    pub fn has_ext_arg(&self) -> bool {
        self.ring.params().is_feature_ext_arg()
    }

    /// Queues IORING_OP_POLL_ADD for `fd` with `mask` (poll(2) bits);
    /// `multishot` keeps it armed across events (IORING_POLL_ADD_MULTI).
    pub fn push_poll_add(&mut self, fd: RawFd, mask: u32, multishot: bool, user_data: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), mask).multi(multishot).build().user_data(user_data);
        self.push(entry)
    }

    /// Queues IORING_OP_POLL_REMOVE of the poll whose user_data is `target`.
    pub fn push_poll_remove(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        self.push(opcode::PollRemove::new(target).build().user_data(user_data))
    }

    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entries built by this module (poll add/remove)
            // reference no user memory, only a descriptor number and a
            // user_data value, so nothing the kernel reads can dangle.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok(());
            }
            // Submission queue full: hand what is queued to the kernel.
            self.enter(0, None)?;
        }
    }

    /// Submissions queued and not yet handed to the kernel.
    pub fn pending_submissions(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Whether the kernel holds completions or task work that only an
    /// `io_uring_enter` will flush into the completion ring.
    pub fn kernel_has_work(&mut self) -> bool {
        let sq = self.ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// Submits what is queued and waits for at least `min_complete`
    /// completions, at most `timeout`. Makes no syscall when nothing needs
    /// one (SQPOLL thread awake and nothing to wait for). Returns how many
    /// submissions the kernel took. ETIME (timeout) and EINTR are errors
    /// here; callers decide what they mean.
    pub fn enter(&mut self, min_complete: u32, timeout: Option<Duration>) -> io::Result<usize> {
        let (to_submit, taskrun, overflow, need_wakeup) = {
            let mut sq = self.ring.submission();
            sq.sync();
            (sq.len() as u32, sq.taskrun(), sq.cq_overflow(), self.setup.sqpoll && sq.need_wakeup())
        };
        let mut flags = 0u32;
        if min_complete > 0 || taskrun || overflow {
            flags |= EnterFlags::GETEVENTS.bits();
        }
        if self.setup.sqpoll {
            if need_wakeup {
                flags |= EnterFlags::SQ_WAKEUP.bits();
            } else if flags & EnterFlags::GETEVENTS.bits() == 0 {
                // The SQ thread is awake and will take the entries itself.
                return Ok(to_submit as usize);
            }
        }
        if to_submit == 0 && flags == 0 {
            return Ok(0);
        }
        count(Syscall::IoUringEnter);
        let fd = self.ring.as_raw_fd();
        match timeout {
            Some(t) if min_complete > 0 => {
                let ts = KernelTimespec {
                    tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
                    tv_nsec: i64::from(t.subsec_nanos()),
                };
                let arg = GeteventsArg {
                    sigmask: 0,
                    sigmask_sz: 0,
                    min_wait_usec: 0,
                    ts: &ts as *const KernelTimespec as u64,
                };
                let flags = flags | EnterFlags::EXT_ARG.bits();
                let arg_ptr: *const GeteventsArg = &arg;
                // SAFETY: `arg` and the timespec it points to live on our
                // stack until the call returns; EXT_ARG tells the kernel to
                // read `arg` as io_uring_getevents_arg, whose layout
                // GeteventsArg mirrors, and its size is passed with it.
                unsafe {
                    syscall!(
                        libc::SYS_io_uring_enter,
                        fd,
                        to_submit,
                        min_complete,
                        flags,
                        arg_ptr,
                        size_of::<GeteventsArg>()
                    )
                }
            }
            // SAFETY: no argument pointer is passed, so the kernel reads no
            // user memory beyond the mapped rings.
            _ => unsafe { syscall!(libc::SYS_io_uring_enter, fd, to_submit, min_complete, flags, 0usize, 0usize) },
        }
    }

    /// One `io_uring_enter(GETEVENTS)` that waits for nothing: what an
    /// empty wait costs when it does enter the kernel (the lab's baseline).
    pub fn enter_getevents(&mut self) -> io::Result<usize> {
        count(Syscall::IoUringEnter);
        let fd = self.ring.as_raw_fd();
        // SAFETY: no argument pointer; the kernel only reads the mapped rings.
        unsafe { syscall!(libc::SYS_io_uring_enter, fd, 0usize, 0usize, EnterFlags::GETEVENTS.bits(), 0usize, 0usize) }
    }

    /// Takes the next completion off the completion ring (no syscall).
    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.ring.completion().next().map(|cqe| Completion {
            user_data: cqe.user_data(),
            result: cqe.result(),
            flags: cqe.flags(),
        })
    }

    /// Whether the completion ring is empty (no syscall).
    pub fn completions_empty(&mut self) -> bool {
        self.ring.completion().is_empty()
    }
}
