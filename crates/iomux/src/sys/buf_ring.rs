//! A provided-buffer ring (IORING_REGISTER_PBUF_RING): the ring of
//! `io_uring_buf` entries (the crate's [`BufRingEntry`]) and the block of
//! buffers they point at, both allocated here and never moved; and the
//! bookkeeping that turns a receive completion (a buffer id and a length)
//! into the bytes it names.
//!
//! Three ways the kernel may fill buffers, all read the same way here:
//! - plain: one receive fills (part of) one buffer, which is then ours
//!   until we provide it again;
//! - bundle (IORING_RECVSEND_BUNDLE): one receive fills several buffers,
//!   consecutive in ring order from the one the completion names;
//! - incremental (IOU_PBUF_RING_INC): a receive takes only the bytes it
//!   needs from the buffer at the ring's head, which stays there for the
//!   next receive until it is full, so a big buffer serves many small
//!   receives.
//!
//! Where the next bytes of a buffer start and when a buffer is done are
//! counted here, not read from IORING_CQE_F_BUF_MORE: kernels without the
//! June 2026 fix ("io_uring/net: inherit IORING_CQE_F_BUF_MORE across
//! bundle recv retries") drop that flag after a bundle's retry. Under
//! incremental consumption a buffer is done exactly when it is full, which
//! this count knows anyway.
#![allow(unsafe_code)]

use crate::syscalls::{count, Syscall};
use io_uring::types::{BufRingEntry, IOU_PBUF_RING_INC};
use io_uring::IoUring;
use rustix::mm::{self, MapFlags, ProtFlags};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::mem::size_of;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

pub(crate) struct BufRing {
    entries: NonNull<BufRingEntry>,
    entries_layout: Layout,
    data: NonNull<u8>,
    data_len: usize,
    pub(crate) group: u16,
    count: u16,
    size: usize,
    /// Registered with IOU_PBUF_RING_INC.
    pub(crate) incremental: bool,
    /// Our tail: entries written so far (wrapping).
    tail: u16,
    /// Per buffer: bytes of it already handed over (incremental: where its
    /// next bytes start). Zero for a buffer provided whole.
    used: Vec<u32>,
    /// Per buffer: the tail position it was last provided at; and per ring
    /// slot, the buffer written there, to walk a bundle in ring order.
    pos_of: Vec<u16>,
    bid_at: Vec<u16>,
    /// Per buffer: the kernel may fill it (provided and not yet handed
    /// back whole). Guards against providing a buffer twice.
    with_kernel: Vec<bool>,
}

impl BufRing {
    /// Allocates `n` buffers (a power of two, at most 32768) of `size`
    /// bytes and registers them as buffer group `group` of `ring`,
    /// incrementally consumed if `incremental` and the kernel can (else
    /// plain: `incremental` is false in the result).
    pub(crate) fn register(ring: &IoUring, group: u16, n: u16, size: usize, incremental: bool) -> io::Result<BufRing> {
        if !n.is_power_of_two() || n > 32768 || size == 0 || size > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer ring: count must be a power of two <= 32768, size 1 to 2^32-1 bytes",
            ));
        }
        let mut b = BufRing::allocate(group, n, size)?;
        let addr = b.entries.as_ptr() as u64;
        let register = |flags: u16| {
            count(Syscall::IoUringRegister);
            // SAFETY: `addr` points at `n` entries of zeroed, page-aligned
            // memory owned by `b`, which the caller keeps (and unregisters
            // before freeing: Ring's Drop) for as long as the group is registered.
            unsafe { ring.submitter().register_buf_ring_with_flags(addr, n, group, flags) }
        };
        // EINVAL with the flag: a kernel before 6.12; the caller falls back
        // to the plain ring, with the plain ring's geometry.
        match register(if incremental { IOU_PBUF_RING_INC as u16 } else { 0 }) {
            Ok(()) => b.incremental = incremental,
            Err(e) => {
                b.free();
                return Err(e);
            }
        }
        for bid in 0..n {
            b.provide(bid);
        }
        b.publish();
        Ok(b)
    }

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
        let per_buffer = usize::from(n);
        Ok(BufRing {
            entries,
            entries_layout,
            data,
            data_len,
            group,
            count: n,
            size,
            incremental: false,
            tail: 0,
            used: vec![0; per_buffer],
            pos_of: vec![0; per_buffer],
            bid_at: vec![0; per_buffer],
            with_kernel: vec![false; per_buffer],
        })
    }

    /// Hands the `len` bytes a receive completion put in the ring,
    /// starting in buffer `first`, to `deliver` (one call per buffer they
    /// span, in order), then gives every buffer they filled up back to the
    /// kernel. Call it for every receive completion that names a buffer,
    /// even one whose connection is gone, so the count stays right.
    pub(crate) fn consume(&mut self, first: u16, len: usize, mut deliver: impl FnMut(&[u8])) {
        let Some(mut pos) = self.pos_of.get(usize::from(first)).copied() else { return };
        let mask = self.count - 1;
        let mut left = len;
        let mut provided = false;
        // At most every buffer once: a length beyond the ring is a kernel
        // bug, and must not make us read past it.
        for _ in 0..self.count {
            let bid = self.bid_at[usize::from(pos & mask)];
            let b = usize::from(bid);
            if !self.with_kernel[b] {
                break; // not a buffer the kernel had: nothing of ours to read
            }
            let start = self.used[b] as usize;
            let take = left.min(self.size - start);
            deliver(self.slice(bid, start, take));
            left -= take;
            let used = start + take;
            // Plain and bundle receives use a buffer once; incremental
            // ones until it is full.
            if !self.incremental || used == self.size {
                self.used[b] = 0;
                self.with_kernel[b] = false;
                self.provide(bid);
                provided = true;
            } else {
                self.used[b] = used as u32;
                break; // a buffer with room left is the last one filled
            }
            if left == 0 {
                break;
            }
            pos = pos.wrapping_add(1);
        }
        if provided {
            self.publish();
        }
    }

    /// Writes the entry for buffer `bid` at the local tail.
    fn provide(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: index < count, so the entry lies inside the entries block,
        // which we own; the kernel reads entries from its head up to the
        // published tail, and this one is beyond it until `publish`. The
        // setters write addr, len and bid and leave `resv` alone: in entry 0
        // that field is the shared tail.
        let entry = unsafe { &mut *self.entries.as_ptr().add(index) };
        entry.set_addr((self.data.as_ptr() as usize + usize::from(bid) * self.size) as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.pos_of[usize::from(bid)] = self.tail;
        self.bid_at[index] = bid;
        self.with_kernel[usize::from(bid)] = true;
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

    fn slice(&self, bid: u16, start: usize, len: usize) -> &[u8] {
        let start = start.min(self.size);
        let len = len.min(self.size - start);
        // SAFETY: bid < count and start + len <= size, so the slice stays
        // inside buffer `bid`, whose bytes are initialised (zeroed by mmap,
        // then written by the kernel). A completion said the kernel wrote
        // these bytes; it writes them again only once the buffer is
        // provided anew (`provide`, which needs &mut self while this slice
        // borrows &self). Under incremental consumption it may meanwhile
        // fill the same buffer's later bytes, never these.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(usize::from(bid) * self.size + start), len) }
    }

    /// Unregisters the group and frees the memory. Only once no request
    /// that may fill a buffer is in flight.
    pub(crate) fn release(self, ring: &IoUring) {
        count(Syscall::IoUringRegister);
        let _ = ring.submitter().unregister_buf_ring(self.group);
        self.free();
    }

    /// Frees the memory of a ring the kernel does not know (never
    /// registered, or unregistered with nothing in flight).
    fn free(self) {
        count(Syscall::Munmap);
        // SAFETY: allocated and mapped in `allocate` with these sizes;
        // callers guarantee the kernel no longer uses them, and `self` is
        // consumed, so we do not either.
        unsafe {
            dealloc(self.entries.as_ptr().cast(), self.entries_layout);
            let _ = mm::munmap(self.data.as_ptr().cast(), self.data_len);
        }
    }
}

// SAFETY: BufRing's pointers are to memory it owns exclusively; moving it
// to another thread moves that ownership.
unsafe impl Send for BufRing {}
