//! The completion driver: io_uring natively.
//!
//! - Multishot accept on the listener (one completion per connection); with
//!   a connection limit, one single-shot accept at a time, so the limit holds.
//! - One multishot receive per connection into a provided-buffer ring, so
//!   no connection owns a receive buffer and no read is a syscall; when
//!   the core stops reading a connection, its receive is cancelled at once
//!   (what it received meanwhile waits in the core, offered on resume,
//!   and no receive is armed again until all of it was).
//!   Optionally (see [`Config`](super::Config)) buffers are consumed
//!   incrementally and receives fill bundles of them.
//! - Under SQPOLL, one-shot receives instead: the kernel's multishot
//!   receive can stall for good at a TCP urgent mark in the SQPOLL thread
//!   (docs/notes/sqpoll-urgent.md). One-shot too for a connection once
//!   its reading was paused: a multishot receive fills the ring until its
//!   cancel lands, where a one-shot one takes one buffer (a bundle's worth
//!   with bundles on), so TCP holds a paused peer back as on the readiness
//!   backends.
//! - A connection neither read nor written (half-closed and waiting, or
//!   paused) is watched by a one-shot poll for an error or hang-up, so a
//!   peer's reset closes it as on the readiness backends.
//! - A connection that splices ([`Io::splice`](super::Io::splice)) waits
//!   for input by a one-shot poll, and a full socket it splices into waits
//!   by a multishot one (a one-shot poll on a read-closed socket completes
//!   at once, for ever: RDHUP, as for the watch below); the splices are
//!   syscalls (see io/splice.rs for why not IORING_OP_SPLICE).
//! - One send in flight per connection, so sends stay in order; a short
//!   send resubmits the rest. Large writes may go out zero-copy.
//! - Each loop turn makes at most one `io_uring_enter`, which submits
//!   everything queued and waits for the next completions together (with
//!   SQPOLL, often none at all); with a minimum wait, for a batch of them.

use super::core::{Core, Driver, Setup};
use super::io::{Accept, Io, CONNECTING, SPLICE_OUT_WAIT};
use super::slab::Slab;
use super::stats::LoopStats;
use super::uring_features::{self, Active};
use super::{CloseReason, ConnId, Handler};
use crate::error::{Error, Result};
use crate::poller::{Backend, UringPoller, Waker};
use crate::sys::net::{self, AnyAddr, Fd};
use crate::sys::payload::Payload;
use crate::sys::uring::{Completion, Ring};
use crate::Syscall;
use std::io;

const NAME: &str = "uring";
const RING_ENTRIES: u32 = 4096;
const BUFFER_GROUP: u16 = 0;
/// A batched wait asks for at most this many completions (the completion
/// ring holds 8 x RING_ENTRIES).
const MAX_BATCH: usize = 4 * RING_ENTRIES as usize;

// user_data: kind in the top 4 bits, then the connection id (28 bits of
// generation, 32 of slab index).
const KIND_SHIFT: u32 = 60;
const ID_MASK: u64 = (1 << KIND_SHIFT) - 1;
const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const CONNECT: u64 = 4;
const WAKER: u64 = 5;
const IGNORE: u64 = 6; // cancels and closes: their completions say nothing
const WATCH: u64 = 7; // the error watch of a connection not being read
const SPLICE_IN: u64 = 8; // input to splice (one-shot poll)
const SPLICE_OUT: u64 = 9; // room to splice into (multishot poll)

fn ud(kind: u64, id: ConnId) -> u64 {
    (kind << KIND_SHIFT) | (id.as_u64() & ID_MASK)
}

// The driver's bits in `Conn::driver`.
const RECV_ARMED: u16 = 1;
const CANCELLING: u16 = 2; // the receive's cancel is in flight
const CONNECT_IN_FLIGHT: u16 = 4;
const SEND_IN_FLIGHT: u16 = 8;
/// Reading this connection was paused once: from then on it receives
/// one-shot, so a pause stops it within one buffer (a multishot receive
/// goes on filling the ring until its cancel lands).
const RECV_ONCE: u16 = 16;
/// A poll for an error or hang-up is armed: the connection is neither
/// read nor written, so nothing else would see its peer reset it.
const WATCHED: u16 = 32;
/// Its peer hung up in order while it was not read: not watched again
/// until it reads (the hang-up would fire the watch at once, for ever).
const PARKED: u16 = 64;
/// The watch's cancel is in flight.
const WATCH_CANCELLING: u16 = 128;
/// A poll for input to splice is armed.
const SPLICE_IN_POLL: u16 = 256;
/// A poll for room to splice into is armed ...
const SPLICE_OUT_POLL: u16 = 512;
/// ... and its cancel is in flight.
const SPLICE_OUT_CANCELLING: u16 = 1024;
/// In `Uring::sends_due`: its output goes at the end of the turn.
const SEND_DUE: u16 = 2048;

struct Uring {
    ring: Ring,
    features: Active,
    listener: Option<Fd>,
    /// An accept (multishot or single) is in flight.
    accept_armed: bool,
    accept_cancelled: bool,
    /// A receive was cancelled during this batch of completions.
    cancelled: bool,
    /// Receive with one-shot receives (SQPOLL), not multishot ones.
    recv_one_shot: bool,
    /// Connections with output to send at the end of the turn, after
    /// every completion of it: what a turn's completions queue for one
    /// connection (a publisher's receives, each fanned out to the same
    /// subscribers) leaves in one send, not one per completion. Without
    /// SQPOLL this is no later than sending at once (the ring takes the
    /// sends at the next enter); with it, the sends wait for the turn's
    /// completions to be handled.
    sends_due: Vec<ConnId>,
    /// Declared after `ring`, so it outlives the ring's poll on it.
    _waker: Waker,
    waker_fd: i32,
}

fn ring_err(e: io::Error) -> Error {
    Error::sys(NAME, Syscall::IoUringEnter, None, e)
}

pub fn run<H: Handler>(setup: Setup<'_, H::Message>, handler: &mut H) -> Result<LoopStats> {
    let mut core = Core::new(&setup, handler);
    let Setup { cfg, listener, ready, signal_slot, .. } = setup;
    let sqpoll = (cfg.backend == Backend::UringSqpoll).then_some(UringPoller::SQPOLL_IDLE);
    let mut ring = Ring::for_loop(RING_ENTRIES, sqpoll).map_err(crate::poller::uring_unavailable)?;
    let (features, feature_report) = uring_features::enable(&mut ring, cfg, BUFFER_GROUP)
        .map_err(|e| Error::sys("uring provided-buffer ring", Syscall::IoUringRegister, None, e))?;
    let (waker, waker_fd) = Waker::new()?;
    core.wake_with(&waker, signal_slot);
    let mut k = Uring {
        ring,
        features,
        listener,
        accept_armed: false,
        accept_cancelled: false,
        cancelled: false,
        recv_one_shot: sqpoll.is_some(),
        sends_due: Vec::new(),
        _waker: waker,
        waker_fd,
    };
    k.arm_waker()?;
    ready();
    core.start(&mut k);
    k.send_all_due(&mut core);
    while !core.finished() {
        let immediate = core.must_not_wait();
        let wait = !immediate && k.ring.completions_empty();
        let entered = if immediate && k.ring.setup().defer_taskrun {
            // Not waiting, but completions still have to be asked for.
            k.ring.enter_getevents()
        } else if wait && !k.features.min_wait.is_zero() {
            // A batch: up to min_wait for every request that may complete.
            k.ring.wait(k.batch(), core.timeout(false), k.features.min_wait)
        } else {
            k.ring.enter(u32::from(wait), core.timeout(false).filter(|_| wait))
        };
        match entered {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
            Err(e) => return Err(ring_err(e)),
        }
        core.begin_turn();
        while let Some(completion) = k.ring.pop_completion() {
            k.complete(&mut core, completion);
            core.settle(&mut k);
            if std::mem::take(&mut k.cancelled) && k.ring.setup().sqpoll {
                // A receive to pause: cancel it now, not after the batch,
                // which with SQPOLL keeps growing while we reap it.
                k.ring.enter(0, None).map_err(ring_err)?;
            }
        }
        core.end_turn(&mut k);
        k.send_all_due(&mut core);
    }
    let setup = k.ring.setup();
    let setup = match (setup.sqpoll, setup.defer_taskrun, setup.coop_taskrun) {
        (true, _, _) => "sqpoll",
        (false, true, _) => "single_issuer+defer_taskrun",
        (false, false, true) => "coop_taskrun",
        _ => "plain",
    };
    let zero_copy = k.ring.zero_copy_counts();
    drop(k); // the ring's last syscalls count too
    let mut stats = core.finish(Some(setup));
    stats.uring_features = feature_report;
    stats.zero_copy_sends = zero_copy.sent;
    stats.zero_copy_copied = zero_copy.copied;
    Ok(stats)
}

fn set_bit<S>(io: &mut Io<S>, id: ConnId, bit: u16) {
    if let Some(c) = io.conn_mut(id) {
        c.driver |= bit;
    }
}

/// The live connection a completion's user_data names (its generation
/// must match, so a late completion never reaches a newer connection).
fn conn_of<S>(conns: &Slab<S>, user_data: u64) -> Option<ConnId> {
    let raw = user_data & ID_MASK;
    conns.id_at(raw as u32).filter(|id| id.as_u64() & ID_MASK == raw)
}

impl Uring {
    /// Completions a batched wait asks for: every request in flight that
    /// may complete (not the waker's poll, not an armed accept). With many
    /// busy connections the loop then sleeps the whole minimum wait and
    /// wakes to a large batch; the cost is up to the minimum wait of
    /// latency whenever fewer complete, as when a few active connections
    /// sit among idle ones (whose armed receives count too).
    fn batch(&self) -> u32 {
        let idle = 1 + usize::from(self.accept_armed);
        self.ring.in_flight().saturating_sub(idle).clamp(1, MAX_BATCH) as u32
    }

    fn arm_waker(&mut self) -> Result<()> {
        self.ring.push_poll_add(self.waker_fd, libc::POLLIN as u32, true, WAKER << KIND_SHIFT).map_err(ring_err)
    }

    fn complete<H: Handler>(&mut self, core: &mut Core<H>, c: Completion) {
        let id = conn_of(&core.io.conns, c.user_data);
        match (c.user_data >> KIND_SHIFT, id) {
            (SEND, _) if c.is_notification() => {
                // A zero-copy send's buffer, free at last.
                if let Some(payload) = c.returned {
                    core.io.recycle_payload(payload);
                }
            }
            (ACCEPT, _) => self.on_accept(core, &c),
            (RECV, Some(id)) => self.on_recv(core, id, &c),
            (SEND, Some(id)) => self.on_send(&mut core.io, id, c),
            (CONNECT, Some(id)) => self.on_connect(core, id, &c),
            (WATCH, Some(id)) => self.on_watch(&mut core.io, id, &c),
            (SPLICE_IN, Some(id)) => {
                let budget = core.io.cfg.read_budget;
                if let Some(conn) = core.io.conn_mut(id) {
                    conn.driver &= !SPLICE_IN_POLL;
                }
                let _ = core.io.pump(id, budget); // polled again if still wanted
                core.io.mark_dirty(id);
            }
            (SPLICE_OUT, Some(id)) => {
                if !c.more() {
                    if let Some(conn) = core.io.conn_mut(id) {
                        conn.driver &= !(SPLICE_OUT_POLL | SPLICE_OUT_CANCELLING);
                    }
                    core.io.mark_dirty(id);
                }
                // Room, or an error the splice will name; RDHUP alone is not news.
                let room = (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) as i32;
                if c.result > 0 && c.result & room != 0 {
                    core.io.splice_room(id);
                }
            }
            (WAKER, _) => {
                core.woken();
                if !c.more() {
                    let _ = self.arm_waker();
                }
            }
            (RECV, None) => {
                // A closed connection's late receive: give its buffers back.
                self.ring.consume_received(&c, |_| {});
            }
            (SEND, None) => {
                if let Some(payload) = c.returned {
                    core.io.recycle_payload(payload);
                }
            }
            _ => {}
        }
    }

    /// The error watch of a quiet connection woke: an error or a hang-up
    /// means its peer is gone (a read-closed socket's RDHUP alone means
    /// nothing new).
    fn on_watch<S>(&mut self, io: &mut Io<S>, id: ConnId, c: &Completion) {
        if !c.more() {
            if let Some(conn) = io.conn_mut(id) {
                conn.driver &= !(WATCHED | WATCH_CANCELLING);
            }
            io.mark_dirty(id); // watched again if still quiet
        }
        let gone = (libc::POLLERR | libc::POLLHUP) as i32;
        if c.result > 0 && c.result & gone != 0 && !io.peer_gone(id, Syscall::Recvfrom) {
            // An orderly hang-up: not watched until it reads again.
            set_bit(io, id, PARKED);
            io.mark_dirty(id);
        }
    }

    fn on_accept<H: Handler>(&mut self, core: &mut Core<H>, c: &Completion) {
        if !c.more() {
            self.accept_armed = false;
        }
        if c.result >= 0 {
            core.accepted(self, Fd::adopt_new(c.result));
        } else {
            core.io.accept_failed(&io::Error::from_raw_os_error(-c.result));
        }
    }

    fn on_recv<H: Handler>(&mut self, core: &mut Core<H>, id: ConnId, c: &Completion) {
        if !c.more() {
            if let Some(conn) = core.io.conn_mut(id) {
                conn.driver &= !(RECV_ARMED | CANCELLING);
            }
            core.io.mark_dirty(id); // to arm it again if still reading
        }
        match (c.result, c.buffer_id()) {
            (n, Some(_)) if n > 0 => self.ring.consume_received(c, |bytes| core.received(id, bytes)),
            (0, _) => core.io.peer_eof(id),
            // Out of ring buffers, or our own cancel: armed again if wanted.
            (e, _) if e == -libc::ENOBUFS || e == -libc::ECANCELED => {}
            (e, _) => core.io.failed(id, Syscall::Recvfrom, io::Error::from_raw_os_error(-e)),
        }
    }

    fn on_send<S>(&mut self, io: &mut Io<S>, id: ConnId, c: Completion) {
        if let Some(conn) = io.conn_mut(id) {
            conn.driver &= !SEND_IN_FLIGHT; // set again below for the rest of a short send
        }
        if c.result <= 0 {
            if let Some(payload) = c.returned {
                io.recycle_payload(payload);
            }
            let reason = match c.result {
                0 => CloseReason::Reset, // a send that took nothing
                e => io.reason(id, Syscall::Sendto, io::Error::from_raw_os_error(-e)),
            };
            return io.send_aborted(id, reason);
        }
        io.stats.gathered_sends += u64::from(matches!(c.returned, Some(Payload::Many(_))));
        io.sent(id, c.result as usize);
        let (fd, remaining) = io.conn(id).map_or((-1, 0), |conn| (conn.fd.raw(), conn.in_flight()));
        match c.returned {
            // A short send: the rest goes next, before anything staged.
            Some(mut payload) if remaining > 0 => {
                // The chunks wholly sent go now: a long gathered output
                // is not walked again from its start on every short send.
                let offset = payload.drop_sent(payload.len().saturating_sub(remaining), |buf| io.recycle(buf));
                self.send(io, id, fd, payload, offset);
            }
            Some(payload) => {
                io.recycle_payload(payload);
                io.mark_dirty(id); // staged output, if any, goes next
            }
            // A whole zero-copy send: the buffer comes with its notification.
            None => io.mark_dirty(id),
        }
    }

    /// Sends the output of the connections due, each in one send.
    fn send_all_due<H: Handler>(&mut self, core: &mut Core<H>) {
        while !self.sends_due.is_empty() {
            let mut due = std::mem::take(&mut self.sends_due);
            for id in due.drain(..) {
                let Some(c) = core.io.conn_mut(id) else { continue };
                c.driver &= !SEND_DUE;
                let fd = c.fd.raw();
                if let Some((payload, offset)) = core.io.take_output(id) {
                    self.send(&mut core.io, id, fd, payload, offset);
                }
            }
            // Only `sync` adds to the list, and it runs in the settle below:
            // the emptied list, with its room, is the list again.
            self.sends_due = due;
            core.settle(self); // a send that could not be queued closes
        }
    }

    /// Hands `payload` from `offset` on to the ring as the connection's
    /// one send in flight: zero-copy when it is one buffer, large enough,
    /// and the feature is on; gathered when it is several.
    fn send<S>(&mut self, io: &mut Io<S>, id: ConnId, fd: i32, payload: Payload, offset: usize) {
        let zc = self.features.send_zc_min;
        // Gathered sends are not zero-copy (IORING_OP_SENDMSG): shared
        // buffers save the copy in user space only.
        // Unix sockets have no zero-copy send (EOPNOTSUPP).
        let zero_copy = zc > 0
            && matches!(payload, Payload::One(_))
            && payload.len().saturating_sub(offset) >= zc
            && !io.is_unix(id);
        match self.ring.push_send(fd, payload, offset, ud(SEND, id), zero_copy) {
            Ok(()) => set_bit(io, id, SEND_IN_FLIGHT),
            Err(e) => {
                let reason = io.reason(id, Syscall::Sendto, e);
                io.send_aborted(id, reason)
            }
        }
    }

    fn on_connect<H: Handler>(&mut self, core: &mut Core<H>, id: ConnId, c: &Completion) {
        if let Some(conn) = core.io.conn_mut(id) {
            conn.driver &= !CONNECT_IN_FLIGHT;
        }
        match c.result {
            0.. => core.connected(id),
            e => core.io.connect_failed(id, io::Error::from_raw_os_error(-e)),
        }
    }

    /// Queues the cancel of `target`; false if it could not be queued
    /// (the request runs on, and its completion is handled like any other).
    fn cancel(&mut self, target: u64) -> bool {
        self.ring.push_cancel(target, IGNORE << KIND_SHIFT).is_ok()
    }
}

impl Driver for Uring {
    fn sync<S>(&mut self, io: &mut Io<S>, id: ConnId) {
        let Some(c) = io.conn_mut(id) else { return };
        let fd = c.fd.raw();
        if c.reading() && c.driver & RECV_ARMED == 0 {
            let armed = if self.recv_one_shot || c.driver & RECV_ONCE != 0 {
                self.ring.push_recv_once(fd, ud(RECV, id), self.features.bundle)
            } else {
                self.ring.push_recv_multi(fd, ud(RECV, id), self.features.bundle)
            };
            if let Err(e) = armed {
                return io.failed(id, Syscall::Recvfrom, e);
            }
            c.driver |= RECV_ARMED;
        } else if !c.reading() && c.driver & (RECV_ARMED | CANCELLING) == RECV_ARMED {
            c.driver |= RECV_ONCE;
            if self.cancel(ud(RECV, id)) {
                c.driver |= CANCELLING;
                self.cancelled = true;
            } // else the next sync tries again
        }
        if c.driver & (RECV_ARMED | CANCELLING) == 0 {
            c.allow_splice_reads(); // nothing received can still come
        }
        if c.splice_wants_input() && c.driver & SPLICE_IN_POLL == 0 {
            if let Err(e) = self.ring.push_poll_add(fd, libc::POLLIN as u32, false, ud(SPLICE_IN, id)) {
                return io.failed(id, Syscall::IoUringEnter, e);
            }
            c.driver |= SPLICE_IN_POLL;
        }
        let waits_room = c.has(SPLICE_OUT_WAIT);
        if waits_room && c.driver & SPLICE_OUT_POLL == 0 {
            if let Err(e) = self.ring.push_poll_add(fd, libc::POLLOUT as u32, true, ud(SPLICE_OUT, id)) {
                return io.failed(id, Syscall::IoUringEnter, e);
            }
            c.driver |= SPLICE_OUT_POLL;
        } else if !waits_room
            && c.driver & (SPLICE_OUT_POLL | SPLICE_OUT_CANCELLING) == SPLICE_OUT_POLL
            && self.cancel(ud(SPLICE_OUT, id))
        {
            c.driver |= SPLICE_OUT_CANCELLING; // it would wake on every ACK
        }
        if c.reading() || c.splice_wants_input() {
            c.driver &= !PARKED;
        }
        let quiet = !c.reading()
            && !c.has_unsent()
            && c.driver & (RECV_ARMED | SEND_IN_FLIGHT | CONNECT_IN_FLIGHT | PARKED | SPLICE_IN_POLL | SPLICE_OUT_POLL)
                == 0;
        if quiet && c.driver & WATCHED == 0 && !c.has(CONNECTING) {
            // Multishot: io_uring's poll always wakes on RDHUP too (its
            // IO_POLL_UNMASK), set for good on a read-closed socket, so a
            // one-shot poll would complete at once, again and again; a
            // multishot one posts at arming, then on each later wake-up.
            let mask = (libc::POLLERR | libc::POLLHUP) as u32;
            if self.ring.push_poll_add(fd, mask, true, ud(WATCH, id)).is_ok() {
                c.driver |= WATCHED;
            }
        } else if !quiet && c.driver & (WATCHED | WATCH_CANCELLING) == WATCHED && self.cancel(ud(WATCH, id)) {
            // WATCHED stays until the poll's last completion: a second
            // poll under the same user_data could escape every cancel and
            // hold the socket open for ever.
            c.driver |= WATCH_CANCELLING;
        }
        if c.output_to_take() && c.driver & SEND_DUE == 0 {
            c.driver |= SEND_DUE;
            self.sends_due.push(id);
        }
    }

    fn adopt<S>(&mut self, _io: &mut Io<S>, _id: ConnId) -> Result<()> {
        Ok(()) // its receive is armed when the core first syncs it
    }

    fn connect<S>(&mut self, io: &mut Io<S>, id: ConnId, addr: &AnyAddr) {
        let Some(c) = io.conn_mut(id) else { return };
        match self.ring.push_connect(c.fd.raw(), addr, ud(CONNECT, id)) {
            Ok(()) => c.driver |= CONNECT_IN_FLIGHT,
            Err(e) => io.connect_failed(id, e),
        }
    }

    fn accept<S>(&mut self, _io: &mut Io<S>, accept: Accept) {
        let Some(l) = self.listener.as_ref().map(Fd::raw) else { return };
        match accept {
            Accept::Closed | Accept::Up(0) => {
                if self.accept_armed && !self.accept_cancelled {
                    // Its completion (-ECANCELED, no F_MORE) clears accept_armed.
                    self.cancel(ACCEPT << KIND_SHIFT);
                    self.accept_cancelled = true;
                }
                if accept == Accept::Closed {
                    // Through the ring, after the cancel, so no queued accept
                    // meets a closed (or reused) descriptor number.
                    if let Some(Err((l, _))) =
                        self.listener.take().map(|l| self.ring.push_close(l, IGNORE << KIND_SHIFT))
                    {
                        drop(l);
                    }
                }
            }
            Accept::Up(_) | Accept::Unlimited if !self.accept_armed => {
                let armed = if accept == Accept::Unlimited {
                    self.ring.push_accept_multi(l, ACCEPT << KIND_SHIFT)
                } else {
                    self.ring.push_accept(l, ACCEPT << KIND_SHIFT)
                };
                // On failure (SQ full and the kernel busy) the next settle retries.
                self.accept_armed = armed.is_ok();
                self.accept_cancelled = false;
            }
            Accept::Up(_) | Accept::Unlimited => {}
        }
    }

    fn release(&mut self, id: ConnId, fd: Fd, driver_bits: u16) {
        if driver_bits & RECV_ARMED != 0 {
            // The armed receive holds the socket open until it ends. With
            // nothing unread, ending the socket's input ends it (with 0) at
            // no cost, and the close that follows is the FIN it would have
            // been; a cancel looks its request up by a walk of every pending
            // poll (Linux 6.13 on), so releasing n connections by cancels
            // costs O(n^2). With input unread the cancel stays: the receive
            // would otherwise read and drop it, and the close would end in
            // a FIN where every backend resets the peer (its request was
            // not read).
            let idle = net::unread(fd.raw()).is_ok_and(|n| n == 0);
            if !(idle && net::shutdown_read(fd.raw()).is_ok()) {
                self.cancel(ud(RECV, id));
            }
        }
        if driver_bits & CONNECT_IN_FLIGHT != 0 {
            self.cancel(ud(CONNECT, id));
        }
        if driver_bits & (WATCHED | WATCH_CANCELLING) == WATCHED {
            self.cancel(ud(WATCH, id));
        }
        if driver_bits & SPLICE_IN_POLL != 0 {
            self.cancel(ud(SPLICE_IN, id));
        }
        if driver_bits & (SPLICE_OUT_POLL | SPLICE_OUT_CANCELLING) == SPLICE_OUT_POLL {
            self.cancel(ud(SPLICE_OUT, id));
        }
        if driver_bits & SEND_IN_FLIGHT != 0 {
            // A send blocked on a peer that does not read would hold the
            // socket open (and its buffer) for ever: cancel it. The buffer
            // stays in the ring until its completion hands it back.
            self.cancel(ud(SEND, id));
        }
        if fd.is_none() {
            return; // a connect that failed before it had a socket
        }
        // Close through the ring too (IORING_OP_CLOSE): no syscall.
        if let Err((fd, _)) = self.ring.push_close(fd, IGNORE << KIND_SHIFT) {
            drop(fd); // closes with a syscall instead
        }
    }
}
