//! The completion driver: io_uring natively.
//!
//! - One multishot accept on the listener: a completion per connection.
//! - One multishot receive per connection into a provided-buffer ring, so
//!   no connection owns a receive buffer and no read is a syscall.
//! - Sends are queued per connection, one in flight at a time, so they
//!   stay in order; a short send resubmits the rest.
//! - Each loop turn makes at most one `io_uring_enter`, which submits
//!   everything queued and waits for the next completions together (with
//!   SQPOLL, often none at all).
//! - Backpressure: a connection whose output is over its bound has its
//!   receive cancelled; TCP flow control then holds the peer back. The
//!   receive is armed again once the output drains to half the bound.

use super::slab::Slab;
use super::stats::LoopStats;
use super::timers::{timeout_until, Deadlines, Timers};
use super::{feed, CloseReason, Config, ConnId, Control, Handler, Io};
use crate::error::{Error, Result};
use crate::poller::{Backend, Waker};
use crate::sys::uring::{Completion, Ring};
use crate::sys::{self, net, net::Fd};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const NAME: &str = "uring";
const RING_ENTRIES: u32 = 4096;
const BUFFER_GROUP: u16 = 0;
/// Output buffers kept for reuse, so a send costs no allocation.
const POOL_MAX: usize = 256;
const POOL_BUF_MAX: usize = 64 << 10;

// user_data: kind in the top 4 bits, then 28 bits of generation, then the
// slab index.
const KIND_SHIFT: u32 = 60;
const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const CONNECT: u64 = 4;
const WAKER: u64 = 5;
const IGNORE: u64 = 6; // cancels: their own completions say nothing

fn ud(kind: u64, id: ConnId) -> u64 {
    (kind << KIND_SHIFT) | (id.as_u64() & 0x0fff_ffff_ffff_ffff)
}

fn decode(user_data: u64) -> (u64, u64) {
    (user_data >> KIND_SHIFT, user_data & 0x0fff_ffff_ffff_ffff)
}

// Connection state bits.
const RECV_ARMED: u16 = 1;
const READ_CLOSED: u16 = 2;
const CLOSING: u16 = 4;
const CONNECTING: u16 = 8;
const PAUSED: u16 = 16;
const NOTIFY_DRAINED: u16 = 32;
const DOOMED: u16 = 64;
const QUEUED: u16 = 128; // in the send queue
const SENDING: u16 = 256; // a send is in flight
const CANCELLING: u16 = 512; // receive cancel in flight
const LINGER: u16 = 1024; // FIN sent; discarding input until the peer's EOF

struct Conn {
    fd: Fd,
    /// Written by the handler, not yet handed to the kernel.
    staged: Vec<u8>,
    /// Bytes of the send in flight not yet confirmed.
    sending: usize,
    pending_in: Vec<u8>,
    flags: u16,
}

impl Conn {
    fn buffered(&self) -> usize {
        self.staged.len() + self.sending
    }
    fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
    /// Whether a receive should be armed: to deliver, or (lingering) to discard.
    fn reading(&self) -> bool {
        if self.flags & (READ_CLOSED | CONNECTING | DOOMED) != 0 {
            return false;
        }
        self.has(LINGER) || self.flags & (CLOSING | PAUSED) == 0
    }
}

/// A connection's 28-bit generation in user_data must match its id's.
fn id_of(slab: &Slab<Conn>, raw: u64) -> Option<ConnId> {
    let index = raw as u32;
    slab.id_at(index).filter(|id| id.as_u64() & 0x0fff_ffff_ffff_ffff == raw)
}

/// The handler's side of the loop. It queues work; the driver hands it to
/// the ring after each callback.
struct Core {
    cfg: Config,
    conns: Slab<Conn>,
    timers: Timers,
    now: Instant,
    stats: LoopStats,
    send_queue: Vec<ConnId>,
    connects: Vec<(ConnId, SocketAddr)>,
    rearm: Vec<ConnId>,
    cancels: Vec<u64>,
    doomed: VecDeque<(ConnId, CloseReason)>,
    drained: Vec<ConnId>,
    drained_later: Vec<ConnId>,
    lingering: Deadlines,
    pool: Vec<Vec<u8>>,
    stop_requested: bool,
    shutting_down: bool,
}

impl Core {
    fn closing_reason(&self) -> CloseReason {
        CloseReason::closing(self.shutting_down)
    }

    /// Output sent and closing: FIN now, then discard input until the
    /// peer's EOF (or the linger time), so close never meets unread data
    /// (which would turn it into a RST that destroys output in flight).
    fn linger(&mut self, id: ConnId) {
        let until = self.now + self.cfg.linger;
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(LINGER) {
            return;
        }
        if c.has(READ_CLOSED) || c.has(CONNECTING) {
            let reason = self.closing_reason();
            return self.doom(id, reason);
        }
        if let Err(e) = net::shutdown_write(c.fd.raw()) {
            return self.doom(id, io_reason("shutdown", e.raw_os_error().unwrap_or(libc::EIO)));
        }
        c.flags |= LINGER;
        if !c.has(RECV_ARMED) {
            self.rearm.push(id);
        }
        self.lingering.push(until, id);
    }

    fn doom(&mut self, id: ConnId, reason: CloseReason) {
        if let Some(c) = self.conns.get_mut(id) {
            if !c.has(DOOMED) {
                c.flags |= DOOMED;
                self.doomed.push_back((id, reason));
            }
        }
    }

    fn queue_send(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(id) {
            if !c.has(QUEUED) {
                c.flags |= QUEUED;
                self.send_queue.push(id);
            }
        }
    }

    /// Pauses or resumes receiving as the output crosses its bounds.
    fn update_backpressure(&mut self, id: ConnId) {
        let max = self.cfg.max_output;
        let Some(c) = self.conns.get_mut(id) else { return };
        let buffered = c.buffered();
        if buffered >= max && !c.has(PAUSED) {
            c.flags |= PAUSED;
            if c.has(RECV_ARMED) && !c.has(CANCELLING) {
                c.flags |= CANCELLING;
                self.cancels.push(ud(RECV, id));
            }
        } else if c.has(PAUSED) && buffered <= max / 2 {
            c.flags &= !PAUSED;
            if c.reading() && !c.has(RECV_ARMED) {
                self.rearm.push(id);
            }
        }
    }

    /// The output just became empty.
    fn on_empty(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(NOTIFY_DRAINED) {
            c.flags &= !NOTIFY_DRAINED;
            self.drained.push(id);
        }
        if c.has(CLOSING) {
            self.linger(id);
        } else if c.has(READ_CLOSED) {
            self.doom(id, CloseReason::PeerClosed);
        }
    }

    fn take_buffer(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    fn return_buffer(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX && buf.capacity() <= POOL_BUF_MAX {
            buf.clear();
            self.pool.push(buf);
        }
    }
}

fn io_reason(syscall: &'static str, errno: i32) -> CloseReason {
    match errno {
        libc::ECONNRESET | libc::EPIPE => CloseReason::Reset,
        _ => CloseReason::Error { syscall, error: io::Error::from_raw_os_error(errno) },
    }
}

impl Io for Core {
    fn now(&self) -> Instant {
        self.now
    }

    fn write(&mut self, id: ConnId, data: &[u8]) -> bool {
        let Some(c) = self.conns.get(id) else { return false };
        if c.has(DOOMED) {
            return false;
        }
        if data.is_empty() {
            return true;
        }
        let fresh = (c.staged.capacity() == 0).then(|| self.take_buffer());
        let Some(c) = self.conns.get_mut(id) else { return false };
        if let Some(buf) = fresh {
            c.staged = buf;
        }
        c.staged.extend_from_slice(data);
        let buffered = c.buffered() as u64;
        self.stats.peak_output = self.stats.peak_output.max(buffered);
        self.queue_send(id);
        self.update_backpressure(id);
        true
    }

    fn buffered(&self, id: ConnId) -> usize {
        self.conns.get(id).map_or(0, Conn::buffered)
    }

    fn notify_drained(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.buffered() == 0 && !c.has(CONNECTING) {
            // Already empty: say so next turn, after events and timers,
            // so a handler that writes from on_drained cannot starve them.
            self.drained_later.push(id);
        } else {
            c.flags |= NOTIFY_DRAINED;
        }
    }

    fn close(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        c.flags |= CLOSING;
        if c.buffered() == 0 {
            self.linger(id);
        }
    }

    fn connect(&mut self, addr: SocketAddr, source: Option<IpAddr>) -> io::Result<ConnId> {
        let fd = net::tcp_socket(&addr, false)?;
        if let Some(ip) = source {
            if ip.is_ipv4() {
                net::set_bind_address_no_port(fd.raw())?;
            }
            net::bind(fd.raw(), &SocketAddr::new(ip, 0))?;
        }
        if self.cfg.nodelay {
            net::set_nodelay(fd.raw())?;
        }
        let id =
            self.conns.insert(Conn { fd, staged: Vec::new(), sending: 0, pending_in: Vec::new(), flags: CONNECTING });
        self.connects.push((id, addr));
        self.stats.peak_conns = self.stats.peak_conns.max(self.conns.len() as u64);
        Ok(id)
    }

    fn set_timer(&mut self, at: Instant, token: u64) {
        self.timers.add(at, token);
    }

    fn stop(&mut self) {
        self.stop_requested = true;
    }
}

struct Driver<'a, H: Handler> {
    ring: Ring,
    core: Core,
    handler: &'a mut H,
    listener: Option<Fd>,
    accept_armed: bool,
    accept_resume_at: Option<Instant>,
    drain_deadline: Option<Instant>,
    /// Declared after `ring`, so it outlives the ring's poll on it.
    _waker: Waker,
    waker_fd: i32,
    control: Control,
}

pub fn run<H: Handler>(cfg: &Config, listener: Option<Fd>, handler: &mut H, control: &Control) -> Result<LoopStats> {
    let start = Instant::now();
    let counts_before = sys::counts();
    let sqpoll = (cfg.backend == Backend::UringSqpoll).then_some(crate::poller::UringPoller::SQPOLL_IDLE);
    let mut ring = Ring::for_loop(RING_ENTRIES, sqpoll).map_err(crate::poller::uring_unavailable)?;
    let buffers = cfg.ring_buffers.max(1).next_power_of_two();
    ring.setup_buffers(BUFFER_GROUP, buffers, cfg.ring_buffer_size.max(1))
        .map_err(|e| Error::sys(NAME, "io_uring_register(PBUF_RING)", None, e))?;
    let (waker, waker_fd) = Waker::new()?;
    control.register(waker.clone());
    let mut d = Driver {
        ring,
        core: Core {
            cfg: cfg.clone(),
            conns: Slab::default(),
            timers: Timers::default(),
            now: start,
            stats: LoopStats { loops: 1, ..LoopStats::default() },
            send_queue: Vec::new(),
            connects: Vec::new(),
            rearm: Vec::new(),
            cancels: Vec::new(),
            doomed: VecDeque::new(),
            drained: Vec::new(),
            drained_later: Vec::new(),
            lingering: Deadlines::default(),
            pool: Vec::new(),
            stop_requested: false,
            shutting_down: false,
        },
        handler,
        listener,
        accept_armed: false,
        accept_resume_at: None,
        drain_deadline: None,
        _waker: waker,
        waker_fd,
        control: control.clone(),
    };
    d.arm_waker()?;
    d.arm_accept()?;
    d.handler.on_start(&mut d.core);
    d.settle();
    while !d.finished() {
        d.turn()?;
    }
    let mut stats = std::mem::take(&mut d.core.stats);
    let setup = d.ring.setup();
    stats.uring_setup = Some(match (setup.sqpoll, setup.defer_taskrun, setup.coop_taskrun) {
        (true, _, _) => "sqpoll",
        (false, true, _) => "single_issuer+defer_taskrun",
        (false, false, true) => "coop_taskrun",
        _ => "plain",
    });
    drop(d);
    stats.syscalls = sys::counts().since(&counts_before);
    stats.wall = start.elapsed();
    Ok(stats)
}

fn ring_err(e: io::Error) -> Error {
    Error::sys(NAME, "io_uring_enter", None, e)
}

impl<H: Handler> Driver<'_, H> {
    fn finished(&self) -> bool {
        let c = &self.core;
        if c.shutting_down {
            return c.conns.is_empty();
        }
        self.listener.is_none()
            && c.conns.is_empty()
            && c.timers.is_empty()
            && c.drained.is_empty()
            && c.drained_later.is_empty()
    }

    fn arm_waker(&mut self) -> Result<()> {
        self.ring.push_poll_add(self.waker_fd, libc::POLLIN as u32, true, WAKER << KIND_SHIFT).map_err(ring_err)
    }

    fn arm_accept(&mut self) -> Result<()> {
        if let (Some(l), false) = (&self.listener, self.accept_armed) {
            self.ring.push_accept_multi(l.raw(), ACCEPT << KIND_SHIFT).map_err(ring_err)?;
            self.accept_armed = true;
        }
        Ok(())
    }

    fn pause_accept(&mut self, until: Option<Instant>) {
        if self.accept_armed {
            // Its completion (-ECANCELED, no F_MORE) clears accept_armed.
            let _ = self.ring.push_cancel(ACCEPT << KIND_SHIFT, IGNORE << KIND_SHIFT);
        }
        self.accept_resume_at = until;
    }

    fn turn(&mut self) -> Result<()> {
        self.apply()?;
        let c = &self.core;
        let immediate =
            !c.drained.is_empty() || !c.drained_later.is_empty() || !c.doomed.is_empty() || c.stop_requested;
        let timeout = if immediate {
            Some(Duration::ZERO)
        } else {
            let linger = c.lingering.next_deadline();
            timeout_until(
                Instant::now(),
                [c.timers.next_deadline(), self.accept_resume_at, self.drain_deadline, linger],
            )
        };
        let wait = !immediate && self.ring.completions_empty();
        let entered = if immediate && self.ring.setup().defer_taskrun {
            // Not waiting, but completions still have to be asked for.
            self.ring.enter_getevents()
        } else {
            self.ring.enter(u32::from(wait), timeout.filter(|_| wait))
        };
        match entered {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => return Err(ring_err(e)),
        }
        self.core.stats.turns += 1;
        self.core.now = Instant::now();
        while let Some(completion) = self.ring.pop_completion() {
            self.complete(completion);
            self.settle();
            if !self.core.cancels.is_empty() {
                // A receive to pause: cancel it now, not after the batch,
                // which with SQPOLL keeps growing while we reap it.
                for target in std::mem::take(&mut self.core.cancels) {
                    self.ring.push_cancel(target, IGNORE << KIND_SHIFT).map_err(ring_err)?;
                }
                if self.ring.setup().sqpoll {
                    self.ring.enter(0, None).map_err(ring_err)?;
                }
            }
            // Resubmit inside the batch so a long batch cannot fill the SQ.
            if self.ring.pending_submissions() > 1024 {
                self.apply()?;
            }
        }
        let later = std::mem::take(&mut self.core.drained_later);
        self.core.drained.extend(later);
        self.settle();
        while let Some(tok) = self.core.timers.pop_due(self.core.now) {
            self.handler.on_timer(&mut self.core, tok);
            self.settle();
        }
        while let Some(id) = self.core.lingering.pop_due(self.core.now) {
            let reason = self.core.closing_reason();
            self.core.doom(id, reason);
        }
        self.settle();
        if self.accept_resume_at.is_some_and(|t| t <= self.core.now) {
            self.accept_resume_at = None;
            if !self.core.shutting_down {
                self.arm_accept()?;
            }
        }
        if self.control.is_stopped() || self.core.stop_requested {
            self.begin_shutdown();
        }
        if self.drain_deadline.is_some_and(|t| t <= self.core.now) {
            for id in self.core.conns.ids() {
                self.core.doom(id, CloseReason::Shutdown);
            }
            self.settle();
        }
        Ok(())
    }

    /// Hands the work the handler queued to the ring.
    fn apply(&mut self) -> Result<()> {
        for (id, addr) in std::mem::take(&mut self.core.connects) {
            if let Some(c) = self.core.conns.get(id) {
                if let Err(e) = self.ring.push_connect(c.fd.raw(), &addr, ud(CONNECT, id)) {
                    self.core.doom(id, CloseReason::ConnectFailed(e));
                }
            }
        }
        for target in std::mem::take(&mut self.core.cancels) {
            self.ring.push_cancel(target, IGNORE << KIND_SHIFT).map_err(ring_err)?;
        }
        for id in std::mem::take(&mut self.core.rearm) {
            if let Some(c) = self.core.conns.get_mut(id) {
                if c.reading() && !c.has(RECV_ARMED) {
                    c.flags |= RECV_ARMED;
                    let fd = c.fd.raw();
                    self.ring.push_recv_multi(fd, ud(RECV, id)).map_err(ring_err)?;
                }
            }
        }
        for id in std::mem::take(&mut self.core.send_queue) {
            let Some(c) = self.core.conns.get_mut(id) else { continue };
            c.flags &= !QUEUED;
            if c.has(SENDING) || c.has(CONNECTING) || c.staged.is_empty() {
                continue;
            }
            let buf = std::mem::take(&mut c.staged);
            c.sending = buf.len();
            c.flags |= SENDING;
            let fd = c.fd.raw();
            self.ring.push_send(fd, buf, 0, ud(SEND, id)).map_err(ring_err)?;
        }
        self.settle();
        Ok(())
    }

    fn complete(&mut self, c: Completion) {
        let (kind, raw) = decode(c.user_data);
        match kind {
            ACCEPT => self.on_accept(&c),
            RECV => self.on_recv(raw, &c),
            SEND => self.on_send(raw, c),
            CONNECT => self.on_connect(raw, &c),
            WAKER => {
                if self.control.is_stopped() {
                    self.core.stop_requested = true;
                }
                if !c.more() {
                    let _ = self.arm_waker();
                }
            }
            _ => {}
        }
    }

    fn on_accept(&mut self, c: &Completion) {
        if !c.more() {
            self.accept_armed = false;
        }
        if c.result >= 0 && self.core.shutting_down {
            // Accepted just before the stop took effect: refuse it.
            drop(Fd::adopt_new(c.result));
        } else if c.result >= 0 {
            self.adopt(Fd::adopt_new(c.result));
            if self.core.cfg.max_conns.is_some_and(|m| self.core.conns.len() >= m) {
                self.pause_accept(None);
            }
        } else {
            match -c.result {
                libc::ECANCELED => {}
                libc::EINTR | libc::ECONNABORTED | libc::EPROTO | libc::EPERM => {}
                // EMFILE, ENFILE, ENOBUFS, ENOMEM...: back off, keep serving.
                _ => {
                    self.core.stats.accept_backoffs += 1;
                    self.pause_accept(Some(self.core.now + self.core.cfg.accept_backoff));
                }
            }
        }
        let paused = self.accept_resume_at.is_some()
            || self.core.cfg.max_conns.is_some_and(|m| self.core.conns.len() >= m)
            || self.core.shutting_down;
        if !self.accept_armed && !paused {
            let _ = self.arm_accept();
        }
    }

    fn adopt(&mut self, fd: Fd) {
        // TCP_NODELAY comes from the listener (see net::tcp_listener).
        let id = self.core.conns.insert(Conn { fd, staged: Vec::new(), sending: 0, pending_in: Vec::new(), flags: 0 });
        self.core.stats.accepted += 1;
        self.core.stats.peak_conns = self.core.stats.peak_conns.max(self.core.conns.len() as u64);
        self.core.rearm.push(id);
        self.handler.on_open(&mut self.core, id);
    }

    fn on_recv(&mut self, raw: u64, c: &Completion) {
        let bid = c.buffer_id();
        let Some(id) = id_of(&self.core.conns, raw) else {
            // A closed connection's late completion: give its buffer back.
            if let Some(b) = bid {
                self.ring.recycle_buffer(b);
            }
            return;
        };
        if !c.more() {
            if let Some(conn) = self.core.conns.get_mut(id) {
                conn.flags &= !(RECV_ARMED | CANCELLING);
            }
        }
        let discarding = self.core.conns.get(id).is_some_and(|conn| conn.has(CLOSING));
        let lingering = self.core.conns.get(id).is_some_and(|conn| conn.has(LINGER));
        match c.result {
            n if n > 0 && discarding => {
                if let Some(b) = bid {
                    self.ring.recycle_buffer(b);
                }
            }
            0 if lingering => {
                let reason = self.core.closing_reason();
                self.core.doom(id, reason);
            }
            n if n > 0 => {
                self.core.stats.bytes_in += n as u64;
                self.core.stats.reads += 1;
                if let Some(b) = bid {
                    self.deliver(id, b, n as usize);
                    self.ring.recycle_buffer(b);
                }
            }
            0 => self.peer_eof(id),
            e => match -e {
                // Out of ring buffers, or our own cancel: arm again if we
                // still want data.
                libc::ENOBUFS | libc::ECANCELED => {}
                errno => self.core.doom(id, io_reason("recv", errno)),
            },
        }
        if let Some(conn) = self.core.conns.get(id) {
            if !conn.has(RECV_ARMED) && conn.reading() {
                self.core.rearm.push(id);
            }
        }
    }

    fn deliver(&mut self, id: ConnId, bid: u16, n: usize) {
        let Some(c) = self.core.conns.get_mut(id) else { return };
        let mut pending = std::mem::take(&mut c.pending_in);
        let max_input = self.core.cfg.max_input;
        let data = self.ring.buffer(bid, n);
        let overflow = feed(self.handler, &mut self.core, id, &mut pending, data, max_input);
        if let Some(c) = self.core.conns.get_mut(id) {
            if overflow {
                self.core.doom(id, CloseReason::InputLimit);
            } else if !pending.is_empty() {
                c.pending_in = pending;
            }
        }
    }

    fn peer_eof(&mut self, id: ConnId) {
        let Some(c) = self.core.conns.get_mut(id) else { return };
        c.flags |= READ_CLOSED;
        if c.buffered() == 0 {
            self.core.doom(id, CloseReason::PeerClosed);
        }
    }

    fn on_send(&mut self, raw: u64, c: Completion) {
        let Some(id) = id_of(&self.core.conns, raw) else {
            if let Some(buf) = c.returned {
                self.core.return_buffer(buf);
            }
            return;
        };
        let Some(buf) = c.returned else { return };
        let Some(conn) = self.core.conns.get_mut(id) else { return };
        if c.result < 0 {
            conn.flags &= !SENDING;
            conn.sending = 0;
            self.core.return_buffer(buf);
            return self.core.doom(id, io_reason("send", -c.result));
        }
        let sent = c.result as usize;
        self.core.stats.bytes_out += sent as u64;
        let offset = buf.len() - conn.sending + sent;
        if sent < conn.sending && sent > 0 {
            // A short send: the rest goes next, before anything staged.
            conn.sending -= sent;
            let fd = conn.fd.raw();
            if let Err(e) = self.ring.push_send(fd, buf, offset, ud(SEND, id)) {
                self.core.doom(id, CloseReason::Error { syscall: "send", error: e });
            }
            return;
        }
        conn.sending = 0;
        conn.flags &= !SENDING;
        let more_staged = !conn.staged.is_empty();
        let empty_send = sent == 0 && !buf.is_empty();
        self.core.return_buffer(buf);
        if empty_send {
            return self.core.doom(id, CloseReason::Reset);
        }
        if more_staged {
            self.core.queue_send(id);
        } else {
            self.core.on_empty(id);
        }
        self.core.update_backpressure(id);
    }

    fn on_connect(&mut self, raw: u64, c: &Completion) {
        let Some(id) = id_of(&self.core.conns, raw) else { return };
        if c.result < 0 {
            return self.core.doom(id, CloseReason::ConnectFailed(io::Error::from_raw_os_error(-c.result)));
        }
        let Some(conn) = self.core.conns.get_mut(id) else { return };
        conn.flags &= !CONNECTING;
        let has_output = !conn.staged.is_empty();
        self.core.stats.connected += 1;
        self.core.rearm.push(id);
        if has_output {
            self.core.queue_send(id);
        }
        self.handler.on_open(&mut self.core, id);
    }

    fn settle(&mut self) {
        loop {
            if let Some((id, reason)) = self.core.doomed.pop_front() {
                self.finalize(id, reason);
            } else if let Some(id) = self.core.drained.pop() {
                if self.core.conns.get(id).is_some() {
                    self.handler.on_drained(&mut self.core, id);
                }
            } else {
                return;
            }
        }
    }

    fn finalize(&mut self, id: ConnId, reason: CloseReason) {
        let Some(c) = self.core.conns.remove(id) else { return };
        if c.has(RECV_ARMED) {
            // The armed receive holds the socket open until cancelled.
            let _ = self.ring.push_cancel(ud(RECV, id), IGNORE << KIND_SHIFT);
        }
        // A send in flight keeps its buffer in the ring until it completes.
        // Close through the ring too (IORING_OP_CLOSE): no syscall.
        let Conn { fd, staged, flags, .. } = c;
        if flags & CONNECTING != 0 {
            // A connect in flight keeps the socket alive until cancelled.
            let _ = self.ring.push_cancel(ud(CONNECT, id), IGNORE << KIND_SHIFT);
        }
        if let Err((fd, _)) = self.ring.push_close(fd, IGNORE << KIND_SHIFT) {
            drop(fd); // closes with a syscall instead
        }
        self.core.return_buffer(staged);
        self.core.stats.closed += 1;
        if !reason.is_clean() {
            self.core.stats.closed_abnormally += 1;
        }
        self.handler.on_close(&mut self.core, id, &reason);
        if self.listener.is_some() && !self.accept_armed && self.accept_resume_at.is_none() && !self.core.shutting_down
        {
            let _ = self.arm_accept();
        }
    }

    fn begin_shutdown(&mut self) {
        // Handled: later turns may wait again (for the output to drain).
        self.core.stop_requested = false;
        if self.core.shutting_down {
            return;
        }
        self.core.shutting_down = true;
        if self.listener.is_some() {
            self.pause_accept(None);
            // Close through the ring, after the accept's cancellation, so no
            // queued accept can meet a closed (or reused) descriptor number.
            if let Some(l) = self.listener.take() {
                if let Err((l, _)) = self.ring.push_close(l, IGNORE << KIND_SHIFT) {
                    drop(l);
                }
            }
        }
        self.drain_deadline = Some(self.core.now + self.core.cfg.drain_timeout);
        for id in self.core.conns.ids() {
            if self.core.conns.get(id).is_some_and(|c| c.buffered() == 0) {
                self.core.doom(id, CloseReason::Shutdown);
            } else if let Some(c) = self.core.conns.get_mut(id) {
                c.flags |= CLOSING;
            }
        }
        self.settle();
    }
}
