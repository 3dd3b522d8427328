//! io_uring: the ring, and a safe, counted interface to it.
//!
//! The io-uring crate does most of the work: setup, the mapped rings,
//! entries, registration. This module adds what the crate leaves to its
//! users: a counter bump for every enter and register made on our behalf,
//! the decision (as liburing makes it) whether an enter is needed at all,
//! `io_uring_enter` itself (so that one path serves a registered ring fd
//! and a batched wait alike), memory that must outlive requests in flight
//! (send buffers until their zero-copy notification, connect addresses,
//! the provided-buffer ring of [`super::buf_ring`]), and probes of what
//! the kernel offers.
//!
//! Every operation offered here is safe whatever the caller does next:
//! entries point at no user memory (poll, accept, cancel), or at memory the
//! ring itself owns until the kernel is done with it.
#![allow(unsafe_code)]

use super::buf_ring::BufRing;
use super::net::Fd;
use super::payload::Payload;
use crate::syscalls::{count, Syscall};
use io_uring::types::{SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, types, EnterFlags, IoUring};
use rustc_hash::FxHashMap;
use rustix::net::SocketAddrAny;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

// From the kernel's uapi io_uring.h (the crate does not export them).
/// io_uring_register opcodes: (un)register the ring's own descriptor.
const IORING_REGISTER_RING_FDS: libc::c_uint = 20;
const IORING_UNREGISTER_RING_FDS: libc::c_uint = 21;
/// SEND_ZC: report in the notification whether the kernel copied anyway.
const IORING_SEND_ZC_REPORT_USAGE: u16 = 8;
/// In a zero-copy notification's result: the data was copied.
const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;
/// A completion's IORING_CQE_F_MORE bit.
const IORING_CQE_F_MORE: u32 = 1 << 1;

/// `struct io_uring_rsrc_update`, IORING_REGISTER_RING_FDS's argument.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// user_data whose top four bits are 0xE belongs to the ring itself
/// (zero-copy sends); callers' user_data must not use that pattern.
const OWN_TAG: u64 = 0xE << 60;
const TAG_MASK: u64 = 0xF << 60;

/// How long a batched wait (a minimum wait) may sleep when the caller
/// gave no timeout: the kernel ends such a wait at the minimum wait even
/// with nothing completed, so an idle loop would wake every few
/// microseconds without this bound.
const BATCHED_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// How a ring was set up, after falling back from what was asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingSetup {
    /// IORING_SETUP_COOP_TASKRUN | TASKRUN_FLAG: no IPI per completion;
    /// the kernel flags pending work in the SQ ring instead.
    pub(crate) coop_taskrun: bool,
    /// IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN.
    pub(crate) defer_taskrun: bool,
    /// IORING_SETUP_SQPOLL: a kernel thread consumes submissions.
    pub(crate) sqpoll: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    DeferTaskrun,
    CoopTaskrun,
    SingleIssuer,
    Plain,
}

/// One io_uring instance.
pub(crate) struct Ring {
    ring: IoUring,
    setup: RingSetup,
    buffers: Option<BufRing>,
    /// Memory the kernel reads or writes for requests in flight, keyed by
    /// their user_data; freed only when their final completion arrives.
    owned: FxHashMap<u64, Owned>,
    /// Requests pushed whose final completion has not arrived.
    in_flight: usize,
    /// The ring's index among this thread's registered ring descriptors
    /// (IORING_REGISTER_RING_FDS): enters pass it instead of the fd.
    registered: Option<u32>,
    /// Zero-copy sends whose result has not arrived: the caller's
    /// user_data, and the ring's own one the request carries.
    zero_copy_live: FxHashMap<u64, u64>,
    zero_copy_serial: u64,
    zero_copy: ZeroCopyCounts,
}

/// Zero-copy sends made, and how many of them the kernel copied anyway
/// (IORING_NOTIF_USAGE_ZC_COPIED: loopback always does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ZeroCopyCounts {
    pub(crate) sent: u64,
    pub(crate) copied: u64,
}

/// What an in-flight request owns.
enum Owned {
    Send(Payload),
    /// A gathered send: its buffers, and the message header and iovecs
    /// that point into them.
    SendMsg(Payload, #[allow(dead_code)] Box<Gather>),
    /// A zero-copy send's buffer: the kernel may read it until the
    /// notification, after the send's own result.
    ZeroCopy {
        user_data: u64,
        buf: Vec<u8>,
        len: usize,
    },
    /// Held only so the address outlives the connect.
    Addr(#[allow(dead_code)] Box<SocketAddrAny>),
}

/// What a completion said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) user_data: u64,
    pub(crate) result: i32,
    pub(crate) flags: u32,
    /// A send's buffer, handed back once the kernel is done with it: at a
    /// plain send's completion; for a zero-copy send, at its notification
    /// (or with the result when no notification follows; or a copy of it,
    /// when the send was short and the rest must go out of a buffer the
    /// kernel still holds).
    pub(crate) returned: Option<Payload>,
}

/// What IORING_OP_SENDMSG reads: a header whose iovecs point into the
/// payload's buffers (heap blocks, which do not move with the payload).
pub(crate) struct Gather {
    msg: libc::msghdr,
    _iov: Vec<libc::iovec>,
}

// SAFETY: the raw pointers point into the iovecs this Gather owns and
// into the payload's heap buffers, which sit beside it in the same
// `Owned` entry and move between threads with it; nothing in them is
// tied to a thread.
unsafe impl Send for Gather {}

impl Gather {
    fn new(slices: &[std::io::IoSlice<'_>]) -> Box<Gather> {
        let iov: Vec<libc::iovec> = slices
            .iter()
            .map(|s| libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() })
            .collect();
        // SAFETY: msghdr is a C struct of pointers and integers, for which
        // all zeroes is valid (no name, no control data, no flags).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        Box::new(Gather { msg, _iov: iov })
    }
}

impl Completion {
    /// IORING_CQE_F_MORE: a multishot request stays armed.
    pub(crate) fn more(&self) -> bool {
        cqueue::more(self.flags)
    }

    /// The provided buffer this completion filled (IORING_CQE_F_BUFFER).
    pub(crate) fn buffer_id(&self) -> Option<u16> {
        cqueue::buffer_select(self.flags)
    }

    /// A zero-copy send's notification (IORING_CQE_F_NOTIF): the kernel
    /// no longer reads the buffer, handed back in `returned`. The send's
    /// own result came in an earlier completion.
    pub(crate) fn is_notification(&self) -> bool {
        cqueue::notif(self.flags)
    }
}

impl Ring {
    /// Sets up a ring of `entries` submission slots (and 8x that many
    /// completion slots, so a burst of readiness rarely overflows), asking
    /// for cooperative task running and falling back when the kernel lacks it.
    pub(crate) fn new(entries: u32, sqpoll_idle: Option<Duration>) -> io::Result<Ring> {
        Self::with_flavours(entries, sqpoll_idle, &[Flavour::CoopTaskrun, Flavour::Plain])
    }

    /// A ring for a loop that is its only user and enters it once per turn
    /// with GETEVENTS: SINGLE_ISSUER|DEFER_TASKRUN (completions are posted
    /// only when we ask, in a batch), falling back to COOP_TASKRUN, then
    /// to no flags, as the kernel allows. SQPOLL excludes DEFER_TASKRUN.
    pub(crate) fn for_loop(entries: u32, sqpoll_idle: Option<Duration>) -> io::Result<Ring> {
        let flavours: &[Flavour] = if sqpoll_idle.is_some() {
            &[Flavour::SingleIssuer, Flavour::Plain]
        } else {
            &[Flavour::DeferTaskrun, Flavour::CoopTaskrun, Flavour::Plain]
        };
        Self::with_flavours(entries, sqpoll_idle, flavours)
    }

    fn with_flavours(entries: u32, sqpoll_idle: Option<Duration>, flavours: &[Flavour]) -> io::Result<Ring> {
        let mut last_err = None;
        for &flavour in flavours {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(entries.saturating_mul(8)).setup_clamp();
            match flavour {
                Flavour::DeferTaskrun => {
                    builder.setup_single_issuer().setup_defer_taskrun();
                }
                Flavour::CoopTaskrun => {
                    builder.setup_coop_taskrun().setup_taskrun_flag();
                }
                Flavour::SingleIssuer => {
                    builder.setup_single_issuer();
                }
                Flavour::Plain => {}
            }
            if let Some(idle) = sqpoll_idle {
                builder.setup_sqpoll(idle.as_millis().min(u32::MAX as u128) as u32);
            }
            count(Syscall::IoUringSetup);
            match builder.build(entries) {
                Ok(ring) => {
                    let setup = RingSetup {
                        coop_taskrun: flavour == Flavour::CoopTaskrun,
                        defer_taskrun: flavour == Flavour::DeferTaskrun,
                        sqpoll: sqpoll_idle.is_some(),
                    };
                    return Ok(Ring {
                        ring,
                        setup,
                        buffers: None,
                        owned: FxHashMap::default(),
                        in_flight: 0,
                        registered: None,
                        zero_copy_live: FxHashMap::default(),
                        zero_copy_serial: 0,
                        zero_copy: ZeroCopyCounts::default(),
                    });
                }
                // EINVAL: this kernel does not know a flag; try with fewer.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
    }

    pub(crate) fn setup(&self) -> RingSetup {
        self.setup
    }

    /// Whether `io_uring_enter` can take a timeout (IORING_FEAT_EXT_ARG, 5.11).
    pub(crate) fn has_ext_arg(&self) -> bool {
        self.ring.params().is_feature_ext_arg()
    }

    /// Whether a wait can take a minimum wait (IORING_FEAT_MIN_TIMEOUT, 6.12).
    pub(crate) fn has_min_wait(&self) -> bool {
        self.ring.params().is_feature_min_timeout()
    }

    /// Whether receives can fill several buffers at once
    /// (IORING_FEAT_RECVSEND_BUNDLE, 6.10).
    pub(crate) fn has_bundles(&self) -> bool {
        self.ring.params().is_feature_recvsend_bundle()
    }

    /// Whether the kernel knows IORING_OP_SEND_ZC (6.0), by asking it
    /// (IORING_REGISTER_PROBE: one register call).
    pub(crate) fn has_send_zc(&self) -> io::Result<bool> {
        let mut probe = io_uring::Probe::new();
        count(Syscall::IoUringRegister);
        self.ring.submitter().register_probe(&mut probe)?;
        Ok(probe.is_supported(opcode::SendZc::CODE))
    }

    /// Registers the ring's descriptor with this thread
    /// (IORING_REGISTER_RING_FDS, 5.18), so that each enter skips the
    /// descriptor lookup. The registration belongs to the calling thread:
    /// only enters from it use it, so a ring registered here must be
    /// entered (and dropped) on this thread.
    pub(crate) fn register_ring_fd(&mut self) -> io::Result<()> {
        if self.registered.is_some() {
            return Ok(());
        }
        // offset u32::MAX: any free slot; the kernel writes back which.
        let mut update = RsrcUpdate { offset: u32::MAX, resv: 0, data: self.ring.as_raw_fd() as u64 };
        match self.ring_fds(IORING_REGISTER_RING_FDS, &mut update)? {
            1 => {
                self.registered = Some(update.offset);
                Ok(())
            }
            _ => Err(io::Error::other("IORING_REGISTER_RING_FDS registered nothing")),
        }
    }

    fn unregister_ring_fd(&mut self) {
        if let Some(offset) = self.registered.take() {
            let _ = self.ring_fds(IORING_UNREGISTER_RING_FDS, &mut RsrcUpdate { offset, resv: 0, data: 0 });
        }
    }

    /// `io_uring_register` of one ring descriptor (`op`: register or
    /// unregister), counted; the kernel's result.
    fn ring_fds(&self, op: libc::c_uint, update: &mut RsrcUpdate) -> io::Result<libc::c_long> {
        count(Syscall::IoUringRegister);
        // SAFETY: the argument is one io_uring_rsrc_update, as nr_args (1)
        // says, alive and writable for the call.
        let r = unsafe {
            libc::syscall(libc::SYS_io_uring_register, self.ring.as_raw_fd(), op, update as *mut RsrcUpdate, 1u32)
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    /// Zero-copy sends made so far, and how many the kernel copied anyway.
    pub(crate) fn zero_copy_counts(&self) -> ZeroCopyCounts {
        self.zero_copy
    }

    /// Queues IORING_OP_POLL_ADD for `fd` with `mask` (poll(2) bits);
    /// `multishot` keeps it armed across events (IORING_POLL_ADD_MULTI).
    pub(crate) fn push_poll_add(&mut self, fd: RawFd, mask: u32, multishot: bool, user_data: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), mask).multi(multishot).build().user_data(user_data);
        self.push(entry)
    }

    /// Queues IORING_OP_POLL_REMOVE of the poll whose user_data is `target`.
    pub(crate) fn push_poll_remove(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        self.push(opcode::PollRemove::new(target).build().user_data(user_data))
    }

    /// Queues a multishot accept (IORING_OP_ACCEPT, IORING_ACCEPT_MULTISHOT):
    /// one completion per accepted connection, its result the new fd.
    pub(crate) fn push_accept_multi(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let entry = opcode::AcceptMulti::new(types::Fd(fd)).flags(libc::SOCK_CLOEXEC).build().user_data(user_data);
        self.push(entry)
    }

    /// Queues one accept (IORING_OP_ACCEPT): one completion, its result
    /// the new fd. With a connection limit, one accept at a time never
    /// takes more connections than the limit allows.
    pub(crate) fn push_accept(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let entry = opcode::Accept::new(types::Fd(fd), std::ptr::null_mut(), std::ptr::null_mut())
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data);
        self.push(entry)
    }

    /// Queues a multishot receive into the provided-buffer ring: one
    /// completion per arrival, naming the buffer it filled; with `bundle`
    /// (IORING_RECVSEND_BUNDLE), one completion may fill several.
    pub(crate) fn push_recv_multi(&mut self, fd: RawFd, user_data: u64, bundle: bool) -> io::Result<()> {
        let group = self.buffer_group()?;
        let entry = if bundle {
            opcode::RecvMultiBundle::new(types::Fd(fd), group).build()
        } else {
            opcode::RecvMulti::new(types::Fd(fd), group).build()
        };
        self.push(entry.user_data(user_data))
    }

    /// Queues one receive (IORING_OP_RECV) into the provided-buffer ring,
    /// a bundle of its buffers if `bundle`: one completion, read the same
    /// way as a multishot receive's.
    pub(crate) fn push_recv_once(&mut self, fd: RawFd, user_data: u64, bundle: bool) -> io::Result<()> {
        let group = self.buffer_group()?;
        let entry = if bundle {
            opcode::RecvBundle::new(types::Fd(fd), group).build()
        } else {
            // Length 0: the whole of the buffer the kernel picks.
            opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), 0)
                .buf_group(group)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        };
        self.push(entry.user_data(user_data))
    }

    fn buffer_group(&self) -> io::Result<u16> {
        self.buffers.as_ref().map(|b| b.group).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a receive into the buffer ring needs setup_buffers first")
        })
    }

    /// Queues a send of `payload` from `offset` on; the ring keeps the
    /// payload until the kernel is done with it, then hands it back
    /// ([`Completion::returned`]). One buffer goes as IORING_OP_SEND,
    /// several as one IORING_OP_SENDMSG (at most
    /// [`MAX_IOV`](super::payload::MAX_IOV) of them: the result says how
    /// much went, and the caller sends the rest).
    ///
    /// `zero_copy` sends one buffer with IORING_OP_SEND_ZC (the kernel
    /// pins the pages instead of copying them) and MSG_WAITALL, so that
    /// the result is the whole length unless the connection fails: the
    /// rest of a short send could not go out of a buffer the kernel still
    /// holds. Its result completion carries `user_data`, and a later
    /// notification (also with `user_data`,
    /// [`Completion::is_notification`]) hands the buffer back.
    pub(crate) fn push_send(
        &mut self,
        fd: RawFd,
        payload: Payload,
        offset: usize,
        user_data: u64,
        zero_copy: bool,
    ) -> io::Result<()> {
        if self.owned.contains_key(&user_data) || self.zero_copy_live.contains_key(&user_data) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a request with this user_data is in flight"));
        }
        let buf = match payload {
            Payload::One(buf) => buf,
            many => {
                let gather = Gather::new(&many.slices_from(offset));
                let entry = opcode::SendMsg::new(types::Fd(fd), &gather.msg).flags(libc::MSG_NOSIGNAL as u32).build();
                self.owned.insert(user_data, Owned::SendMsg(many, gather));
                return self.push(entry.user_data(user_data)).inspect_err(|_| {
                    self.owned.remove(&user_data);
                });
            }
        };
        let len = buf.len().saturating_sub(offset).min(u32::MAX as usize);
        // The Vec's heap block does not move when the Vec is moved into the map.
        let ptr = buf[offset.min(buf.len())..].as_ptr();
        let (key, owned, entry) = if zero_copy {
            self.zero_copy_serial += 1;
            let key = OWN_TAG | (self.zero_copy_serial & !TAG_MASK);
            let entry = opcode::SendZc::new(types::Fd(fd), ptr, len as u32)
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build();
            (key, Owned::ZeroCopy { user_data, buf, len }, entry)
        } else {
            let entry = opcode::Send::new(types::Fd(fd), ptr, len as u32).flags(libc::MSG_NOSIGNAL).build();
            (user_data, Owned::Send(Payload::One(buf)), entry)
        };
        self.owned.insert(key, owned);
        match self.push(entry.user_data(key)) {
            Ok(()) if zero_copy => {
                self.zero_copy_live.insert(user_data, key);
                self.zero_copy.sent += 1;
                Ok(())
            }
            Ok(()) => Ok(()),
            Err(e) => {
                self.owned.remove(&key);
                Err(e)
            }
        }
    }

    /// Queues a connect to `addr`; the ring keeps the address until done.
    pub(crate) fn push_connect(&mut self, fd: RawFd, addr: &SocketAddrAny, user_data: u64) -> io::Result<()> {
        if self.owned.contains_key(&user_data) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a request with this user_data is in flight"));
        }
        let raw = Box::new(addr.clone());
        let (ptr, len) = (raw.as_ptr().cast::<libc::sockaddr>(), raw.addr_len());
        self.owned.insert(user_data, Owned::Addr(raw));
        self.push(opcode::Connect::new(types::Fd(fd), ptr, len).build().user_data(user_data)).inspect_err(|_| {
            self.owned.remove(&user_data);
        })
    }

    /// Queues IORING_OP_CLOSE of `fd`, taking ownership: the number stays
    /// taken until the close runs, so it cannot be reused under a request
    /// still queued for it. On failure the descriptor is handed back.
    pub(crate) fn push_close(&mut self, fd: Fd, user_data: u64) -> Result<(), (Fd, io::Error)> {
        let entry = opcode::Close::new(types::Fd(fd.raw())).build().user_data(user_data);
        match self.push(entry) {
            Ok(()) => {
                // The queued close owns the number now.
                let _ = fd.into_raw();
                Ok(())
            }
            Err(e) => Err((fd, e)),
        }
    }

    /// Queues IORING_OP_ASYNC_CANCEL of the request whose user_data is
    /// `target` (a zero-copy send is found under the ring's own user_data).
    pub(crate) fn push_cancel(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        let target = self.zero_copy_live.get(&target).copied().unwrap_or(target);
        self.push(opcode::AsyncCancel::new(target).build().user_data(user_data))
    }

    /// Registers a provided-buffer ring of `buffers` buffers (a power of
    /// two, at most 32768) of `size` bytes each, as buffer group `group`,
    /// consumed incrementally if asked and the kernel can (6.12). Returns
    /// whether it is.
    pub(crate) fn setup_buffers(&mut self, group: u16, buffers: u16, size: usize, incremental: bool) -> io::Result<()> {
        let b = BufRing::register(&self.ring, group, buffers, size, incremental)?;
        if let Some(old) = self.buffers.replace(b) {
            old.release(&self.ring);
        }
        Ok(())
    }

    /// Hands the bytes receive completion `c` put in the buffer ring to
    /// `deliver` (one call per buffer they span) and gives the buffers it
    /// filled up back to the kernel. Call it for every receive completion
    /// that names a buffer, even one whose connection is gone.
    pub(crate) fn consume_received(&mut self, c: &Completion, deliver: impl FnMut(&[u8])) {
        if let (Some(bid), Some(b)) = (c.buffer_id(), &mut self.buffers) {
            b.consume(bid, c.result.max(0) as usize, deliver);
        }
    }

    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entries built by this module reference no user
            // memory, or memory in `self.owned`/`self.buffers`, which stays
            // allocated until the kernel is done with it (or, in Drop,
            // until every request in flight has completed).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                self.in_flight += 1;
                return Ok(());
            }
            self.make_room()?;
        }
    }

    /// The submission queue is full: hand what is queued to the kernel. An
    /// awake SQPOLL thread takes entries by itself, so then wait for it to
    /// free a slot (IORING_ENTER_SQ_WAIT) instead of spinning.
    fn make_room(&mut self) -> io::Result<()> {
        if self.setup.sqpoll && !self.ring.submission().need_wakeup() {
            return self.sys_enter(0, 0, EnterFlags::SQ_WAIT, None).map(drop);
        }
        self.enter(0, None).map(drop)
    }

    /// Submissions queued and not yet handed to the kernel.
    pub(crate) fn pending_submissions(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Requests pushed whose final completion has not arrived: at most
    /// how many completions a wait could be worth waiting for (multishot
    /// requests aside).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether the kernel holds completions or task work that only an
    /// `io_uring_enter` will flush into the completion ring.
    pub(crate) fn kernel_has_work(&mut self) -> bool {
        let sq = self.ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// Submits what is queued and waits for at least `min_complete`
    /// completions, at most `timeout`. Makes no syscall when nothing needs
    /// one (SQPOLL thread awake and nothing to wait for, or nothing queued
    /// and nothing to wait for). Returns how many submissions the kernel
    /// took. ETIME (timeout) and EINTR are errors here; callers decide what
    /// they mean.
    pub(crate) fn enter(&mut self, min_complete: u32, timeout: Option<Duration>) -> io::Result<usize> {
        self.wait(min_complete, timeout, Duration::ZERO)
    }

    /// As [`Ring::enter`], with a minimum wait (IORING_ENTER_EXT_ARG's
    /// min_wait_usec, when [`Ring::has_min_wait`]): the kernel waits up to
    /// `min_wait` for `min_complete` completions, then returns as soon as
    /// there is one. So a loop can ask for a whole batch without waiting
    /// longer than `min_wait` for it. Zero: no minimum wait.
    pub(crate) fn wait(
        &mut self,
        min_complete: u32,
        timeout: Option<Duration>,
        min_wait: Duration,
    ) -> io::Result<usize> {
        let (to_submit, flush, need_wakeup) = {
            let mut sq = self.ring.submission();
            sq.sync();
            (sq.len(), sq.taskrun() || sq.cq_overflow(), self.setup.sqpoll && sq.need_wakeup())
        };
        // As liburing decides: an SQPOLL ring needs an enter only to wake
        // its thread or to wait; another ring only to submit or to wait.
        let needed = if self.setup.sqpoll {
            need_wakeup || min_complete > 0 || flush
        } else {
            to_submit > 0 || min_complete > 0 || flush
        };
        if !needed {
            return Ok(if self.setup.sqpoll { to_submit } else { 0 });
        }
        let mut flags = EnterFlags::empty();
        if min_complete > 0 || flush {
            // Also what runs deferred task work (DEFER_TASKRUN).
            flags |= EnterFlags::GETEVENTS;
        }
        if need_wakeup {
            flags |= EnterFlags::SQ_WAKEUP;
        }
        let min_wait_us = min_wait.as_micros().min(u128::from(u32::MAX)) as u32;
        if min_complete == 0 || (timeout.is_none() && min_wait_us == 0) {
            return self.sys_enter(to_submit, min_complete, flags, None);
        }
        // IORING_ENTER_EXT_ARG (needs IORING_FEAT_EXT_ARG).
        let ts = Timespec::from(timeout.unwrap_or(BATCHED_WAIT_LIMIT));
        let args = SubmitArgs::new().timespec(&ts).min_wait_usec(min_wait_us);
        self.sys_enter(to_submit, min_complete, flags | EnterFlags::EXT_ARG, Some(&args))
    }

    /// One `io_uring_enter(GETEVENTS)` that waits for nothing: what an
    /// empty wait costs when it does enter the kernel (the lab's baseline).
    ///
    /// Also what a loop on a DEFER_TASKRUN ring needs when it must not wait:
    /// there completions are posted only by an enter that asks for events,
    /// and no flag says when some are pending. Submits what is queued.
    pub(crate) fn enter_getevents(&mut self) -> io::Result<usize> {
        let to_submit = {
            let mut sq = self.ring.submission();
            sq.sync();
            sq.len()
        };
        self.sys_enter(to_submit, 0, EnterFlags::GETEVENTS, None)
    }

    /// `io_uring_enter`, counted; through the registered ring index when
    /// there is one.
    fn sys_enter(
        &self,
        to_submit: usize,
        min_complete: u32,
        flags: EnterFlags,
        args: Option<&SubmitArgs<'_, '_>>,
    ) -> io::Result<usize> {
        let (fd, flags) = match self.registered {
            Some(index) => (index as libc::c_int, flags | EnterFlags::REGISTERED_RING),
            None => (self.ring.as_raw_fd(), flags),
        };
        let (arg, size) = match args {
            Some(a) => ((a as *const SubmitArgs<'_, '_>).cast::<libc::c_void>(), size_of::<SubmitArgs<'_, '_>>()),
            None => (std::ptr::null(), 0),
        };
        count(Syscall::IoUringEnter);
        // SAFETY: `fd` is this ring's descriptor, or its index registered
        // by this thread (REGISTERED_RING says which). `arg` is null, or
        // (with EXT_ARG, which `wait` sets whenever it passes one) an
        // io_uring_getevents_arg (SubmitArgs is its transparent wrapper)
        // of `size` bytes whose timespec outlives the call. The entries the
        // kernel consumes were pushed under `push`'s guarantees.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                fd,
                to_submit.min(u32::MAX as usize) as u32,
                min_complete,
                flags.bits(),
                arg,
                size,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Takes the next completion off the completion ring (no syscall).
    pub(crate) fn pop_completion(&mut self) -> Option<Completion> {
        loop {
            let cqe = self.ring.completion().next()?;
            let (user_data, flags, result) = (cqe.user_data(), cqe.flags(), cqe.result());
            let done = !cqueue::more(flags);
            if done {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            if user_data & TAG_MASK == OWN_TAG {
                match self.zero_copy_completion(user_data, result, flags) {
                    Some(c) => return Some(c),
                    None => continue,
                }
            }
            let returned = match done.then(|| self.owned.remove(&user_data)).flatten() {
                Some(Owned::Send(payload) | Owned::SendMsg(payload, _)) => Some(payload),
                Some(Owned::ZeroCopy { .. } | Owned::Addr(_)) | None => None,
            };
            return Some(Completion { user_data, result, flags, returned });
        }
    }

    /// A zero-copy send's result or notification, under the caller's
    /// user_data; None for one this ring no longer tracks.
    fn zero_copy_completion(&mut self, key: u64, result: i32, flags: u32) -> Option<Completion> {
        if cqueue::notif(flags) {
            if result as u32 & IORING_NOTIF_USAGE_ZC_COPIED != 0 {
                self.zero_copy.copied += 1;
            }
            return match self.owned.remove(&key) {
                Some(Owned::ZeroCopy { user_data, buf, .. }) => {
                    Some(Completion { user_data, result: 0, flags, returned: Some(Payload::One(buf)) })
                }
                _ => None,
            };
        }
        let notification_follows = cqueue::more(flags);
        let (user_data, returned) = match self.owned.get(&key) {
            Some(Owned::ZeroCopy { user_data, buf, len }) => {
                let short = result > 0 && (result as usize) < *len;
                // The kernel still reads `buf` until the notification: the
                // rest of a short send goes out of a copy.
                (*user_data, (notification_follows && short).then(|| Payload::One(buf.clone())))
            }
            _ => return None,
        };
        self.zero_copy_live.remove(&user_data);
        let returned = match notification_follows {
            true => returned,
            false => match self.owned.remove(&key) {
                Some(Owned::ZeroCopy { buf, .. }) => Some(Payload::One(buf)),
                _ => None,
            },
        };
        // F_MORE here only announces the notification: not a multishot.
        let flags = flags & !IORING_CQE_F_MORE;
        Some(Completion { user_data, result, flags, returned })
    }

    /// Whether the completion ring is empty (no syscall).
    pub(crate) fn completions_empty(&mut self) -> bool {
        self.ring.completion().is_empty()
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // First what finishes by itself: queued closes, and requests whose
        // completion waits only for this task to run its task work
        // (DEFER_TASKRUN), such as receives ended by `shutdown_read`.
        // Reaping them costs nothing per request, where the cancel below
        // looks each one up by a walk of every pending poll (Linux 6.13
        // on): O(n^2) for n requests left.
        let settle_until = std::time::Instant::now() + Duration::from_millis(500);
        while self.in_flight > 0 && std::time::Instant::now() < settle_until {
            let before = self.in_flight;
            let _ = self.enter(1, Some(Duration::from_millis(1)));
            while self.pop_completion().is_some() {}
            if self.in_flight == before {
                break;
            }
        }
        if self.in_flight > 0 {
            // The kernel may still use memory we own: cancel everything and
            // wait (a bounded time) for every request to complete.
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(u64::MAX);
            // SAFETY: a cancel entry references no user memory.
            if unsafe { self.ring.submission().push(&cancel) }.is_ok() {
                self.in_flight += 1;
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while self.in_flight > 0 && std::time::Instant::now() < deadline {
                let _ = self.enter(1, Some(Duration::from_millis(20)));
                while self.pop_completion().is_some() {}
            }
        }
        self.unregister_ring_fd();
        if self.in_flight > 0 {
            // Still in use after the deadline: leak rather than free memory
            // the kernel may write.
            std::mem::forget(std::mem::take(&mut self.owned));
            std::mem::forget(self.buffers.take());
            return;
        }
        if let Some(b) = self.buffers.take() {
            b.release(&self.ring);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::counts;
    use std::os::fd::AsRawFd;

    /// More polls than the submission queue holds: `push` makes room by
    /// entering (plain ring, sleeping SQ thread) or by waiting for the SQ
    /// thread (SQPOLL, IORING_ENTER_SQ_WAIT), and every enter is counted.
    fn overfill(sqpoll: Option<Duration>) {
        let (reader, _writer) = std::io::pipe().unwrap();
        let mut ring = Ring::new(8, sqpoll).unwrap();
        let before = counts();
        for i in 0..100 {
            ring.push_poll_add(reader.as_raw_fd(), libc::POLLIN as u32, false, i).unwrap();
        }
        ring.enter(0, None).unwrap();
        let spent = counts().since(&before);
        assert!(spent.get(Syscall::IoUringEnter) >= 1, "{:?}", spent.nonzero().collect::<Vec<_>>());
        assert_eq!(spent.total(), spent.get(Syscall::IoUringEnter));
        // Nothing is ready: waiting for one completion times out (the
        // kernel reports the timeout only when it took no submission).
        if let Err(e) = ring.enter(1, Some(Duration::from_millis(10))) {
            assert_eq!(e.raw_os_error(), Some(libc::ETIME));
        }
        assert!(ring.pop_completion().is_none());
    }

    #[test]
    fn a_full_submission_queue_is_handed_over() {
        overfill(None);
    }

    #[test]
    fn a_full_sqpoll_queue_is_handed_over() {
        overfill(Some(Duration::from_millis(50)));
    }

    #[test]
    fn an_idle_enter_makes_no_syscall_and_getevents_makes_one() {
        let mut ring = Ring::new(8, None).unwrap();
        let before = counts();
        assert_eq!(ring.enter(0, None).unwrap(), 0);
        assert_eq!(counts().since(&before).total(), 0);
        ring.enter_getevents().unwrap();
        assert_eq!(counts().since(&before).get(Syscall::IoUringEnter), 1);
    }
}
