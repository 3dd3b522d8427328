//! [`Io`]: what a handler may do, and the one connection state machine
//! every driver shares (output and its bound, backpressure, half-close,
//! close with pending output, lingering close, timers, stop).
//!
//! A driver never decides policy: it tells the core what the kernel did
//! (bytes received, EOF, bytes sent, an error) and carries out what the
//! core asks for, which the core leaves in `dirty` (a connection whose
//! reading or output changed), `doomed` (to close) and the accept budget.

use super::layer::Layered;
use super::messages::{RoomSignal, Sender};
use super::slab::Slab;
use super::stats::LoopStats;
use super::timers::{ConnDeadlines, Deadlines, TimerId, Timers};
use super::{CloseReason, Config, ConnId};
use crate::error::{Error, Result};
use crate::sys::net::{self, AnyAddr, Fd};
use crate::sys::payload::{Chunk, Payload};
use crate::Syscall;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod layering;
mod splice;
use splice::Splice;
pub(crate) use splice::SPLICE_OUT_WAIT;

// Connection state bits (the core's; drivers keep theirs in `Conn::driver`).
pub(crate) const READ_CLOSED: u32 = 1; // the peer sent EOF
pub(crate) const CLOSING: u32 = 2; // close once the output is sent; deliver nothing more
pub(crate) const CONNECTING: u32 = 4; // outbound connect not finished
const PAUSED: u32 = 8; // output over its bound: not reading
const NOTIFY_DRAINED: u32 = 16; // on_drained once the output is at most `low_water`
const DOOMED: u32 = 32; // queued for close
const LINGER: u32 = 64; // FIN sent; reading and discarding until the peer's EOF
const DIRTY: u32 = 128; // in the dirty list
const HELD: u32 = 256; // the handler paused reading (Io::pause_reading)
const UNOFFERED: u32 = 512; // input held back while paused, to offer on resume
const IDLE: u32 = 1024; // closing as idle (Io::close_idle)
const WRITE_SHUT: u32 = 2048; // Io::shutdown_write: FIN once the output is out; no more writes
const WRITE_CLOSED: u32 = 4096; // our FIN is sent
const EOF_UNTOLD: u32 = 8192; // the peer's EOF came; on_read_closed not called yet
pub(crate) const UNIX: u32 = 16384; // a Unix stream socket (no TCP options, no zero-copy send)
                                    // 1 << 15 is splice's SPLICE_OUT_WAIT.
const LAYERED: u32 = 1 << 16; // bytes go through a layer (Io::set_layer): the slow paths
const HANDSHAKING: u32 = 1 << 17; // the layer's handshake is not done: read even while closing
const SWITCHED: u32 = 1 << 18; // layered from inside one of its own callbacks: its cleartext is checked

/// Output buffers kept for reuse, so a write costs no allocation and an
/// idle connection owns no buffer.
const POOL_MAX: usize = 256;
const POOL_BUF_MAX: usize = 64 << 10;

/// One connection, as every driver sees it.
pub(crate) struct Conn<S> {
    pub(crate) fd: Fd,
    /// Output queued before `out`, in order: shared buffers
    /// ([`Io::write_bytes`]) and the copies written before them. Empty
    /// unless the handler shares buffers, so plain writes cost nothing more.
    sealed: VecDeque<Chunk>,
    /// Bytes of the front sealed chunk already sent.
    sealed_pos: usize,
    /// Bytes of `sealed` not sent yet.
    sealed_len: usize,
    /// Written by the handler (after everything sealed) and not yet sent
    /// (readiness) or not yet handed to the kernel (completion), from
    /// `out_pos` on; `out_pos` is 0 while anything is sealed.
    out: Vec<u8>,
    out_pos: usize,
    /// Bytes handed to the kernel in a send that has not completed.
    in_flight: usize,
    pending_in: Vec<u8>,
    flags: u32,
    /// With NOTIFY_DRAINED: on_drained once `buffered()` is at most this.
    low_water: usize,
    /// The driver's own bits (registered interest, receive armed, ...).
    pub(crate) driver: u16,
    /// The handler's state; taken out while a callback borrows it.
    state: Option<S>,
    /// The deadline the handler set ([`Io::set_deadline`]).
    deadline: Option<Instant>,
    /// When this connection's live entry in `Io::deadlines` is due; its
    /// other entries, if any, are stale and skipped.
    queued: Option<Instant>,
    /// Its input goes to another connection by splice(2) ([`Io::splice`]).
    splice: Option<Box<Splice>>,
    /// Its bytes go through a layer ([`Io::set_layer`]).
    layered: Option<Box<Layered>>,
}

impl<S> Conn<S> {
    fn buffered(&self) -> usize {
        self.sealed_len + self.out.len() - self.out_pos + self.in_flight
    }
    pub(crate) fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
    /// Whether the handler's writes are queued as they are: open for
    /// output (not after [`Io::close`], [`Io::shutdown_write`] or a stop)
    /// and not layered. One test for both, so plaintext pays nothing for
    /// layers: the other cases take `write_layered`.
    fn writes_plain(&self) -> bool {
        self.flags & (DOOMED | CLOSING | WRITE_SHUT | LAYERED) == 0
    }
    /// Whether a close waits for the layer's handshake to complete first
    /// (the bytes written before it go out sealed, then the closing
    /// record); not once the layer failed.
    fn waits_for_handshake(&self) -> bool {
        self.has(HANDSHAKING) && self.layered.as_ref().is_some_and(|l| !l.failed)
    }
    /// Plaintext the layer holds until its handshake completes.
    fn held(&self) -> usize {
        self.layered.as_ref().map_or(0, |l| l.layer.held())
    }
    /// Whether the driver should read: to deliver, or (lingering) to
    /// discard. Not while input read before is held back unoffered: that
    /// goes first, so what the loop holds stays bounded and the kernel's
    /// socket buffer (so TCP) holds the peer back, on io_uring too, whose
    /// receive would otherwise run on while the held input waits.
    pub(crate) fn reading(&self) -> bool {
        // A splicing connection is read by splice (`splice_wants_input`).
        if self.flags & (READ_CLOSED | CONNECTING | DOOMED) != 0 || self.splice.is_some() {
            return false;
        }
        // A handshake goes on whatever the handler does: it delivers nothing.
        self.flags & (LINGER | HANDSHAKING) != 0 || self.flags & (CLOSING | PAUSED | HELD | UNOFFERED) == 0
    }
    /// Whether some output is not handed to the kernel yet.
    pub(crate) fn has_unsent(&self) -> bool {
        self.sealed_len > 0 || self.out.len() > self.out_pos
    }
    /// The output not handed to the kernel yet when it is in one piece:
    /// nothing sealed (the common case), or one sealed chunk and nothing
    /// after it; else None: see [`Conn::unsent_slices`].
    pub(crate) fn unsent_flat(&self) -> Option<&[u8]> {
        match (self.sealed.front(), self.sealed.len()) {
            (None, _) => Some(&self.out[self.out_pos..]),
            (Some(only), 1) if self.out.is_empty() => Some(&only[self.sealed_pos..]),
            _ => None,
        }
    }
    /// The output not handed to the kernel yet, as at most
    /// [`MAX_IOV`](crate::sys::payload::MAX_IOV) slices for one gathered send.
    pub(crate) fn unsent_slices(&self) -> Vec<std::io::IoSlice<'_>> {
        let pieces = self.sealed.iter().map(|c| &c[..]).chain(std::iter::once(&self.out[..]));
        crate::sys::payload::slices_from(pieces, self.sealed_pos + self.out_pos)
    }
    /// Whether a send may take output now (completion drivers): some is
    /// unsent, no send is in flight, and the connection is established.
    pub(crate) fn output_to_take(&self) -> bool {
        self.has_unsent() && self.in_flight == 0 && !self.has(CONNECTING)
    }
    /// Bytes of the send in flight not yet confirmed (completion drivers).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }
}

/// The loop as a handler sees it: write, close, connect, timers, stop.
///
/// Every method takes effect after the callback returns, in order: a write
/// is queued and sent by the loop right after the callback, whatever the
/// backend, so all backends behave the same.
pub struct Io<S> {
    pub(crate) cfg: Config,
    pub(crate) conns: Slab<Conn<S>>,
    pub(crate) timers: Timers,
    pub(crate) deadlines: ConnDeadlines,
    pub(crate) now: Instant,
    pub(crate) stats: LoopStats,
    /// In the order the handler acted, so connects and writes to several
    /// connections reach the kernel in the order they were made.
    pub(crate) dirty: VecDeque<ConnId>,
    pub(crate) doomed: VecDeque<(ConnId, CloseReason)>,
    /// Connects that failed at once, closed on the next turn: a handler
    /// that connects again from on_close must not loop within one turn.
    pub(crate) doomed_later: Vec<(ConnId, CloseReason)>,
    pub(crate) drained: Vec<ConnId>,
    pub(crate) drained_later: Vec<ConnId>,
    /// Connections whose held-back input is offered again (reading
    /// resumed), in the order they resumed.
    pub(crate) reoffer: VecDeque<ConnId>,
    /// Connections whose end of input the handler is to hear of
    /// ([`Handler::on_read_closed`](super::Handler::on_read_closed)).
    pub(crate) read_closed: VecDeque<ConnId>,
    pub(crate) lingering: Deadlines,
    /// Connections closing with output still to send, by close deadline.
    pub(crate) closing: Deadlines,
    pool: Vec<Vec<u8>>,
    pub(crate) stop_requested: bool,
    pub(crate) shutting_down: bool,
    pub(crate) has_listener: bool,
    /// Flags of every accepted connection (UNIX for a Unix listener's).
    pub(crate) accepted_flags: u32,
    /// Accepting paused until then (EMFILE/ENFILE back-off).
    pub(crate) accept_resume_at: Option<Instant>,
    /// The next back-off: doubles while accepting keeps failing, so a
    /// loop out of descriptors wakes (and wakes an SQPOLL thread) rarely.
    accept_backoff: Duration,
    pub(crate) drain_deadline: Option<Instant>,
    /// Outbound connects the driver has not started yet.
    pub(crate) connecting: VecDeque<(ConnId, AnyAddr)>,
    /// Outbound connects by their [`ConfigBuilder::connect_timeout`](super::ConfigBuilder::connect_timeout).
    pub(crate) connect_deadlines: Deadlines,
    /// Layered connections' handshakes by their [`ConfigBuilder::handshake_timeout`](super::ConfigBuilder::handshake_timeout).
    pub(crate) handshake_deadlines: Deadlines,
    /// Plaintext a layer yielded, handed to the handler (reused).
    pub(crate) layer_plain: Vec<u8>,
    /// Who splices into a connection: target to source ([`Io::splice`]).
    feeders: HashMap<ConnId, ConnId>,
    /// Splicing connections to pump (their target can take bytes again).
    pub(crate) pumps: VecDeque<ConnId>,
    /// This loop's notices of room in other loops' inboxes ([`Io::when_room`]).
    pub(crate) room: Option<Arc<RoomSignal>>,
    /// [`Io::hold_messages`]: messages wait in the inbox.
    pub(crate) messages_held: bool,
    /// Released after a hold: what waits is handed over on this turn.
    pub(crate) messages_due: bool,
}

impl<S> Io<S> {
    pub(crate) fn new(cfg: &Config, has_listener: bool, now: Instant) -> Io<S> {
        Io {
            cfg: cfg.clone(),
            conns: Slab::default(),
            timers: Timers::default(),
            deadlines: ConnDeadlines::default(),
            now,
            stats: LoopStats { loops: 1, ..LoopStats::default() },
            dirty: VecDeque::new(),
            doomed: VecDeque::new(),
            doomed_later: Vec::new(),
            drained: Vec::new(),
            drained_later: Vec::new(),
            reoffer: VecDeque::new(),
            read_closed: VecDeque::new(),
            lingering: Deadlines::default(),
            closing: Deadlines::default(),
            pool: Vec::new(),
            stop_requested: false,
            shutting_down: false,
            has_listener,
            accepted_flags: 0,
            accept_resume_at: None,
            accept_backoff: cfg.accept_backoff,
            drain_deadline: None,
            connecting: VecDeque::new(),
            connect_deadlines: Deadlines::default(),
            handshake_deadlines: Deadlines::default(),
            layer_plain: Vec::new(),
            feeders: HashMap::new(),
            pumps: VecDeque::new(),
            room: None,
            messages_held: false,
            messages_due: false,
        }
    }

    /// Marks the connections this loop accepts as Unix sockets, or not.
    pub(crate) fn accepting_unix(mut self, unix: bool) -> Io<S> {
        self.accepted_flags = if unix { UNIX } else { 0 };
        self
    }

    // ------------------------------------------------------------ public

    /// The loop's clock, read once per turn.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Queues `data` on the connection's output, in order. Never drops
    /// bytes: the output may pass its bound by one write, and then the loop
    /// stops reading that connection, and offering it input, until it
    /// drains to half the bound; then the input left is offered again.
    /// Returns false if the connection is gone or closing, or its write
    /// side was shut down ([`Io::shutdown_write`]).
    ///
    /// Writes to an outbound connection that is still connecting are
    /// queued, and go out, in order, once it is established (before
    /// anything written in [`Handler::on_connect`](super::Handler::on_connect)).
    #[must_use = "a write to a closed or closing connection is refused"]
    pub fn write(&mut self, conn: ConnId, data: &[u8]) -> bool {
        let Some(c) = self.conns.get_mut(conn) else { return false };
        if !c.writes_plain() {
            return self.write_layered(conn, data);
        }
        if data.is_empty() {
            return true;
        }
        if c.out.capacity() == 0 {
            if let Some(buf) = self.pool.pop() {
                c.out = buf;
            }
        }
        c.out.extend_from_slice(data);
        self.queued_more(conn);
        true
    }

    /// Queues `data` on the connection's output without copying it: the
    /// loop holds a reference until the kernel has taken the bytes, and
    /// sends it together with what was written before and after in
    /// gathered sends (`sendmsg` on the readiness backends,
    /// IORING_OP_SENDMSG on io_uring: up to 1024 buffers at a time). For a large body, or one value
    /// sent to many connections. A buffer shorter than
    /// [`ConfigBuilder::share_min`](super::ConfigBuilder::share_min) (1 KiB
    /// by default) is copied, which costs less. Bounded, and refused, as [`Io::write`].
    ///
    /// ```
    /// use iomux::runtime::{Bytes, ConnId, Handler, Io};
    ///
    /// /// Answers every line with one page shared by all connections.
    /// struct Page(Bytes);
    ///
    /// impl Handler for Page {
    ///     type Conn = ();
    ///     type Message = ();
    ///     fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    ///     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         let Some(end) = data.iter().position(|&b| b == b'\n') else { return 0 };
    ///         let head = format!("{}\n", self.0.len());
    ///         let _ = io.write(conn, head.as_bytes()) && io.write_bytes(conn, self.0.clone());
    ///         end + 1
    ///     }
    /// }
    /// let _page = Page(Bytes::from(vec![b'x'; 64 << 10]));
    /// ```
    #[must_use = "a write to a closed or closing connection is refused"]
    pub fn write_bytes(&mut self, conn: ConnId, data: Bytes) -> bool {
        if data.len() < self.cfg.share_min {
            return self.write(conn, &data);
        }
        let Some(c) = self.conns.get_mut(conn) else { return false };
        if !c.writes_plain() {
            return self.write_layered(conn, &data); // a layer seals a copy
        }
        if c.out.len() > c.out_pos {
            // What was written before goes first: seal it.
            let buf = std::mem::take(&mut c.out);
            if c.sealed.is_empty() {
                c.sealed_pos = c.out_pos; // the part already sent
            } else {
                debug_assert_eq!(c.out_pos, 0, "while anything is sealed, sends take it first");
            }
            c.sealed_len += buf.len() - c.out_pos;
            c.out_pos = 0;
            c.sealed.push_back(Chunk::Copied(buf));
        }
        c.sealed_len += data.len();
        c.sealed.push_back(Chunk::Shared(data));
        self.queued_more(conn);
        true
    }

    /// Output was queued: the peak, the bound, and the driver's turn.
    fn queued_more(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        if !queued_under_bound(c, conn, &mut self.stats, self.cfg.max_output, &mut self.dirty) {
            self.update_backpressure(conn);
            self.mark_dirty(conn);
        }
    }

    /// Serializes straight into the connection's output: `f` appends the
    /// bytes to send to an empty buffer, which becomes the output without
    /// a copy when nothing else is queued (appended once otherwise).
    /// Returns what `f` returned, or None (and `f` is not called) if the
    /// connection is gone or closing, as [`Io::write`] refuses. Output is
    /// bounded as for [`Io::write`].
    ///
    /// ```
    /// use iomux::runtime::{ConnId, Handler, Io};
    /// use std::io::Write;
    ///
    /// /// Answers each line with its length, formatted in place.
    /// struct Lengths;
    ///
    /// impl Handler for Lengths {
    ///     type Conn = ();
    ///     type Message = ();
    ///     fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    ///     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         let Some(end) = data.iter().position(|&b| b == b'\n') else { return 0 };
    ///         let _ = io.write_with(conn, |out| writeln!(out, "{}", end));
    ///         end + 1
    ///     }
    /// }
    /// ```
    #[must_use = "a write to a closed or closing connection is refused"]
    pub fn write_with<R>(&mut self, conn: ConnId, f: impl FnOnce(&mut Vec<u8>) -> R) -> Option<R> {
        let c = self.conns.get_mut(conn)?;
        if !c.writes_plain() {
            return self.write_with_layered(conn, f);
        }
        // The closure gets a buffer of its own, so it cannot disturb bytes
        // already queued, whatever it does with the Vec. It cannot reach
        // the loop either, so `c` stays the connection's throughout.
        let mut fresh = self.pool.pop().unwrap_or_default();
        let result = f(&mut fresh);
        let added = !fresh.is_empty();
        if c.out.len() == c.out_pos {
            // Nothing unsent: the new bytes are the output.
            let spare = std::mem::replace(&mut c.out, fresh);
            c.out_pos = 0;
            recycle_into(&mut self.pool, spare);
        } else {
            c.out.extend_from_slice(&fresh);
            recycle_into(&mut self.pool, fresh);
        }
        if added && !queued_under_bound(c, conn, &mut self.stats, self.cfg.max_output, &mut self.dirty) {
            self.update_backpressure(conn);
            self.mark_dirty(conn);
        }
        Some(result)
    }

    /// Stops reading the connection: nothing more is delivered to
    /// [`Handler::on_data`](super::Handler::on_data) (input already read
    /// is kept) until [`Io::resume_reading`]. The peer is held back by TCP
    /// flow control. The loop pauses reading by itself, the same way, while
    /// the connection's output is over
    /// [`ConfigBuilder::max_output`](super::ConfigBuilder::max_output).
    pub fn pause_reading(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        if !c.has(HELD) {
            c.flags |= HELD;
            self.mark_dirty(conn);
        }
    }

    /// Reads the connection again after [`Io::pause_reading`]: the input
    /// left unconsumed is offered to
    /// [`Handler::on_data`](super::Handler::on_data) at once, without
    /// waiting for more bytes.
    pub fn resume_reading(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        if c.has(HELD) {
            c.flags &= !HELD;
            self.resumed(conn);
        }
    }

    /// Output bytes queued and not yet sent (0 for a closed connection),
    /// with, on a layered connection, the plaintext its layer holds until
    /// the handshake completes.
    pub fn buffered(&self, conn: ConnId) -> usize {
        self.conns.get(conn).map_or(0, |c| c.buffered() + c.held())
    }

    /// Calls [`Handler::on_drained`](super::Handler::on_drained) once, when
    /// the output is next empty (on the next turn if it is empty now).
    /// The same as [`Io::notify_below`] with 0. May be called before an
    /// outbound connection is established: it then waits for that too.
    pub fn notify_drained(&mut self, conn: ConnId) {
        self.notify_below(conn, 0);
    }

    /// Calls [`Handler::on_drained`](super::Handler::on_drained) once, when
    /// the connection's queued output ([`Io::buffered`]) is at most
    /// `bytes`: a low-water mark (on the next turn if it is already). One
    /// notice per call; a later call before it comes replaces the mark.
    ///
    /// With [`Io::pause_reading`] it ties reading one connection to the
    /// output of another, as a relay must: pause the sender while the
    /// receiver's output is over a high mark, resume it from the
    /// receiver's `on_drained` at the low one.
    ///
    /// ```
    /// use iomux::runtime::{CloseReason, ConnId, Handler, Io};
    ///
    /// /// Relays each connection to its partner (the state), pausing a
    /// /// sender while its partner holds more than 256 KiB unsent.
    /// struct Relay;
    ///
    /// const HIGH: usize = 256 << 10;
    ///
    /// impl Handler for Relay {
    ///     type Conn = Option<ConnId>; // the partner, once paired
    ///     type Message = ();
    ///     fn on_accept(&mut self, _io: &mut Io<Self::Conn>, _conn: ConnId) -> Self::Conn {
    ///         None
    ///     }
    ///     fn on_data(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, to: &mut Self::Conn, data: &[u8]) -> usize {
    ///         let Some(to) = *to else { return 0 };
    ///         if !io.write(to, data) {
    ///             io.close(conn);
    ///         } else if io.buffered(to) > HIGH {
    ///             io.pause_reading(conn);
    ///             io.notify_below(to, HIGH / 2);
    ///         }
    ///         data.len()
    ///     }
    ///     fn on_drained(&mut self, io: &mut Io<Self::Conn>, _conn: ConnId, from: &mut Self::Conn) {
    ///         if let Some(from) = *from {
    ///             io.resume_reading(from);
    ///         }
    ///     }
    /// }
    /// ```
    pub fn notify_below(&mut self, conn: ConnId, bytes: usize) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        if c.buffered() + c.held() <= bytes && c.flags & (CONNECTING | HANDSHAKING) == 0 {
            // Next turn, after events and timers, so a handler that writes
            // from on_drained cannot starve them.
            c.flags &= !NOTIFY_DRAINED;
            self.drained_later.push(conn);
        } else {
            c.flags |= NOTIFY_DRAINED;
            c.low_water = bytes;
        }
    }

    /// The output bound, [`ConfigBuilder::max_output`](super::ConfigBuilder::max_output).
    pub fn max_output(&self) -> usize {
        self.cfg.max_output
    }

    /// Whether the connection's queued output (with what its layer holds
    /// until its handshake is done) is at or over its bound
    /// ([`Io::max_output`]): the loop has stopped reading it, or will once
    /// the handshake is done. A handler
    /// that produces output for it from elsewhere (another connection, a
    /// timer) stops producing until [`Io::notify_below`] says it drained.
    /// False for a closed connection.
    ///
    /// ```
    /// use iomux::runtime::{ConnId, Handler, Io, TimerId};
    /// use std::time::Duration;
    ///
    /// /// Streams a tick to one subscriber every millisecond, skipping
    /// /// ticks while its output is full instead of queueing them.
    /// struct Ticker {
    ///     subscriber: Option<ConnId>,
    ///     skipped: u64,
    /// }
    ///
    /// impl Handler for Ticker {
    ///     type Conn = ();
    ///     type Message = ();
    ///     fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
    ///         self.subscriber = Some(conn);
    ///         io.set_timer(io.now() + Duration::from_millis(1), 0);
    ///     }
    ///     fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         data.len()
    ///     }
    ///     fn on_timer(&mut self, io: &mut Io<()>, _timer: TimerId, _token: u64) {
    ///         let Some(conn) = self.subscriber else { return };
    ///         if io.is_full(conn) {
    ///             self.skipped += 1;
    ///         } else if !io.write(conn, b"tick\n") {
    ///             return; // closed: no more ticks
    ///         }
    ///         io.set_timer(io.now() + Duration::from_millis(1), 0);
    ///     }
    /// }
    /// ```
    pub fn is_full(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(|c| c.buffered() + c.held() >= self.cfg.max_output)
    }

    /// Shuts down the connection's write side: once the output queued so
    /// far is sent, the peer gets FIN (its end of input), and nothing more
    /// may be written. Reading goes on: the peer may still send, and its
    /// bytes are delivered as before, until its own end of input
    /// ([`Handler::on_read_closed`](super::Handler::on_read_closed)). With
    /// both directions ended the connection closes with
    /// [`CloseReason::PeerClosed`]. A relay calls it when the other side's
    /// input ends, so each direction half-closes on its own.
    ///
    /// ```
    /// use iomux::runtime::{ConnId, Handler, Io};
    ///
    /// /// Reads the whole request, to the client's end of input, then
    /// /// answers with its length and closes (as `nc -N` expects).
    /// struct CountToEnd;
    ///
    /// impl Handler for CountToEnd {
    ///     type Conn = u64;
    ///     type Message = ();
    ///     fn on_accept(&mut self, _io: &mut Io<u64>, _conn: ConnId) -> u64 {
    ///         0
    ///     }
    ///     fn on_data(&mut self, _io: &mut Io<u64>, _conn: ConnId, n: &mut u64, data: &[u8]) -> usize {
    ///         *n += data.len() as u64;
    ///         data.len()
    ///     }
    ///     fn on_read_closed(&mut self, io: &mut Io<u64>, conn: ConnId, n: &mut u64) {
    ///         let _ = io.write(conn, format!("{n}\n").as_bytes());
    ///         io.shutdown_write(conn);
    ///     }
    /// }
    /// ```
    pub fn shutdown_write(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        if c.flags & (WRITE_SHUT | CLOSING | DOOMED) != 0 {
            return;
        }
        // Bytes spliced into it and still in the pipe go before its FIN.
        if let Some(&from) = self.feeders.get(&conn) {
            self.end_splice(from);
        }
        let Some(c) = self.conns.get_mut(conn) else { return };
        c.flags |= WRITE_SHUT;
        self.seal_close(conn);
        self.fin_if_sent(conn);
        self.mark_dirty(conn);
    }

    /// Resets the connection at once: the output still queued is dropped,
    /// the peer gets a reset (SO_LINGER 0: RST, not FIN; a Unix socket's
    /// peer sees only its end of input, a reset only if it still had
    /// unread bytes of ours), and the connection closes with
    /// [`CloseReason::Aborted`]. For a relay whose
    /// other side was reset, or a subscriber too slow to keep: unlike
    /// [`Io::close`], nothing waits for the peer.
    ///
    /// ```
    /// use iomux::runtime::{ConnId, Handler, Io};
    ///
    /// /// Echoes lines; a line over 1 KiB resets the connection.
    /// struct StrictEcho;
    ///
    /// impl Handler for StrictEcho {
    ///     type Conn = ();
    ///     type Message = ();
    ///     fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    ///     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         match data.iter().position(|&b| b == b'\n') {
    ///             Some(end) if end < 1024 => {
    ///                 let _ = io.write(conn, &data[..=end]);
    ///                 end + 1
    ///             }
    ///             None if data.len() < 1024 => 0, // more to come
    ///             _ => {
    ///                 io.abort(conn); // on_close hears CloseReason::Aborted
    ///                 data.len()
    ///             }
    ///         }
    ///     }
    /// }
    /// ```
    pub fn abort(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(conn) else { return };
        if c.has(DOOMED) {
            return;
        }
        // A socket without the option (a Unix one, or one never
        // connected) closes without a reset; it closes either way.
        let _ = net::set_linger_zero(c.fd.raw());
        self.doom(conn, CloseReason::Aborted);
    }

    /// Closes the connection once its queued output is sent. From now on
    /// nothing more is delivered and the loop stops reading it, so a peer
    /// that keeps sending is held back by TCP flow control; once the
    /// output is out, the loop sends FIN and discards input until the
    /// peer's EOF or [`Config`]'s linger time, so the close never turns
    /// into a reset that would destroy output the peer has not read.
    ///
    /// A peer that does not read what is left for
    /// [`ConfigBuilder::close_timeout`](super::ConfigBuilder::close_timeout)
    /// loses it: the connection closes with [`CloseReason::CloseTimeout`].
    pub fn close(&mut self, conn: ConnId) {
        self.close_flagged(conn, 0);
    }

    /// [`Io::close`] for a connection the handler found idle (an idle
    /// timeout): the same orderly close, but its reason is
    /// [`CloseReason::Idle`] and [`LoopStats::idle_closed`](super::LoopStats::idle_closed)
    /// counts it.
    pub fn close_idle(&mut self, conn: ConnId) {
        self.close_flagged(conn, IDLE);
    }

    fn close_flagged(&mut self, conn: ConnId, flag: u32) {
        let until = Instant::now() + self.cfg.close_timeout;
        let Some(c) = self.conns.get(conn) else { return };
        if c.has(CLOSING) {
            return;
        }
        // Splices into and out of it end; the pipes' bytes are queued.
        if let Some(&from) = self.feeders.get(&conn) {
            self.end_splice(from);
        }
        self.end_splice(conn);
        let Some(c) = self.conns.get_mut(conn) else { return };
        c.flags |= CLOSING | flag;
        c.deadline = None;
        self.seal_close(conn);
        let Some(c) = self.conns.get(conn) else { return };
        if c.buffered() == 0 && !c.waits_for_handshake() {
            self.linger(conn);
        } else {
            self.closing.push(until, conn);
        }
        self.mark_dirty(conn);
    }

    /// Asks for [`Handler::on_room`](super::Handler::on_room) on this loop
    /// once `target`'s inbox has room for [`Sender::try_send`]: at once (on
    /// the next turn) if it has some now, else when that loop next takes
    /// its messages. One notice per call; a producer pauses its input
    /// ([`Io::pause_reading`]) after a refused `try_send`, asks, and
    /// resumes in `on_room`.
    pub fn when_room<M>(&mut self, target: &Sender<M>) {
        if let Some(signal) = &self.room {
            target.wait_for_room(signal);
        }
    }

    /// Stops handing this loop's messages to
    /// [`Handler::on_message`](super::Handler::on_message) (from the next
    /// one on) until [`Io::release_messages`]: they wait in the inbox, in
    /// order, and with a bounded inbox its producers' `try_send` refuse once
    /// it is full. A consumer whose own output backs up (a fan-out to slow
    /// connections) holds its producers back this way, end to end.
    pub fn hold_messages(&mut self) {
        self.messages_held = true;
    }

    /// Hands messages over again after [`Io::hold_messages`]: those that
    /// waited come on this turn, oldest first.
    pub fn release_messages(&mut self) {
        if self.messages_held {
            self.messages_held = false;
            self.messages_due = true;
        }
    }

    /// Opens an outbound TCP connection that owns `state`.
    /// [`Handler::on_connect`](super::Handler::on_connect) follows once it
    /// is established, or [`Handler::on_close`](super::Handler::on_close)
    /// with [`CloseReason::ConnectFailed`] (or
    /// [`CloseReason::ConnectTimeout`]): a connect that fails at once (no
    /// socket, the loop stopping) is reported the same way as one that
    /// fails later, never here, so the id is always the connection's
    /// (one that fails at once closes on the next turn, so a handler that
    /// connects again from `on_close` does not loop within one; it must
    /// not do so on [`Error::Stopping`], or the loop never stops).
    /// Writes and [`Io::notify_drained`] may be called at once; the writes
    /// go out when it is established. `source` binds a local address
    /// first (IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect time,
    /// so several source addresses multiply the usable ports).
    ///
    /// ```
    /// use iomux::runtime::{CloseReason, ConnId, Handler, Io};
    /// use std::net::SocketAddr;
    ///
    /// /// Forwards each accepted connection's first line to `upstream`.
    /// struct Forward {
    ///     upstream: SocketAddr,
    /// }
    ///
    /// impl Handler for Forward {
    ///     type Conn = Option<ConnId>; // the upstream, on an accepted connection
    ///     type Message = ();
    ///     fn on_accept(&mut self, io: &mut Io<Self::Conn>, _conn: ConnId) -> Self::Conn {
    ///         Some(io.connect(self.upstream, None, None)) // no Result: failures come to on_close
    ///     }
    ///     fn on_data(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, up: &mut Self::Conn, data: &[u8]) -> usize {
    ///         let Some(end) = data.iter().position(|&b| b == b'\n') else { return 0 };
    ///         if let Some(up) = *up {
    ///             let _ = io.write(up, &data[..=end]); // queued while it connects
    ///             io.shutdown_write(up);
    ///         }
    ///         io.close(conn);
    ///         end + 1
    ///     }
    ///     fn on_close(&mut self, _io: &mut Io<Self::Conn>, _conn: ConnId, _state: Self::Conn, reason: &CloseReason) {
    ///         if let CloseReason::ConnectFailed(e) = reason {
    ///             eprintln!("upstream: {e}");
    ///         }
    ///     }
    /// }
    /// ```
    pub fn connect(&mut self, addr: SocketAddr, source: Option<IpAddr>, state: S) -> ConnId {
        let made = self.tcp_socket_for(&addr, source).map(|fd| (fd, AnyAddr::from(addr)));
        self.start_connect(made, state)
    }

    /// Opens an outbound connection to the Unix stream socket at `path`,
    /// as [`Io::connect`] does over TCP: the same callbacks, the same
    /// reporting of failures (a path with no listening socket:
    /// [`CloseReason::ConnectFailed`] with ENOENT or ECONNREFUSED).
    pub fn connect_unix(&mut self, path: impl AsRef<Path>, state: S) -> ConnId {
        let err = |syscall, e| Error::sys("connect", syscall, None, e);
        // A path too long for a socket address fails here, as connect would.
        let made = net::unix_addr(path.as_ref())
            .map_err(|e| err(Syscall::Connect, e))
            .and_then(|addr| Ok((net::unix_socket().map_err(|e| err(Syscall::Socket, e))?, addr)));
        self.start_connect(made, state)
    }

    /// A TCP socket set up for a connect to `addr`.
    fn tcp_socket_for(&self, addr: &SocketAddr, source: Option<IpAddr>) -> Result<Fd> {
        let err = |syscall, e| Error::sys("connect", syscall, None, e);
        let fd = net::tcp_socket(addr, false).map_err(|e| err(Syscall::Socket, e))?;
        let on = |syscall, e| Error::sys("connect", syscall, Some(fd.raw()), e);
        if let Some(ip) = source {
            if ip.is_ipv4() {
                net::set_bind_address_no_port(fd.raw()).map_err(|e| on(Syscall::Setsockopt, e))?;
            }
            net::bind(fd.raw(), &SocketAddr::new(ip, 0)).map_err(|e| on(Syscall::Bind, e))?;
        }
        if self.cfg.nodelay {
            net::set_nodelay(fd.raw()).map_err(|e| on(Syscall::Setsockopt, e))?;
        }
        net::set_oob_inline(fd.raw()).map_err(|e| on(Syscall::Setsockopt, e))?;
        self.cfg.apply_liveness(fd.raw()).map_err(|e| on(Syscall::Setsockopt, e))?;
        Ok(fd)
    }

    /// Registers an outbound connection: queued for the driver, or, when
    /// its socket could not be made or the loop is stopping, closed with
    /// [`CloseReason::ConnectFailed`] after the callback.
    fn start_connect(&mut self, made: Result<(Fd, AnyAddr)>, state: S) -> ConnId {
        let made = if self.shutting_down { Err(Error::Stopping) } else { made };
        match made {
            Ok((fd, addr)) => {
                let unix = if addr.address_family() == rustix::net::AddressFamily::UNIX { UNIX } else { 0 };
                let id = self.insert(fd, CONNECTING | unix, Some(state));
                self.connecting.push_back((id, addr));
                if let Some(timeout) = self.cfg.connect_timeout {
                    self.connect_deadlines.push(Instant::now() + timeout, id);
                }
                id
            }
            Err(e) => {
                let id = self.insert(Fd::none(), CONNECTING, Some(state));
                self.doom_later(id, CloseReason::ConnectFailed(e));
                id
            }
        }
    }

    /// Calls [`Handler::on_timer`](super::Handler::on_timer) with `token`
    /// at or after `at`, unless cancelled first.
    pub fn set_timer(&mut self, at: Instant, token: u64) -> TimerId {
        self.timers.add(at, token)
    }

    /// Cancels a timer; false if it already fired or was cancelled.
    pub fn cancel_timer(&mut self, timer: TimerId) -> bool {
        self.timers.cancel(timer)
    }

    /// When a pending timer is due; None once it fired or was cancelled.
    pub fn timer_deadline(&self, timer: TimerId) -> Option<Instant> {
        self.timers.deadline(timer)
    }

    /// Calls [`Handler::on_deadline`](super::Handler::on_deadline) for the
    /// connection at or after `at`, unless the deadline is moved or cleared
    /// first; one deadline per connection, so setting it again moves it.
    /// Moving it later costs no heap work (an idle timeout pushed back on
    /// every request is free), earlier O(log n). Cleared when it fires and
    /// when the connection closes. False for a connection that is gone or
    /// closing.
    ///
    /// ```
    /// use iomux::runtime::{ConnId, Handler, Io};
    /// use std::time::Duration;
    ///
    /// /// Echoes, and closes a connection idle for 30 s.
    /// struct IdleEcho;
    ///
    /// impl Handler for IdleEcho {
    ///     type Conn = ();
    ///     type Message = ();
    ///     fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
    ///         let _ = io.set_deadline(conn, io.now() + Duration::from_secs(30));
    ///     }
    ///     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         let _ = io.write(conn, data);
    ///         let _ = io.set_deadline(conn, io.now() + Duration::from_secs(30));
    ///         data.len()
    ///     }
    ///     fn on_deadline(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
    ///         io.close_idle(conn); // the default does this too
    ///     }
    /// }
    /// ```
    pub fn set_deadline(&mut self, conn: ConnId, at: Instant) -> bool {
        let Some(c) = self.conns.get_mut(conn) else { return false };
        if c.has(CLOSING) || c.has(DOOMED) {
            return false;
        }
        c.deadline = Some(at);
        if c.queued.is_none_or(|q| at < q) {
            c.queued = Some(at);
            self.deadlines.push(at, conn);
        }
        true
    }

    /// Clears the connection's deadline; false if it had none.
    pub fn clear_deadline(&mut self, conn: ConnId) -> bool {
        self.conns.get_mut(conn).and_then(|c| c.deadline.take()).is_some()
    }

    /// The connection's deadline, if one is set.
    pub fn deadline(&self, conn: ConnId) -> Option<Instant> {
        self.conns.get(conn)?.deadline
    }

    /// The state of another connection (None for one that is closed, and
    /// for the connection whose callback is running: that one is the
    /// callback's `state` argument).
    pub fn state(&mut self, conn: ConnId) -> Option<&mut S> {
        self.conns.get_mut(conn)?.state.as_mut()
    }

    /// The address of the connection's peer (one `getpeername`; a loop
    /// that needs it on every request keeps it in the connection's state).
    /// An error for a closed connection, one still connecting, a peer that
    /// has already reset it, or a Unix socket (no IP address).
    pub fn peer_addr(&self, conn: ConnId) -> Result<SocketAddr> {
        self.address(conn, "peer address", Syscall::Getpeername, net::peer_addr)
    }

    /// The connection's own address (one `getsockname`); an error for a
    /// Unix socket, as [`Io::peer_addr`] is.
    pub fn local_addr(&self, conn: ConnId) -> Result<SocketAddr> {
        self.address(conn, "local address", Syscall::Getsockname, net::local_addr)
    }

    fn address(
        &self,
        conn: ConnId,
        what: &'static str,
        syscall: Syscall,
        read: fn(RawFd) -> io::Result<SocketAddr>,
    ) -> Result<SocketAddr> {
        let Some(c) = self.conns.get(conn) else { return Err(Error::NoConnection { what }) };
        read(c.fd.raw()).map_err(|e| Error::sys(what, syscall, Some(c.fd.raw()), e))
    }

    /// Open connections in this loop.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Stops the loop gracefully, as [`Control::stop`](super::Control::stop)
    /// would: no more accepts, pending output is flushed (for at most the
    /// drain timeout), then every connection closes.
    pub fn stop(&mut self) {
        self.stop_requested = true;
    }
}

/// What accepting may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Accept {
    /// No listener, or stopping: close the listener if there is one.
    Closed,
    /// Accept at most this many more (0: pause; `max_conns` reached or
    /// backing off after EMFILE).
    Up(usize),
    /// Accept as many as arrive.
    Unlimited,
}

/// Output was queued on `c` (`id`): records the peak and, under the bound
/// and not paused (so the bound changes nothing), puts it in the dirty
/// list. False: the caller sees to the bound and the dirty list.
fn queued_under_bound<S>(
    c: &mut Conn<S>,
    id: ConnId,
    stats: &mut LoopStats,
    max_output: usize,
    dirty: &mut VecDeque<ConnId>,
) -> bool {
    let buffered = c.buffered();
    stats.peak_output = stats.peak_output.max(buffered as u64);
    if buffered < max_output && !c.has(PAUSED) {
        mark(c, dirty, id);
        return true;
    }
    false
}

/// Puts connection `id` (`c`) in the dirty list, once.
fn mark<S>(c: &mut Conn<S>, dirty: &mut VecDeque<ConnId>, id: ConnId) {
    if !c.has(DIRTY) {
        c.flags |= DIRTY;
        dirty.push_back(id);
    }
}

/// Keeps `buf` for the next write, unless the pool is full or it is too big.
fn recycle_into(pool: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if pool.len() < POOL_MAX && buf.capacity() > 0 && buf.capacity() <= POOL_BUF_MAX {
        buf.clear();
        pool.push(buf);
    }
}

/// Why a syscall's error on `fd` closes a connection: a reset, a vanished
/// peer (keepalive's probes or the user timeout ran out), or an error
/// naming the backend, the descriptor and the call.
pub(crate) fn io_reason(backend: &'static str, fd: RawFd, syscall: Syscall, e: io::Error) -> CloseReason {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => CloseReason::Reset,
        // The kernel gave up on the peer: keepalive or the user timeout
        // ran out (ETIMEDOUT), or a router said it cannot be reached.
        Some(libc::ETIMEDOUT | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN) => CloseReason::PeerVanished,
        _ => CloseReason::Error(Error::sys(backend, syscall, Some(fd), e)),
    }
}

// The driver's side: what the kernel did, and the requests it carries out.
impl<S> Io<S> {
    pub(crate) fn insert(&mut self, fd: Fd, flags: u32, state: Option<S>) -> ConnId {
        let conn = Conn {
            fd,
            sealed: VecDeque::new(),
            sealed_pos: 0,
            sealed_len: 0,
            out: Vec::new(),
            out_pos: 0,
            in_flight: 0,
            pending_in: Vec::new(),
            flags,
            low_water: 0,
            driver: 0,
            state,
            deadline: None,
            queued: None,
            splice: None,
            layered: None,
        };
        let id = self.conns.insert(conn);
        self.stats.peak_conns = self.stats.peak_conns.max(self.conns.len() as u64);
        self.mark_dirty(id);
        id
    }

    /// Takes a removed connection apart: its descriptor, the driver's
    /// bits and the handler's state; its output buffer goes to the pool.
    pub(crate) fn dismantle(&mut self, c: Conn<S>) -> (Fd, u16, Option<S>) {
        let Conn { fd, out, sealed, driver, state, .. } = c;
        self.recycle(out);
        sealed.into_iter().filter_map(Chunk::into_copied).for_each(|buf| self.recycle(buf));
        (fd, driver, state)
    }

    pub(crate) fn conn(&self, id: ConnId) -> Option<&Conn<S>> {
        self.conns.get(id)
    }

    pub(crate) fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn<S>> {
        self.conns.get_mut(id)
    }

    /// Asks the driver to look at the connection again after the callback.
    pub(crate) fn mark_dirty(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            mark(c, &mut self.dirty, id);
        }
    }

    /// The next connection the driver must look at, if any.
    pub(crate) fn pop_dirty(&mut self) -> Option<ConnId> {
        while let Some(id) = self.dirty.pop_front() {
            if let Some(c) = self.conns.get_mut(id) {
                c.flags &= !DIRTY;
                if !c.has(DOOMED) {
                    return Some(id);
                }
            }
        }
        None
    }

    /// Why connection `id`, which we are closing, closes: idle
    /// ([`Io::close_idle`], even if the loop stopped while it lingered),
    /// the loop's stop, or ours.
    pub(crate) fn closing_reason(&mut self, id: ConnId) -> CloseReason {
        let Some(c) = self.conns.get_mut(id) else { return CloseReason::closing(self.shutting_down) };
        if !c.has(DOOMED) {
            // A layer that failed closed it, after its alert.
            if let Some(e) = c.layered.as_mut().and_then(|l| l.failure.take()) {
                return CloseReason::Layer(e);
            }
        }
        if c.has(IDLE) {
            return CloseReason::Idle;
        }
        CloseReason::closing(self.shutting_down)
    }

    pub(crate) fn doom(&mut self, id: ConnId, reason: CloseReason) {
        if let Some(c) = self.conns.get_mut(id) {
            if !c.has(DOOMED) {
                c.flags |= DOOMED;
                self.doomed.push_back((id, reason));
            }
        }
    }

    /// Why a failed syscall on connection `id` closes it ([`io_reason`]).
    pub(crate) fn reason(&self, id: ConnId, syscall: Syscall, e: io::Error) -> CloseReason {
        let fd = self.conns.get(id).map_or(-1, |c| c.fd.raw());
        io_reason(self.cfg.backend.name(), fd, syscall, e)
    }

    /// A syscall on the connection failed: it closes (reset or error).
    pub(crate) fn failed(&mut self, id: ConnId, syscall: Syscall, e: io::Error) {
        let reason = self.reason(id, syscall, e);
        self.doom(id, reason);
    }

    /// The kernel reported an error or a hang-up on a connection the
    /// driver is not reading and has nothing to send on (half-closed and
    /// waiting, or paused): the peer is gone, so it closes now, as a
    /// connection being read or written would on its next call. The
    /// socket's pending error names why; a hang-up without one is a reset
    /// (the peer can take nothing more), unless our FIN went out before:
    /// then it is the peer's orderly end, which a paused connection hears
    /// of (after its input) once reading resumes. Returns whether it closed;
    /// if not, the driver stops watching it until it reads again (a
    /// hang-up stays reported).
    pub(crate) fn peer_gone(&mut self, id: ConnId, syscall: Syscall) -> bool {
        let Some(c) = self.conns.get(id) else { return true };
        match net::take_socket_error(c.fd.raw()) {
            Ok(Some(e)) | Err(e) => self.failed(id, syscall, e),
            Ok(None) if c.has(WRITE_CLOSED) => return false,
            Ok(None) => self.doom(id, CloseReason::Reset),
        }
        true
    }

    /// An outbound connect failed: it closes on the next turn, whether the
    /// kernel said so at once or later (a readiness backend's connect to a
    /// Unix path that is not there fails within the call).
    pub(crate) fn connect_failed(&mut self, id: ConnId, e: io::Error) {
        let fd = self.conns.get(id).map(|c| c.fd.raw());
        let reason = CloseReason::ConnectFailed(Error::sys(self.cfg.backend.name(), Syscall::Connect, fd, e));
        self.doom_later(id, reason);
    }

    /// Closes `id` for `reason` on the next turn (see `doomed_later`).
    fn doom_later(&mut self, id: ConnId, reason: CloseReason) {
        if let Some(c) = self.conns.get_mut(id) {
            if !c.has(DOOMED) {
                c.flags |= DOOMED;
                self.doomed_later.push((id, reason));
            }
        }
    }

    /// Drops the connect deadlines at the front whose connections connected
    /// or closed: they would wake the loop for nothing.
    pub(crate) fn prune_connect_deadlines(&mut self) {
        if self.connect_deadlines.next_deadline().is_none() {
            return; // no connect timeout, or none pending: the common case
        }
        let mut deadlines = std::mem::take(&mut self.connect_deadlines);
        deadlines.prune_front(|id| self.conns.get(id).is_none_or(|c| !c.has(CONNECTING) || c.has(DOOMED)));
        self.connect_deadlines = deadlines;
    }

    /// Whether the connection is a Unix stream socket.
    pub(crate) fn is_unix(&self, id: ConnId) -> bool {
        self.conns.get(id).is_some_and(|c| c.has(UNIX))
    }

    /// Output sent and closing: FIN now, then discard input until the
    /// peer's EOF (or the linger time), so close never meets unread data
    /// (which would turn it into a RST that destroys output in flight).
    fn linger(&mut self, id: ConnId) {
        // From now, not the turn's start: a long turn must not shorten it.
        let until = Instant::now() + self.cfg.linger;
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(LINGER) || c.waits_for_handshake() {
            return; // the handshake's end lingers (`established`)
        }
        if c.has(READ_CLOSED) || c.has(CONNECTING) {
            let reason = self.closing_reason(id);
            return self.doom(id, reason);
        }
        if !c.has(WRITE_CLOSED) {
            if let Err(e) = net::shutdown_write(c.fd.raw()) {
                return self.failed(id, Syscall::Shutdown, e);
            }
        }
        c.flags |= LINGER | WRITE_CLOSED;
        self.lingering.push(until, id);
        self.mark_dirty(id);
    }

    /// Pauses reading over the output bound, resumes at half of it.
    fn update_backpressure(&mut self, id: ConnId) {
        let max = self.cfg.max_output;
        let Some(c) = self.conns.get_mut(id) else { return };
        let buffered = c.buffered();
        let paused = c.has(PAUSED);
        if buffered >= max && !paused {
            c.flags |= PAUSED;
        } else if paused && buffered <= max / 2 {
            c.flags &= !PAUSED;
            return self.resumed(id);
        } else {
            return;
        }
        self.mark_dirty(id);
    }

    /// Reading may have resumed: held-back input is offered again, or
    /// an end of input held back is told.
    fn resumed(&mut self, id: ConnId) {
        let Some(c) = self.conns.get(id) else { return };
        if c.has(UNOFFERED) && self.takes_input(id) {
            self.reoffer.push_back(id);
        }
        self.tell_eof_when_due(id);
        self.mark_dirty(id);
    }

    /// The peer's end of input goes to the handler after all the input
    /// before it, and, as input does, not while reading is paused: every
    /// backend then tells it at the same point (a readiness backend that
    /// is not reading does not see the EOF either).
    fn tell_eof_when_due(&mut self, id: ConnId) {
        let due = self.takes_input(id);
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(EOF_UNTOLD) && !c.has(UNOFFERED) && due {
            c.flags &= !EOF_UNTOLD;
            self.read_closed.push_back(id);
        }
    }

    /// Once our output is out after [`Io::shutdown_write`], sends FIN;
    /// with the peer's input ended too, the connection is done.
    fn fin_if_sent(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        let not_yet = WRITE_SHUT | WRITE_CLOSED | CONNECTING | CLOSING | DOOMED | HANDSHAKING;
        if c.flags & not_yet != WRITE_SHUT || c.buffered() > 0 {
            return;
        }
        if let Err(e) = net::shutdown_write(c.fd.raw()) {
            return self.failed(id, Syscall::Shutdown, e);
        }
        c.flags |= WRITE_CLOSED;
        self.close_if_both_ended(id);
    }

    /// Both directions ended in order (the peer's EOF told, our FIN
    /// sent): the connection closes.
    pub(crate) fn close_if_both_ended(&mut self, id: ConnId) {
        let Some(c) = self.conns.get(id) else { return };
        if c.has(READ_CLOSED) && c.has(WRITE_CLOSED) && !c.has(EOF_UNTOLD) && !c.has(CLOSING) {
            self.doom(id, CloseReason::PeerClosed);
        }
    }

    /// Whether the handler is to hear of the end of input now: it has not
    /// closed the connection meanwhile, and reading is not paused again
    /// (then it waits for the resume once more).
    pub(crate) fn tells_eof(&mut self, id: ConnId) -> bool {
        let due = self.takes_input(id);
        let Some(c) = self.conns.get_mut(id) else { return false };
        if !c.has(READ_CLOSED) || c.flags & (CLOSING | DOOMED) != 0 {
            return false;
        }
        if !due || c.has(UNOFFERED) {
            c.flags |= EOF_UNTOLD;
            return false;
        }
        true
    }

    /// Whether the input left was held back unoffered (reading paused).
    pub(crate) fn held_back(&self, id: ConnId) -> bool {
        self.conns.get(id).is_some_and(|c| c.has(UNOFFERED))
    }

    /// Whether the handler is offered input now: delivering, and reading
    /// paused neither by the output's bound nor by the handler.
    pub(crate) fn takes_input(&self, id: ConnId) -> bool {
        self.conns.get(id).is_some_and(|c| c.flags & (CLOSING | DOOMED | PAUSED | HELD) == 0)
    }

    /// Whether the handler is offered input now (as `takes_input`);
    /// `clear` input not once the connection is layered.
    pub(crate) fn offers(&self, id: ConnId, clear: bool) -> bool {
        let layered = if clear { LAYERED } else { 0 };
        self.conns.get(id).is_some_and(|c| c.flags & (CLOSING | DOOMED | PAUSED | HELD | layered) == 0)
    }

    /// Records whether input was left unoffered (reading paused with bytes
    /// waiting); once none is, an end of input behind it is told.
    pub(crate) fn set_unoffered(&mut self, id: ConnId, unoffered: bool) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if unoffered == c.has(UNOFFERED) {
            return;
        }
        if unoffered {
            c.flags |= UNOFFERED;
        } else {
            c.flags &= !UNOFFERED;
            self.tell_eof_when_due(id);
        }
        self.mark_dirty(id); // reading stops, or starts again
    }

    /// The driver sent `n` bytes of the connection's output (from
    /// `unsent_flat`/`unsent_slices` directly, or of the send in flight).
    pub(crate) fn sent(&mut self, id: ConnId, n: usize) {
        let Some(c) = self.conns.get_mut(id) else { return };
        self.stats.bytes_out += n as u64;
        if c.in_flight > 0 {
            c.in_flight -= n.min(c.in_flight);
        } else {
            let mut n = n;
            // The sealed chunks go first.
            while n > 0 {
                let Some(front) = c.sealed.front() else { break };
                let left = front.len() - c.sealed_pos;
                let took = n.min(left);
                (n, c.sealed_len) = (n - took, c.sealed_len - took);
                if took < left {
                    c.sealed_pos += took;
                    break;
                }
                c.sealed_pos = 0;
                if let Some(buf) = c.sealed.pop_front().and_then(Chunk::into_copied) {
                    recycle_into(&mut self.pool, buf);
                }
            }
            c.out_pos += n.min(c.out.len() - c.out_pos);
            if c.out_pos == c.out.len() {
                let buf = std::mem::take(&mut c.out);
                c.out_pos = 0;
                recycle_into(&mut self.pool, buf);
            } else if c.out_pos >= POOL_BUF_MAX && c.out_pos * 2 >= c.out.len() {
                // Mostly sent: drop the sent front rather than grow.
                c.out.drain(..c.out_pos);
                c.out_pos = 0;
            }
        }
        let Some(c) = self.conns.get_mut(id) else { return };
        let buffered = c.buffered();
        // The usual case, all sent and nothing waiting on it: no drained
        // notice, FIN, linger, paused reading (max_output is at least 1)
        // or splice feeding it to see to; what follows would find none.
        let waiting_on_output = NOTIFY_DRAINED | PAUSED | WRITE_SHUT | CLOSING;
        if buffered == 0 && c.flags & waiting_on_output == 0 && self.feeders.is_empty() {
            return;
        }
        if c.has(NOTIFY_DRAINED) && buffered <= c.low_water && !c.has(HANDSHAKING) {
            // Next turn, after events and timers: a handler that writes
            // again from on_drained, into a socket with room, would
            // otherwise never let the turn end.
            c.flags &= !NOTIFY_DRAINED;
            self.drained_later.push(id);
        }
        if buffered == 0 {
            self.on_empty(id);
        }
        self.update_backpressure(id);
    }

    /// Hands the unsent output to the driver for a send in flight
    /// (completion drivers), with the offset it starts at; `sent` then
    /// counts it down.
    pub(crate) fn take_output(&mut self, id: ConnId) -> Option<(Payload, usize)> {
        let c = self.conns.get_mut(id)?;
        if !c.output_to_take() {
            return None;
        }
        c.in_flight = c.buffered();
        if c.sealed.is_empty() {
            let mut buf = std::mem::take(&mut c.out);
            buf.drain(..c.out_pos);
            c.out_pos = 0;
            return Some((Payload::One(buf), 0));
        }
        debug_assert_eq!(c.out_pos, 0, "while anything is sealed, sends take it first");
        let mut chunks: Vec<Chunk> = c.sealed.drain(..).collect();
        if !c.out.is_empty() {
            chunks.push(Chunk::Copied(std::mem::take(&mut c.out)));
        }
        let offset = std::mem::take(&mut c.sealed_pos);
        c.sealed_len = 0;
        Some((Payload::Many(chunks), offset))
    }

    /// A send in flight ended without sending everything it held: forget
    /// it, and close the connection for `reason`.
    pub(crate) fn send_aborted(&mut self, id: ConnId, reason: CloseReason) {
        if let Some(c) = self.conns.get_mut(id) {
            c.in_flight = 0;
        }
        self.doom(id, reason);
    }

    /// A buffer the driver no longer needs, for the next write.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        recycle_into(&mut self.pool, buf);
    }

    /// A send's payload the kernel is done with: its copy buffers go to
    /// the pool, its shared buffers are released.
    pub(crate) fn recycle_payload(&mut self, payload: Payload) {
        match payload {
            Payload::One(buf) => self.recycle(buf),
            Payload::Many(chunks) => {
                chunks.into_iter().filter_map(Chunk::into_copied).for_each(|buf| self.recycle(buf))
            }
        }
    }

    /// The output just became empty.
    fn on_empty(&mut self, id: ConnId) {
        self.wake_feeder(id);
        let Some(c) = self.conns.get(id) else { return };
        if c.has(CLOSING) {
            self.linger(id);
        } else {
            self.fin_if_sent(id);
        }
    }

    /// The peer sent EOF: after the input before it, the handler hears of
    /// it ([`Handler::on_read_closed`](super::Handler::on_read_closed)),
    /// unless it closed the connection; a closing one only waits for its
    /// output now.
    pub(crate) fn peer_eof(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        // A FIN without the layer's closing record: the layer judges it,
        // unless we are closing and no longer feed it (then it is the end
        // a close waits for), or a handshake a close waits for breaks off.
        let judged_by_layer =
            c.flags & (LAYERED | LINGER | READ_CLOSED) == LAYERED && (!c.has(CLOSING) || c.has(HANDSHAKING));
        if judged_by_layer {
            let judged = c.layered.as_mut().map_or(Ok(()), |l| l.layer.peer_fin());
            if let Err(e) = judged {
                return self.layer_failed(id, e, false);
            }
        }
        self.ended(id);
    }

    /// The peer's input ended in order (its FIN, or its layer's closing
    /// record).
    pub(crate) fn ended(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(LINGER) {
            let reason = self.closing_reason(id);
            return self.doom(id, reason);
        }
        if c.has(READ_CLOSED) {
            return;
        }
        c.flags |= READ_CLOSED;
        if !c.has(CLOSING) {
            c.flags |= EOF_UNTOLD;
            self.tell_eof_when_due(id);
        }
        self.mark_dirty(id);
    }

    /// The outbound connect finished; false if the connection is gone.
    pub(crate) fn connected(&mut self, id: ConnId) -> bool {
        let Some(c) = self.conns.get_mut(id) else { return false };
        c.flags &= !CONNECTING;
        if c.has(LAYERED) {
            self.start_layer(id);
        }
        self.drained_if_due(id);
        self.stats.connected += 1;
        self.wake_feeder(id);
        self.fin_if_sent(id);
        self.mark_dirty(id);
        true
    }

    /// With NOTIFY_DRAINED and the output at its mark, on_drained comes
    /// on the next turn; not while connecting or handshaking.
    fn drained_if_due(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.flags & (NOTIFY_DRAINED | CONNECTING | HANDSHAKING) == NOTIFY_DRAINED && c.buffered() <= c.low_water {
            c.flags &= !NOTIFY_DRAINED;
            self.drained_later.push(id);
        }
    }

    /// A connect deadline passed: a connection still connecting closes.
    pub(crate) fn connect_deadline(&mut self, id: ConnId) {
        if self.conns.get(id).is_some_and(|c| c.has(CONNECTING)) {
            self.doom(id, CloseReason::ConnectTimeout);
        }
    }

    /// Takes the input left over from the last delivery, and the state.
    pub(crate) fn take_for_callback(&mut self, id: ConnId) -> Option<(Vec<u8>, S)> {
        let c = self.conns.get_mut(id)?;
        let state = c.state.take()?;
        Some((std::mem::take(&mut c.pending_in), state))
    }

    /// The state, taken out for a callback, when `data` may go to the
    /// handler as it is with nothing before it: plaintext, delivering, not
    /// paused or held, and no input left from before (so none unoffered).
    /// None sends the caller the general way.
    pub(crate) fn take_state_if_fresh(&mut self, id: ConnId, data: &[u8]) -> Option<S> {
        let c = self.conns.get_mut(id)?;
        let busy = CLOSING | DOOMED | LAYERED | PAUSED | HELD | UNOFFERED;
        if data.is_empty() || c.flags & busy != 0 || !c.pending_in.is_empty() {
            return None;
        }
        c.state.take()
    }

    /// Puts back the state alone after [`Io::take_state_if_fresh`] when the
    /// handler consumed all the input: [`Io::put_back`] with nothing left.
    pub(crate) fn put_back_state(&mut self, id: ConnId, state: S) {
        if let Some(c) = self.conns.get_mut(id) {
            c.flags &= !SWITCHED; // nothing left over to check
            c.state = Some(state);
        }
    }

    /// The (empty) input buffer, when input is left after all after
    /// [`Io::take_state_if_fresh`].
    pub(crate) fn take_pending(&mut self, id: ConnId) -> Vec<u8> {
        self.conns.get_mut(id).map(|c| std::mem::take(&mut c.pending_in)).unwrap_or_default()
    }

    /// Whether `dirty` is the only list `settle` may find work in.
    pub(crate) fn only_dirty_may_wait(&self) -> bool {
        self.connecting.is_empty()
            && self.doomed.is_empty()
            && self.pumps.is_empty()
            && self.reoffer.is_empty()
            && self.read_closed.is_empty()
            && self.drained.is_empty()
    }

    /// Puts back what `take_for_callback` took; the connection is still in
    /// the slab (connections leave it only between callbacks).
    pub(crate) fn put_back(&mut self, id: ConnId, pending: Vec<u8>, state: S) {
        if let Some(c) = self.conns.get_mut(id) {
            if c.has(SWITCHED) {
                c.flags &= !SWITCHED;
                if !pending.is_empty() {
                    // Cleartext the handler left when it set a layer
                    // (STARTTLS): it must never reach it as the layer's.
                    c.state = Some(state);
                    return self.cleartext_after_switch(id);
                }
            }
            c.state = Some(state);
            // An idle connection owns no buffer: a large one, emptied, goes.
            c.pending_in = if pending.is_empty() && pending.capacity() > POOL_BUF_MAX { Vec::new() } else { pending };
        }
    }

    /// The next connection whose deadline ([`Io::set_deadline`]) has come
    /// at `now`, among entries pushed before `pushed_before`. Entries of
    /// closed connections and superseded ones are skipped; one whose
    /// deadline moved later goes back in the heap.
    pub(crate) fn due_deadline(&mut self, now: Instant, pushed_before: u64) -> Option<ConnId> {
        while let Some((at, id)) = self.deadlines.pop_due(now, pushed_before) {
            let Some(c) = self.conns.get_mut(id) else { continue };
            if c.queued != Some(at) {
                continue;
            }
            c.queued = None;
            match c.deadline {
                Some(later) if later > now => {
                    c.queued = Some(later);
                    self.deadlines.push(later, id);
                }
                Some(_) => {
                    c.deadline = None;
                    if !c.has(CLOSING) && !c.has(DOOMED) {
                        return Some(id);
                    }
                }
                None => {}
            }
        }
        None
    }

    /// A close deadline passed: if the output is still not out, the peer
    /// is not reading it, and the connection closes without it.
    pub(crate) fn close_deadline(&mut self, id: ConnId) {
        let stuck = |c: &Conn<S>| c.buffered() > 0 || c.has(HANDSHAKING);
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(CLOSING) && !c.has(LINGER) && stuck(c) {
            // A layer's failure is why it was closing: its alert went unread.
            let failure = c.layered.as_mut().and_then(|l| l.failure.take());
            self.doom(id, failure.map_or(CloseReason::CloseTimeout, CloseReason::Layer));
        }
    }

    /// Whether received bytes go to the handler (not after `close`).
    pub(crate) fn delivers(&self, id: ConnId) -> bool {
        self.conns.get(id).is_some_and(|c| !c.has(CLOSING) && !c.has(DOOMED))
    }

    /// Whether received bytes go to the handler as they are: delivering,
    /// and not layered (a layered connection's go through its layer).
    pub(crate) fn delivers_plain(&self, id: ConnId) -> bool {
        self.conns.get(id).is_some_and(|c| c.flags & (CLOSING | DOOMED | LAYERED) == 0)
    }

    /// How many more connections accepting may take now.
    pub(crate) fn accept_budget(&self) -> Accept {
        if !self.has_listener || self.shutting_down {
            return Accept::Closed;
        }
        if self.accept_resume_at.is_some() {
            return Accept::Up(0);
        }
        match self.cfg.max_conns {
            Some(max) => Accept::Up(max.saturating_sub(self.conns.len())),
            None => Accept::Unlimited,
        }
    }

    /// An accept failed with `e`: ignore what concerns one connection only,
    /// back off from what concerns them all (out of descriptors or memory).
    pub(crate) fn accept_failed(&mut self, e: &io::Error) {
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR | libc::ECONNABORTED | libc::EPROTO | libc::EPERM | libc::ECANCELED) => {}
            _ => {
                self.stats.accept_backoffs += 1;
                self.accept_resume_at = Some(self.now + self.accept_backoff);
                self.accept_backoff = (self.accept_backoff * 2).min(MAX_ACCEPT_BACKOFF);
            }
        }
    }

    /// An accept succeeded: the next failure backs off from the start.
    pub(crate) fn accept_succeeded(&mut self) {
        self.accept_backoff = self.cfg.accept_backoff;
    }

    /// A connection closed: a descriptor is free, so accept again now.
    pub(crate) fn released(&mut self) {
        self.accept_resume_at = None;
    }

    /// Begins a graceful stop: no more accepts; idle connections (no
    /// output queued, no input unread) close at once, the others once
    /// their output is sent and the peer's EOF came (or at the drain
    /// deadline).
    pub(crate) fn begin_shutdown(&mut self) {
        // Handled: later turns may wait again (for the output to drain).
        self.stop_requested = false;
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        self.accept_resume_at = None;
        // From the stop, not the turn's start: a long turn must not shorten it.
        self.drain_deadline = Some(Instant::now() + self.cfg.drain_timeout);
        // First every splice ends, its pipe queued on its target while
        // that still takes output: it drains with the rest.
        for id in self.conns.ids() {
            self.end_splice(id);
        }
        for id in self.conns.ids() {
            let Some(c) = self.conns.get_mut(id) else { continue };
            c.flags |= CLOSING;
            c.deadline = None;
            if c.has(HANDSHAKING) && c.held() == 0 {
                // Nothing was written on it yet: nothing to wait for.
                let reason = self.closing_reason(id);
                self.doom(id, reason);
                continue;
            }
            // A handshaking one with writes held waits for its handshake
            // (within the drain deadline), then sends them and closes.
            self.seal_close(id);
            if self.conns.get(id).is_some_and(Conn::waits_for_handshake) {
                self.mark_dirty(id);
                continue;
            }
            let Some(c) = self.conns.get(id) else { continue };
            if c.buffered() == 0 {
                if net::unread(c.fd.raw()).is_ok_and(|n| n == 0) {
                    // Idle: nothing to send and nothing unread, so the
                    // close is a plain FIN that destroys nothing.
                    let reason = self.closing_reason(id);
                    self.doom(id, reason);
                    continue;
                }
                // FIN, then discard until the peer's EOF: closing with its
                // input unread would reset it and destroy what it has not
                // read yet. The drain deadline bounds this too.
                self.linger(id);
            }
            self.mark_dirty(id);
        }
    }
}

/// The longest accept back-off: longer than an SQPOLL thread's idle time,
/// so a loop that is out of descriptors lets that thread sleep.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    /// An `Io` holding one connection on one end of a socket pair (the
    /// other end is returned, to keep the descriptor's peer open).
    fn one_conn() -> (Io<()>, ConnId, std::os::unix::net::UnixStream) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let mut io = Io::new(&Config::default(), false, Instant::now());
        let id = io.insert(Fd::adopt_new(ours.into_raw_fd()), 0, Some(()));
        (io, id, theirs)
    }

    #[test]
    fn outbound_connections_get_keepalive_and_the_user_timeout() {
        let keepalive = super::super::Keepalive::after(Duration::from_secs(10));
        let cfg = Config::builder()
            .keepalive(Some(keepalive))
            .user_timeout(Some(Duration::from_millis(2500)))
            .build()
            .expect("config");
        let mut io: Io<()> = Io::new(&cfg, false, Instant::now());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let id = io.connect(listener.local_addr().expect("addr"), None, ());
        let fd = io.conn(id).expect("the connection").fd.raw();
        let want = (Some((Duration::from_secs(10), Duration::from_secs(4), 3)), 2500);
        assert_eq!(net::liveness(fd).expect("getsockopt"), want);
    }

    #[test]
    fn a_timed_out_peer_is_a_vanished_one() {
        let timed_out = io_reason("epoll", 7, Syscall::Recvfrom, io::Error::from_raw_os_error(libc::ETIMEDOUT));
        assert!(matches!(timed_out, CloseReason::PeerVanished), "{timed_out:?}");
        assert!(!timed_out.is_clean());
        let other = io_reason("epoll", 7, Syscall::Recvfrom, io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(other, CloseReason::Error(_)), "{other:?}");
        assert_eq!(other.to_string(), "epoll: recvfrom on fd 7 failed: Input/output error (os error 5)");
    }

    fn unsent(io: &Io<()>, id: ConnId) -> Vec<u8> {
        io.conn(id).expect("open").unsent_slices().iter().flat_map(|s| s.iter().copied()).collect()
    }

    /// A shared buffer written after a partial send goes after the part
    /// of the copied output not sent yet, and each send takes from the
    /// front, across chunks.
    #[test]
    fn sealing_keeps_what_a_partial_send_left() {
        let (mut io, id, _peer) = one_conn();
        let head: Vec<u8> = (0..100).collect();
        let shared = Bytes::from(vec![7u8; 2048]);
        assert!(io.write(id, &head));
        io.sent(id, 40);
        assert!(io.write_bytes(id, shared.clone()) && io.write(id, b"tail"));
        let want = [&head[40..], &shared[..], b"tail"].concat();
        assert_eq!((unsent(&io, id), io.buffered(id)), (want.clone(), want.len()));
        assert!(io.conn(id).expect("open").unsent_flat().is_none(), "three pieces: gathered");
        io.sent(id, 70); // the head's 60 and 10 of the shared buffer
        assert_eq!(unsent(&io, id), want[70..]);
        io.sent(id, 2038);
        assert_eq!(io.conn(id).expect("open").unsent_flat(), Some(&b"tail"[..]), "one piece left: flat");
        io.sent(id, 4);
        assert_eq!(io.buffered(id), 0);
    }

    /// The completion drivers take the whole output at once, from where
    /// the sends so far stopped.
    #[test]
    fn output_taken_whole_starts_where_sends_stopped() {
        let (mut io, id, _peer) = one_conn();
        assert!(io.write(id, b"0123456789"));
        io.sent(id, 4);
        assert!(io.write_bytes(id, Bytes::from(vec![1u8; 1500])) && io.write(id, b"!"));
        let (payload, offset) = io.take_output(id).expect("output");
        assert!(matches!(payload, Payload::Many(_)));
        assert_eq!(payload.len() - offset, 6 + 1500 + 1);
        assert_eq!(io.buffered(id), 6 + 1500 + 1, "in flight counts as buffered");
        assert!(io.take_output(id).is_none(), "one send in flight");
    }
}
