//! io_uring: the ring, and a safe, counted interface to it.
//!
//! The io-uring crate does the work: setup, the mapped rings, entries,
//! `io_uring_enter` (with [`SubmitArgs`] for a timed wait) and buffer-ring
//! registration. This module adds what the crate leaves to its users: a
//! counter bump for every enter and register the crate makes on our
//! behalf, the decision (as liburing makes it) whether an enter is needed
//! at all, memory that must outlive requests in flight, and the
//! provided-buffer ring's data block and held-buffer tracking.
//!
//! Every operation offered here is safe whatever the caller does next:
//! entries point at no user memory (poll, accept, cancel), or at memory the
//! ring itself owns until the completion arrives (send buffers, connect
//! addresses, the provided-buffer ring).
#![allow(unsafe_code)]

use super::net::Fd;
use crate::syscalls::{count, Syscall};
use io_uring::types::{BufRingEntry, SubmitArgs, Timespec};
use io_uring::{opcode, squeue, types, EnterFlags, IoUring};
use rustix::mm::{self, MapFlags, ProtFlags};
use rustix::net::SocketAddrAny;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

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
    /// their user_data; freed only when their completion arrives.
    owned: HashMap<u64, Owned>,
    /// Requests pushed whose final completion has not arrived.
    in_flight: usize,
}

/// What an in-flight request owns.
enum Owned {
    Send(Vec<u8>),
    /// Held only so the address outlives the connect.
    Addr(#[allow(dead_code)] Box<SocketAddrAny>),
}

/// What a completion said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) user_data: u64,
    pub(crate) result: i32,
    pub(crate) flags: u32,
    /// A send's buffer, handed back once the kernel is done with it.
    pub(crate) returned: Option<Vec<u8>>,
}

impl Completion {
    /// IORING_CQE_F_MORE: a multishot request stays armed.
    pub(crate) fn more(&self) -> bool {
        io_uring::cqueue::more(self.flags)
    }

    /// The provided buffer this completion filled (IORING_CQE_F_BUFFER).
    pub(crate) fn buffer_id(&self) -> Option<u16> {
        io_uring::cqueue::buffer_select(self.flags)
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
                    return Ok(Ring { ring, setup, buffers: None, owned: HashMap::new(), in_flight: 0 });
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
    /// completion per arrival, naming the buffer it filled.
    pub(crate) fn push_recv_multi(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let group = self.buffers.as_ref().map(|b| b.group).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "multishot receive needs setup_buffers first")
        })?;
        self.push(opcode::RecvMulti::new(types::Fd(fd), group).build().user_data(user_data))
    }

    /// Queues a send of `buf[offset..]`; the ring keeps `buf` until the
    /// completion, which hands it back ([`Completion::returned`]).
    pub(crate) fn push_send(&mut self, fd: RawFd, buf: Vec<u8>, offset: usize, user_data: u64) -> io::Result<()> {
        if self.owned.contains_key(&user_data) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a request with this user_data is in flight"));
        }
        let len = buf.len().saturating_sub(offset).min(u32::MAX as usize) as u32;
        // The Vec's heap block does not move when the Vec is moved into the map.
        let ptr = buf[offset.min(buf.len())..].as_ptr();
        self.owned.insert(user_data, Owned::Send(buf));
        let entry = opcode::Send::new(types::Fd(fd), ptr, len).flags(libc::MSG_NOSIGNAL).build().user_data(user_data);
        self.push(entry).inspect_err(|_| {
            self.owned.remove(&user_data);
        })
    }

    /// Queues a connect to `addr`; the ring keeps the address until done.
    pub(crate) fn push_connect(&mut self, fd: RawFd, addr: &SocketAddr, user_data: u64) -> io::Result<()> {
        if self.owned.contains_key(&user_data) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a request with this user_data is in flight"));
        }
        let raw = Box::new(SocketAddrAny::from(*addr));
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

    /// Queues IORING_OP_ASYNC_CANCEL of the request whose user_data is `target`.
    pub(crate) fn push_cancel(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        self.push(opcode::AsyncCancel::new(target).build().user_data(user_data))
    }

    /// Registers a provided-buffer ring of `buffers` buffers (a power of two,
    /// at most 32768) of `size` bytes each, as buffer group `group`.
    pub(crate) fn setup_buffers(&mut self, group: u16, buffers: u16, size: usize) -> io::Result<()> {
        if !buffers.is_power_of_two() || buffers > 32768 || size == 0 || size > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring: count must be a power of two <= 32768",
            ));
        }
        let mut b = BufRing::allocate(group, buffers, size)?;
        count(Syscall::IoUringRegister);
        // SAFETY: b.entries points at `buffers` entries of zeroed, page-aligned
        // memory that lives in self.buffers until unregistered (Drop).
        unsafe { self.ring.submitter().register_buf_ring_with_flags(b.entries.as_ptr() as u64, buffers, group, 0) }?;
        for bid in 0..buffers {
            b.provide(bid);
        }
        b.publish();
        self.buffers = Some(b);
        Ok(())
    }

    /// The bytes a receive completion put in buffer `bid` (empty unless a
    /// completion handed that buffer over and it was not recycled yet).
    pub(crate) fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        match &self.buffers {
            Some(b) if b.held.get(usize::from(bid)) == Some(&true) => b.slice(bid, len),
            _ => &[],
        }
    }

    /// Gives buffer `bid` back to the kernel for later receives; a buffer
    /// not held (already recycled, or never handed over) is left alone.
    pub(crate) fn recycle_buffer(&mut self, bid: u16) {
        if let Some(b) = &mut self.buffers {
            if let Some(h) = b.held.get_mut(usize::from(bid)) {
                if *h {
                    *h = false;
                    b.provide(bid);
                    b.publish();
                }
            }
        }
    }

    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entries built by this module reference no user
            // memory, or memory in `self.owned`/`self.buffers`, which stays
            // allocated until the request's final completion (or, in Drop,
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
            count(Syscall::IoUringEnter);
            self.ring.submitter().squeue_wait()?;
            return Ok(());
        }
        self.enter(0, None).map(drop)
    }

    /// Submissions queued and not yet handed to the kernel.
    pub(crate) fn pending_submissions(&mut self) -> usize {
        self.ring.submission().len()
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
        let (to_submit, flush, need_wakeup) = {
            let mut sq = self.ring.submission();
            sq.sync();
            (sq.len(), sq.taskrun() || sq.cq_overflow(), self.setup.sqpoll && sq.need_wakeup())
        };
        // The crate's submit_and_wait/submit_with_args make the same
        // decision for an SQPOLL ring (no enter when the thread is awake
        // and no event is wanted), but enter unconditionally otherwise:
        // decide here, so that every enter the crate makes is one counted.
        let needed = if self.setup.sqpoll {
            need_wakeup || min_complete > 0 || flush
        } else {
            to_submit > 0 || min_complete > 0 || flush
        };
        if !needed {
            return Ok(if self.setup.sqpoll { to_submit } else { 0 });
        }
        count(Syscall::IoUringEnter);
        let submitter = self.ring.submitter();
        let want = min_complete as usize;
        match timeout {
            Some(t) if min_complete > 0 => {
                // IORING_ENTER_EXT_ARG with the timeout (needs IORING_FEAT_EXT_ARG).
                let ts = Timespec::from(t);
                submitter.submit_with_args(want, &SubmitArgs::new().timespec(&ts))
            }
            _ => submitter.submit_and_wait(want),
        }
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
            sq.len() as u32
        };
        count(Syscall::IoUringEnter);
        // SAFETY: no argument pointer is passed (None), so the kernel reads
        // no user memory beyond the mapped rings; the entries it consumes
        // were pushed under `push`'s guarantees.
        unsafe { self.ring.submitter().enter::<libc::sigset_t>(to_submit, 0, EnterFlags::GETEVENTS.bits(), None) }
    }

    /// Takes the next completion off the completion ring (no syscall).
    pub(crate) fn pop_completion(&mut self) -> Option<Completion> {
        let cqe = self.ring.completion().next()?;
        let (user_data, flags) = (cqe.user_data(), cqe.flags());
        let done = !io_uring::cqueue::more(flags);
        if done {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        if let (Some(bid), Some(b)) = (io_uring::cqueue::buffer_select(flags), &mut self.buffers) {
            if let Some(h) = b.held.get_mut(usize::from(bid)) {
                *h = true;
            }
        }
        let returned = match done.then(|| self.owned.remove(&user_data)).flatten() {
            Some(Owned::Send(buf)) => Some(buf),
            Some(Owned::Addr(_)) | None => None,
        };
        Some(Completion { user_data, result: cqe.result(), flags, returned })
    }
    /// Whether the completion ring is empty (no syscall).
    pub(crate) fn completions_empty(&mut self) -> bool {
        self.ring.completion().is_empty()
    }
}

/// A provided-buffer ring (IORING_REGISTER_PBUF_RING): the ring of
/// `io_uring_buf` entries (the crate's [`BufRingEntry`]) and the block of
/// buffers they point at, both allocated here and never moved.
struct BufRing {
    entries: NonNull<BufRingEntry>,
    entries_layout: Layout,
    data: NonNull<u8>,
    data_len: usize,
    group: u16,
    count: u16,
    size: usize,
    tail: u16,
    /// Buffers a completion handed to us and not yet recycled: only these
    /// may be read or given back.
    held: Vec<bool>,
}

impl BufRing {
    fn allocate(group: u16, n: u16, size: usize) -> io::Result<BufRing> {
        let oom = || io::Error::from_raw_os_error(libc::ENOMEM);
        // The kernel wants the entries page-aligned.
        let page = rustix::param::page_size();
        let entries_layout =
            Layout::from_size_align(usize::from(n) * size_of::<BufRingEntry>(), page).map_err(|_| oom())?;
        let data_len = usize::from(n).checked_mul(size).ok_or_else(oom)?;
        // SAFETY: the layout has non-zero size (n > 0).
        let entries = NonNull::new(unsafe { alloc_zeroed(entries_layout) }.cast::<BufRingEntry>()).ok_or_else(oom)?;
        // The buffers come from an anonymous mapping: zero-filled (no
        // uninitialised byte is ever exposed) and resident only once the
        // kernel writes into them, so unused buffers cost no memory.
        count(Syscall::Mmap);
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choice (null hint): it replaces nothing of ours.
        let mapped = unsafe { mm::mmap_anonymous(std::ptr::null_mut(), data_len, prot, MapFlags::PRIVATE) };
        let data = match mapped.ok().and_then(|p| NonNull::new(p.cast::<u8>())) {
            Some(d) => d,
            None => {
                // SAFETY: allocated just above with this layout.
                unsafe { dealloc(entries.as_ptr().cast(), entries_layout) };
                return Err(oom());
            }
        };
        let held = vec![false; usize::from(n)];
        Ok(BufRing { entries, entries_layout, data, data_len, group, count: n, size, tail: 0, held })
    }

    /// Writes the entry for buffer `bid` at the local tail.
    fn provide(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: index < count, so the entry lies inside the entries block,
        // which we own and which the kernel only reads. The setters write
        // addr, len and bid and leave `resv` alone: in entry 0 that field
        // is the shared tail.
        let entry = unsafe { &mut *self.entries.as_ptr().add(index) };
        entry.set_addr((self.data.as_ptr() as usize + usize::from(bid) * self.size) as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes provided entries visible to the kernel (release store).
    fn publish(&self) {
        // SAFETY: `entries` is entry 0 of the initialised ring, so
        // BufRingEntry::tail gives its `resv` field, the shared u16 tail
        // (2-aligned), which the kernel reads concurrently: hence an atomic
        // view of it, and no other reference to it is alive.
        let tail = unsafe { AtomicU16::from_ptr(BufRingEntry::tail(self.entries.as_ptr()).cast_mut()) };
        tail.store(self.tail, Ordering::Release);
    }

    fn slice(&self, bid: u16, len: usize) -> &[u8] {
        // SAFETY: bid < count and len is clamped to the buffer size, so the
        // slice stays inside buffer `bid`, whose bytes are initialised
        // (zeroed by mmap, then written by the kernel). The kernel does not
        // write to it again until recycle_buffer hands it back, which takes
        // &mut self while this slice borrows &self.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(usize::from(bid) * self.size), len.min(self.size)) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
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
        if self.in_flight > 0 {
            // Still in use after the deadline: leak rather than free memory
            // the kernel may write.
            // (BufRing has no Drop of its own: dropping it frees nothing.)
            std::mem::forget(std::mem::take(&mut self.owned));
            self.buffers = None;
            return;
        }
        if let Some(b) = self.buffers.take() {
            count(Syscall::IoUringRegister);
            let _ = self.ring.submitter().unregister_buf_ring(b.group);
            count(Syscall::Munmap);
            // SAFETY: allocated and mapped in BufRing::allocate with these
            // sizes; no request is in flight and the group is unregistered,
            // so neither we nor the kernel use them again.
            unsafe {
                dealloc(b.entries.as_ptr().cast(), b.entries_layout);
                let _ = mm::munmap(b.data.as_ptr().cast(), b.data_len);
            }
        }
    }
}

// SAFETY: BufRing's pointers are to memory it owns exclusively; moving it
// to another thread moves that ownership.
unsafe impl Send for BufRing {}

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
