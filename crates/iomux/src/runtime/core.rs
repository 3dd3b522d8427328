//! The loop both drivers share: the handler's callbacks, closing, the end
//! of each turn (timers, linger deadlines, accept back-off, stop, drain).
//!
//! Like libev's backends, a driver only turns its mechanism's events into
//! calls here (`accepted`, `received`, `connected`, and on [`Io`]:
//! `sent`, `peer_eof`, `failed`) and carries out requests through the
//! [`Driver`] trait; everything else is written once.

use super::io::{Accept, Io};
use super::messages::{Inbox, RoomSignal};
use super::stats::LoopStats;
use super::timers::timeout_until;
use super::{CloseReason, Config, ConnId, Control, Handler};
use crate::error::Error;
use crate::poller::Waker;
use crate::sys::{
    self,
    net::{AnyAddr, Fd},
    SyscallCounts,
};
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What a driver does on the core's behalf.
pub(crate) trait Driver {
    /// Brings the kernel in line with connection `id`'s state: what to
    /// read (interest, or an armed receive) and its unsent output.
    fn sync<S>(&mut self, io: &mut Io<S>, id: ConnId);
    /// Watches a connection just accepted; an error refuses it.
    fn adopt<S>(&mut self, io: &mut Io<S>, id: ConnId) -> Result<(), Error>;
    /// Starts an outbound connect.
    fn connect<S>(&mut self, io: &mut Io<S>, id: ConnId, addr: &AnyAddr);
    /// Accepting may now do `accept` (called after every settle).
    fn accept<S>(&mut self, io: &mut Io<S>, accept: Accept);
    /// The connection left the core: forget it, then close `fd`.
    fn release(&mut self, id: ConnId, fd: Fd, driver_bits: u16);
}

/// What a loop starts from, whichever driver runs it.
pub(crate) struct Setup<'a, M> {
    pub(crate) cfg: &'a Config,
    pub(crate) listener: Option<Fd>,
    /// The listener is a Unix socket's: so is every connection it accepts.
    pub(crate) unix: bool,
    pub(crate) control: &'a Control,
    /// The loop's messages, when [`Runtime::senders`](super::Runtime::senders) made senders.
    pub(crate) inbox: Option<Arc<Inbox<M>>>,
    /// Called once the driver is set up, before its first wait.
    pub(crate) ready: &'a dyn Fn(),
    /// Where SIGINT/SIGTERM's handlers find this loop's eventfd, when the
    /// runtime stops on them.
    pub(crate) signal_slot: Option<&'a OnceLock<Arc<OwnedFd>>>,
}

pub(crate) struct Core<'h, H: Handler> {
    pub(crate) io: Io<H::Conn>,
    handler: &'h mut H,
    control: Control,
    inbox: Option<Arc<Inbox<H::Message>>>,
    start: Instant,
    counts_before: SyscallCounts,
}

impl<'h, H: Handler> Core<'h, H> {
    pub(crate) fn new(setup: &Setup<'_, H::Message>, handler: &'h mut H) -> Self {
        let start = Instant::now();
        Core {
            io: Io::new(setup.cfg, setup.listener.is_some(), start).accepting_unix(setup.unix),
            handler,
            control: setup.control.clone(),
            inbox: setup.inbox.clone(),
            start,
            counts_before: sys::counts(),
        }
    }

    /// The loop's waker is set up: stops, messages and (through
    /// `signal_slot`, the loop's slot in the stop signals' handler) SIGINT
    /// and SIGTERM wake it from now on.
    pub(crate) fn wake_with(&mut self, waker: &Waker, signal_slot: Option<&OnceLock<Arc<OwnedFd>>>) {
        if let Some(slot) = signal_slot {
            // A signal's handler that ran before this was set finds the
            // stop at the check in `register` (fenced as the handler is).
            let _ = slot.set(waker.eventfd());
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        }
        self.control.register(waker.clone());
        self.io.room = Some(RoomSignal::new(waker.clone()));
        if let Some(inbox) = &self.inbox {
            inbox.set_waker(waker.clone());
        }
    }

    pub(crate) fn start<D: Driver>(&mut self, d: &mut D) {
        self.handler.on_start(&mut self.io);
        self.settle(d);
        // Messages sent before the waker was set up woke nobody.
        self.deliver_messages();
        self.settle(d);
    }

    pub(crate) fn finished(&self) -> bool {
        let io = &self.io;
        if io.shutting_down {
            return io.conns.is_empty();
        }
        // A loop with nothing to serve and nothing pending is done.
        !io.has_listener
            && io.conns.is_empty()
            && io.timers.is_empty()
            && io.drained.is_empty()
            && io.drained_later.is_empty()
            && self.inbox.as_ref().is_none_or(|inbox| inbox.is_empty())
    }

    /// How long the next wait may block; zero when work is pending here
    /// or, with `driver_busy`, in the driver.
    pub(crate) fn timeout(&self, driver_busy: bool) -> Option<Duration> {
        let io = &self.io;
        if driver_busy || self.must_not_wait() {
            return Some(Duration::ZERO);
        }
        let deadlines = [
            io.timers.next_deadline(),
            io.deadlines.next_deadline(),
            io.accept_resume_at,
            io.drain_deadline,
            io.lingering.next_deadline(),
            io.closing.next_deadline(),
            io.connect_deadlines.next_deadline(),
            io.handshake_deadlines.next_deadline(),
        ];
        timeout_until(deadlines, Instant::now)
    }

    pub(crate) fn must_not_wait(&self) -> bool {
        let io = &self.io;
        !io.drained.is_empty()
            || !io.drained_later.is_empty()
            || !io.doomed.is_empty()
            || !io.doomed_later.is_empty()
            || !io.reoffer.is_empty()
            || !io.read_closed.is_empty()
            || io.messages_due
            || io.stop_requested
    }

    pub(crate) fn begin_turn(&mut self) {
        self.io.stats.turns += 1;
        self.io.now = Instant::now();
    }

    /// The loop's waker fired: a stop or messages (the caller settles).
    pub(crate) fn woken(&mut self) {
        if self.control.is_stopped() {
            self.io.stop_requested = true;
        }
        self.deliver_messages();
        let room = self.io.room.as_ref().map(|signal| signal.take()).unwrap_or_default();
        for loop_index in room {
            self.handler.on_room(&mut self.io, loop_index);
        }
    }

    /// Hands every queued message to the handler, oldest first.
    fn deliver_messages(&mut self) {
        self.io.messages_due = false;
        let Some(inbox) = &self.inbox else { return };
        if self.io.messages_held {
            return;
        }
        let mut taken = inbox.take_all();
        while let Some(msg) = taken.pop_front() {
            self.io.stats.messages += 1;
            self.handler.on_message(&mut self.io, msg);
            if self.io.messages_held && !taken.is_empty() {
                // Held from a callback: the rest waits, first in line.
                return inbox.put_back(taken);
            }
        }
    }

    /// After the events: drained notices, timers, deadlines, stop.
    pub(crate) fn end_turn<D: Driver>(&mut self, d: &mut D) {
        if self.io.messages_due {
            self.deliver_messages();
        }
        if !self.io.drained_later.is_empty() {
            let later = std::mem::take(&mut self.io.drained_later);
            self.io.drained.extend(later);
        }
        if !self.io.doomed_later.is_empty() {
            let failed = std::mem::take(&mut self.io.doomed_later);
            self.io.doomed.extend(failed);
        }
        self.settle(d);
        // Only timers set before this phase: one set from on_timer for
        // now fires next turn, after I/O, not in an endless phase.
        let set_before = self.io.timers.next_id();
        while let Some((timer, token)) = self.io.timers.pop_due(self.io.now, set_before) {
            self.handler.on_timer(&mut self.io, timer, token);
            self.settle(d);
        }
        let pushed_before = self.io.deadlines.next_seq();
        while let Some(id) = self.io.due_deadline(self.io.now, pushed_before) {
            if let Some((pending, mut state)) = self.io.take_for_callback(id) {
                self.handler.on_deadline(&mut self.io, id, &mut state);
                self.io.put_back(id, pending, state);
            }
            self.settle(d);
        }
        while let Some(id) = self.io.lingering.pop_due(self.io.now) {
            let reason = self.io.closing_reason(id);
            self.io.doom(id, reason);
        }
        while let Some(id) = self.io.closing.pop_due(self.io.now) {
            self.io.close_deadline(id);
        }
        while let Some(id) = self.io.connect_deadlines.pop_due(self.io.now) {
            self.io.connect_deadline(id);
        }
        self.io.prune_connect_deadlines();
        while let Some(id) = self.io.handshake_deadlines.pop_due(self.io.now) {
            self.io.handshake_deadline(id);
        }
        self.io.prune_handshake_deadlines();
        if self.io.accept_resume_at.is_some_and(|t| t <= self.io.now) {
            self.io.accept_resume_at = None;
        }
        if self.control.is_stopped() || self.io.stop_requested {
            self.io.begin_shutdown();
        }
        if self.io.drain_deadline.is_some_and(|t| t <= self.io.now) {
            for id in self.io.conns.ids() {
                // Shutdown, or Idle for one that was closing as idle.
                let reason = self.io.closing_reason(id);
                self.io.doom(id, reason);
            }
        }
        self.settle(d);
    }

    /// A connection was accepted: watch it, then let the handler make its
    /// state (or refuse it, when the driver cannot watch it).
    pub(crate) fn accepted<D: Driver>(&mut self, d: &mut D, fd: Fd) {
        if self.io.shutting_down {
            return; // accepted just before the stop took effect: refuse it
        }
        if self.io.accept_budget() == Accept::Up(0) {
            // An accept in flight beat its cancel (io_uring): the limit holds.
            self.io.stats.refused += 1;
            return;
        }
        self.io.accept_succeeded();
        let id = self.io.insert(fd, self.io.accepted_flags, None);
        if let Err(e) = d.adopt(&mut self.io, id) {
            // select cannot watch fd >= FD_SETSIZE: refuse this one, loudly.
            if let Some(c) = self.io.conns.remove(id) {
                d.release(id, c.fd, c.driver);
            }
            self.io.stats.refused += 1;
            self.handler.on_refused(&e);
            return;
        }
        self.io.stats.accepted += 1;
        let state = self.handler.on_accept(&mut self.io, id);
        self.io.put_back(id, Vec::new(), state);
        self.settle(d);
    }

    /// An outbound connect finished.
    pub(crate) fn connected(&mut self, id: ConnId) {
        // A layered one's handler hears of it once the handshake is done.
        if !self.io.connected(id) || self.io.connect_deferred(id) {
            return;
        }
        self.tell_connected(id);
    }

    fn tell_connected(&mut self, id: ConnId) {
        if let Some((pending, mut state)) = self.io.take_for_callback(id) {
            self.handler.on_connect(&mut self.io, id, &mut state);
            self.io.put_back(id, pending, state);
        }
    }

    /// Bytes arrived: hands them, after any the handler left unconsumed,
    /// to the handler (discarded once the connection is closing; held back
    /// while reading is paused).
    pub(crate) fn received(&mut self, id: ConnId, data: &[u8]) {
        if let Some(state) = self.io.take_state_if_fresh(id, data) {
            self.io.stats.bytes_in += data.len() as u64;
            self.io.stats.reads += 1;
            return self.deliver_fresh(id, state, data);
        }
        if !self.io.delivers_plain(id) {
            return self.received_other(id, data);
        }
        self.io.stats.bytes_in += data.len() as u64;
        self.io.stats.reads += 1;
        self.deliver(id, data, true);
    }

    /// [`Core::deliver`] of plaintext when nothing is held back and the
    /// handler takes input (most reads): the first slice is offered with
    /// the state alone taken out, and when the handler consumes all of it
    /// only the state goes back. Otherwise the rest takes the general way
    /// from where the first call left it, as `offer` would have.
    fn deliver_fresh(&mut self, id: ConnId, mut state: H::Conn, data: &[u8]) {
        let end = data.len().min(self.io.cfg.read_buffer);
        let n = self.handler.on_data(&mut self.io, id, &mut state, &data[..end]).min(end);
        if n == data.len() {
            return self.io.put_back_state(id, state);
        }
        let consumed = match n {
            0 if end == data.len() => 0, // declined whole: the next read adds to it
            0 => self.offer(id, &mut state, data, end, true),
            _ => n + self.offer(id, &mut state, &data[n..], 0, true),
        };
        let mut pending = self.io.take_pending(id);
        pending.extend_from_slice(&data[consumed..]);
        self.put_back_offered(id, pending, state);
    }

    /// Bytes arrived on a connection that does not take them as they
    /// are: a layered one's go through its layer (even while it closes
    /// during its handshake); a closing one's are discarded.
    #[cold]
    fn received_other(&mut self, id: ConnId, data: &[u8]) {
        if !self.io.is_layered(id) {
            return;
        }
        self.io.stats.bytes_in += data.len() as u64;
        self.io.stats.reads += 1;
        let mut plain = std::mem::take(&mut self.io.layer_plain);
        if let Some(events) = self.io.layer_input(id, data, &mut plain) {
            if events.established && self.io.established(id) {
                self.tell_connected(id);
            }
            if !plain.is_empty() && self.io.delivers(id) {
                self.deliver(id, &plain, false);
            }
            if events.peer_closed {
                self.io.ended(id);
            }
        }
        plain.clear();
        if plain.capacity() <= self.io.cfg.read_buffer {
            self.io.layer_plain = plain;
        }
    }

    /// Offers `data` (after any input left before) to the handler and
    /// keeps what it leaves. `clear`: bytes as received, not a layer's.
    fn deliver(&mut self, id: ConnId, data: &[u8], clear: bool) {
        let Some((mut pending, mut state)) = self.io.take_for_callback(id) else { return };
        if pending.is_empty() {
            // Nothing held back: no copy.
            let consumed = self.offer(id, &mut state, data, 0, clear);
            pending.extend_from_slice(&data[consumed..]);
        } else {
            // What is left was offered whole and declined, unless reading
            // was paused (then none of it was).
            let declined = if self.io.held_back(id) { 0 } else { pending.len() };
            pending.extend_from_slice(data);
            let consumed = self.offer(id, &mut state, &pending, declined, clear);
            pending.drain(..consumed);
        }
        self.put_back_offered(id, pending, state);
    }

    /// Offers `input` to the handler in slices of at most `read_buffer`
    /// new bytes, again after each call that consumed some of it (a
    /// handler may take one request per call), until all is consumed,
    /// reading pauses (the output passed its bound, or the handler paused
    /// it), or the handler consumes nothing of all of it. A slice it
    /// consumed nothing of is offered again with up to `read_buffer` bytes
    /// more, so a request of any size reaches it whole; `declined` is how
    /// much of `input`'s start it already consumed nothing of. Returns the
    /// bytes consumed. `clear` input (not a layer's) stops once the
    /// handler sets a layer: the rest is not plaintext any more.
    fn offer(&mut self, id: ConnId, state: &mut H::Conn, input: &[u8], mut declined: usize, clear: bool) -> usize {
        let read = self.io.cfg.read_buffer;
        let mut consumed = 0;
        while consumed < input.len() && self.io.offers(id, clear) {
            let end = input.len().min(consumed + declined + read);
            let n = self.handler.on_data(&mut self.io, id, state, &input[consumed..end]).min(end - consumed);
            if n == 0 {
                if end == input.len() {
                    break;
                }
                declined = end - consumed;
                continue;
            }
            declined = 0;
            consumed += n;
        }
        consumed
    }

    /// Puts the unconsumed input back: input not offered because reading
    /// is paused waits for it to resume; more than `max_input` offered and
    /// left unconsumed closes. (Input the loop read before a pause took
    /// effect is not the handler's doing: bounded by one receive on every
    /// backend, it does not count until offered.)
    fn put_back_offered(&mut self, id: ConnId, pending: Vec<u8>, state: H::Conn) {
        let io = &mut self.io;
        // Nothing left (the usual case): no splice to feed, no bound to pass.
        let splicing = !pending.is_empty() && io.splicing(id);
        let unoffered = !pending.is_empty() && io.delivers(id) && !io.takes_input(id);
        let overflow = pending.len() > io.cfg.max_input && !unoffered && !splicing;
        if splicing && !unoffered {
            io.pumps.push_back(id); // declined: it goes to the splice's target
        }
        io.put_back(id, pending, state);
        io.set_unoffered(id, unoffered);
        if overflow {
            io.doom(id, CloseReason::InputLimit);
        }
    }

    /// Reading resumed: offers the input held back while it was paused.
    fn reoffered(&mut self, id: ConnId) {
        if !self.io.takes_input(id) {
            return;
        }
        let clear = !self.io.is_layered(id);
        let Some((mut pending, mut state)) = self.io.take_for_callback(id) else { return };
        let consumed = self.offer(id, &mut state, &pending, 0, clear);
        pending.drain(..consumed);
        self.put_back_offered(id, pending, state);
    }

    /// The peer's input ended: the handler hears of it (by default it
    /// shuts our side down after the output).
    fn read_closed(&mut self, id: ConnId) {
        if !self.io.tells_eof(id) {
            return;
        }
        if let Some((pending, mut state)) = self.io.take_for_callback(id) {
            self.handler.on_read_closed(&mut self.io, id, &mut state);
            self.io.put_back(id, pending, state);
        }
        self.io.close_if_both_ended(id);
    }

    /// Carries out what callbacks asked for, closes doomed connections and
    /// delivers drained notices, until none are left.
    pub(crate) fn settle<D: Driver>(&mut self, d: &mut D) {
        loop {
            if self.io.only_dirty_may_wait() {
                // The usual case: the cascade below would find only these.
                match self.io.pop_dirty() {
                    Some(id) => d.sync(&mut self.io, id),
                    None => break,
                }
            } else if let Some((id, addr)) = self.io.connecting.pop_front() {
                d.connect(&mut self.io, id, &addr);
            } else if let Some(id) = self.io.pop_dirty() {
                d.sync(&mut self.io, id);
            } else if let Some((id, reason)) = self.io.doomed.pop_front() {
                self.finalize(d, id, reason);
            } else if let Some(id) = self.io.pumps.pop_front() {
                // Only what waited: reading the socket is the driver's.
                let _ = self.io.pump(id, 0);
            } else if let Some(id) = self.io.reoffer.pop_front() {
                self.reoffered(id);
            } else if let Some(id) = self.io.read_closed.pop_front() {
                self.read_closed(id);
            } else if let Some(id) = self.io.drained.pop() {
                if let Some((pending, mut state)) = self.io.take_for_callback(id) {
                    self.handler.on_drained(&mut self.io, id, &mut state);
                    self.io.put_back(id, pending, state);
                }
            } else {
                break;
            }
        }
        let accept = self.io.accept_budget();
        d.accept(&mut self.io, accept);
    }

    fn finalize<D: Driver>(&mut self, d: &mut D, id: ConnId, reason: CloseReason) {
        self.io.splice_released(id);
        let Some(c) = self.io.conns.remove(id) else { return };
        let (fd, driver_bits, state) = self.io.dismantle(c);
        d.release(id, fd, driver_bits);
        self.io.stats.closed += 1;
        if !reason.is_clean() {
            self.io.stats.closed_abnormally += 1;
        }
        match reason {
            CloseReason::PeerVanished => self.io.stats.vanished += 1,
            CloseReason::Idle => self.io.stats.idle_closed += 1,
            _ => {}
        }
        self.io.released();
        if let Some(state) = state {
            self.handler.on_close(&mut self.io, id, state, &reason);
        }
    }

    /// The loop's figures, with the syscalls its thread made.
    pub(crate) fn finish(self, uring_setup: Option<&'static str>) -> LoopStats {
        let mut stats = self.io.stats;
        if let Some(inbox) = &self.inbox {
            (stats.inbox_peak, stats.inbox_refused) = inbox.figures();
        }
        stats.syscalls = sys::counts().since(&self.counts_before);
        stats.wall = self.start.elapsed();
        stats.uring_setup = uring_setup;
        stats
    }
}
