//! The readiness driver: any [`Poller`] (select, poll, epoll LT/ET).
//!
//! Reads go into one scratch buffer per loop, so a connection owns no
//! receive buffer; a connection owns output only while some is unsent.
//! Level-triggered connections are read once per event (the kernel reports
//! them again). Edge-triggered ones are read until EAGAIN or a short read
//! (new data after a short read raises a new edge), at most `read_budget`
//! reads per event; a connection that used its budget goes to the back of
//! a local ready list, so one fire hose cannot starve the others and its
//! edge is never lost.

use super::slab::Slab;
use super::stats::LoopStats;
use super::timers::{timeout_until, Deadlines, Timers};
use super::{feed, CloseReason, Config, ConnId, Control, Handler, Io};
use crate::error::{Error, Result};
use crate::poller::{Events, Interest, Mode, Poller, Token};
use crate::sys::{self, net, net::Fd};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const LISTENER: Token = Token(usize::MAX);
const WAKER: Token = Token(usize::MAX - 1);
/// Accepts per listener event, so a connection storm cannot stall the loop.
const ACCEPT_BUDGET: usize = 64;

// Connection state bits.
const READ_CLOSED: u8 = 1; // the peer sent EOF
const CLOSING: u8 = 2; // close once the output is sent
const CONNECTING: u8 = 4; // outbound connect in progress
const PAUSED: u8 = 8; // output over its bound: not reading
const IN_READY: u8 = 16; // in the local ready list
const NOTIFY_DRAINED: u8 = 32;
const DOOMED: u8 = 64; // queued for close
const LINGER: u8 = 128; // FIN sent; reading and discarding until the peer's EOF

struct Conn {
    fd: Fd,
    out: Vec<u8>,
    out_pos: usize,
    pending_in: Vec<u8>,
    registered: Interest,
    flags: u8,
}

impl Conn {
    fn buffered(&self) -> usize {
        self.out.len() - self.out_pos
    }
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
    /// Whether the loop wants to read: to deliver, or (lingering) to discard.
    fn reading(&self) -> bool {
        if self.flags & (READ_CLOSED | CONNECTING | DOOMED) != 0 {
            return false;
        }
        self.has(LINGER) || self.flags & (CLOSING | PAUSED) == 0
    }
}

fn token(id: ConnId) -> Token {
    Token(id.as_u64() as usize)
}

/// Everything a handler may touch: the [`Io`] side of the loop.
struct Core {
    poller: Box<dyn Poller>,
    mode: Mode,
    cfg: Config,
    conns: Slab<Conn>,
    timers: Timers,
    now: Instant,
    stats: LoopStats,
    ready: VecDeque<ConnId>,
    doomed: VecDeque<(ConnId, CloseReason)>,
    drained: Vec<ConnId>,
    drained_later: Vec<ConnId>,
    lingering: Deadlines,
    stop_requested: bool,
    shutting_down: bool,
}

impl Core {
    fn closing_reason(&self) -> CloseReason {
        CloseReason::closing(self.shutting_down)
    }

    /// Our output is all sent and we are closing: send FIN, then read and
    /// discard until the peer's EOF (or the linger time), so that close
    /// never meets unread data, which would make the kernel send RST and
    /// throw away output the peer has not received yet.
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
            return self.doom(id, io_reason("shutdown", e));
        }
        c.flags |= LINGER;
        self.lingering.push(until, id);
        self.update_interest(id);
    }

    fn doom(&mut self, id: ConnId, reason: CloseReason) {
        if let Some(c) = self.conns.get_mut(id) {
            if !c.has(DOOMED) {
                c.flags |= DOOMED;
                self.doomed.push_back((id, reason));
            }
        }
    }

    /// Registers the interest the connection's state calls for, if changed.
    fn update_interest(&mut self, id: ConnId) {
        let (max, mode) = (self.cfg.max_output, self.mode);
        let Some(c) = self.conns.get_mut(id) else { return };
        let buffered = c.buffered();
        if buffered >= max {
            c.flags |= PAUSED;
        } else if c.has(PAUSED) && buffered <= max / 2 {
            c.flags &= !PAUSED;
            if mode == Mode::Edge && !c.has(IN_READY) {
                // The edge may have passed while paused: look again.
                c.flags |= IN_READY;
                self.ready.push_back(id);
            }
        }
        let mut want = Interest::NONE;
        if c.reading() {
            want = want | Interest::READABLE;
        }
        if buffered > 0 || c.has(CONNECTING) {
            want = want | Interest::WRITABLE;
        }
        if want != c.registered {
            match self.poller.modify(c.fd.raw(), token(id), want, mode) {
                Ok(()) => c.registered = want,
                Err(e) => self.doom(id, sys_reason("modify", e)),
            }
        }
    }

    /// Sends queued output until done or EAGAIN.
    fn flush(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        while c.out_pos < c.out.len() {
            match sys::write(c.fd.raw(), &c.out[c.out_pos..]) {
                Ok(n) => {
                    c.out_pos += n;
                    self.stats.bytes_out += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.doom(id, io_reason("write", e)),
            }
        }
        if c.out_pos == c.out.len() {
            // Give the memory back: an idle connection owns no buffer.
            c.out = Vec::new();
            c.out_pos = 0;
            self.on_empty(id);
        } else if c.out_pos >= 64 << 10 && c.out_pos * 2 >= c.out.len() {
            c.out.drain(..c.out_pos);
            c.out_pos = 0;
        }
        self.update_interest(id);
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

    fn peer_eof(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        c.flags |= READ_CLOSED;
        if c.buffered() == 0 {
            self.doom(id, CloseReason::PeerClosed);
        } else {
            // Half-close: finish sending what the peer asked for, then close.
            self.update_interest(id);
        }
    }
}

fn io_reason(syscall: &'static str, e: io::Error) -> CloseReason {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => CloseReason::Reset,
        _ => CloseReason::Error { syscall, error: e },
    }
}

fn sys_reason(syscall: &'static str, e: Error) -> CloseReason {
    CloseReason::Error { syscall, error: e.into() }
}

impl Io for Core {
    fn now(&self) -> Instant {
        self.now
    }

    fn write(&mut self, id: ConnId, data: &[u8]) -> bool {
        let Some(c) = self.conns.get_mut(id) else { return false };
        if c.has(DOOMED) {
            return false;
        }
        let mut sent = 0;
        if c.buffered() == 0 && !c.has(CONNECTING) {
            // Nothing queued: try the socket directly, no copy.
            loop {
                match sys::write(c.fd.raw(), &data[sent..]) {
                    Ok(n) => {
                        sent += n;
                        self.stats.bytes_out += n as u64;
                        if sent == data.len() {
                            return true;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.doom(id, io_reason("write", e));
                        return false;
                    }
                }
            }
        }
        c.out.extend_from_slice(&data[sent..]);
        let buffered = c.buffered() as u64;
        self.stats.peak_output = self.stats.peak_output.max(buffered);
        self.update_interest(id);
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
        } else {
            self.update_interest(id);
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
        net::connect(fd.raw(), &addr)?;
        let raw = fd.raw();
        let id = self.conns.insert(Conn {
            fd,
            out: Vec::new(),
            out_pos: 0,
            pending_in: Vec::new(),
            registered: Interest::WRITABLE,
            flags: CONNECTING,
        });
        if let Err(e) = self.poller.add(raw, token(id), Interest::WRITABLE, self.mode) {
            self.conns.remove(id);
            return Err(e.into());
        }
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
    core: Core,
    handler: &'a mut H,
    scratch: Vec<u8>,
    listener: Option<Fd>,
    listening: bool,
    /// Accepting paused (EMFILE, or max_conns) until then; None with
    /// `listening == false` means until a connection closes.
    accept_resume_at: Option<Instant>,
    drain_deadline: Option<Instant>,
    control: Control,
}

pub fn run<H: Handler>(cfg: &Config, listener: Option<Fd>, handler: &mut H, control: &Control) -> Result<LoopStats> {
    let start = Instant::now();
    let counts_before = sys::counts();
    let mut poller = cfg.backend.open()?;
    control.register(poller.waker(WAKER)?);
    if let Some(l) = &listener {
        poller.add(l.raw(), LISTENER, Interest::READABLE, Mode::Level)?;
    }
    let listening = listener.is_some();
    let mut d = Driver {
        core: Core {
            poller,
            mode: cfg.backend.mode(),
            cfg: cfg.clone(),
            conns: Slab::default(),
            timers: Timers::default(),
            now: start,
            stats: LoopStats { loops: 1, ..LoopStats::default() },
            ready: VecDeque::new(),
            doomed: VecDeque::new(),
            drained: Vec::new(),
            drained_later: Vec::new(),
            lingering: Deadlines::default(),
            stop_requested: false,
            shutting_down: false,
        },
        handler,
        scratch: vec![0; cfg.read_buffer.max(1)],
        listener,
        listening,
        accept_resume_at: None,
        drain_deadline: None,
        control: control.clone(),
    };
    let mut events = Events::with_capacity(1024);
    d.handler.on_start(&mut d.core);
    d.settle();
    while !d.finished() {
        d.turn(&mut events)?;
    }
    let mut stats = d.core.stats;
    stats.syscalls = sys::counts().since(&counts_before);
    stats.wall = start.elapsed();
    Ok(stats)
}

impl<H: Handler> Driver<'_, H> {
    fn finished(&self) -> bool {
        let c = &self.core;
        if c.shutting_down {
            return c.conns.is_empty();
        }
        // A loop with nothing to serve and nothing pending is done.
        self.listener.is_none()
            && c.conns.is_empty()
            && c.timers.is_empty()
            && c.drained.is_empty()
            && c.drained_later.is_empty()
    }

    fn turn(&mut self, events: &mut Events) -> Result<()> {
        let c = &self.core;
        let timeout = if !c.ready.is_empty() || !c.drained.is_empty() || !c.drained_later.is_empty() || c.stop_requested
        {
            Some(Duration::ZERO)
        } else {
            let linger = c.lingering.next_deadline();
            timeout_until(
                Instant::now(),
                [c.timers.next_deadline(), self.accept_resume_at, self.drain_deadline, linger],
            )
        };
        self.core.poller.wait(events, timeout)?;
        self.core.stats.turns += 1;
        self.core.now = Instant::now();
        for ev in events.iter() {
            match ev.token() {
                LISTENER => self.accept(),
                WAKER => {
                    if self.control.is_stopped() {
                        self.core.stop_requested = true;
                    }
                }
                t => self.conn_event(ConnId::from_u64(t.0 as u64), ev),
            }
            self.settle();
        }
        // Edge-triggered connections that used their budget, oldest first;
        // those that use it again go to the back for the next turn.
        for _ in 0..self.core.ready.len() {
            let Some(id) = self.core.ready.pop_front() else { break };
            if let Some(c) = self.core.conns.get_mut(id) {
                c.flags &= !IN_READY;
                self.read(id, false);
                self.settle();
            }
        }
        let later = std::mem::take(&mut self.core.drained_later);
        self.core.drained.extend(later);
        self.settle();
        while let Some(tok) = self.core.timers.pop_due(self.core.now) {
            self.handler.on_timer(&mut self.core, tok);
            self.settle();
        }
        self.settle();
        while let Some(id) = self.core.lingering.pop_due(self.core.now) {
            let reason = self.core.closing_reason();
            self.core.doom(id, reason);
        }
        self.settle();
        if self.accept_resume_at.is_some_and(|t| t <= self.core.now) {
            self.resume_accept();
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

    fn conn_event(&mut self, id: ConnId, ev: crate::poller::Event) {
        let Some(c) = self.core.conns.get(id) else { return };
        if c.has(CONNECTING) {
            return self.finish_connect(id);
        }
        let buffered = c.buffered();
        if buffered > 0 && (ev.is_writable() || ev.is_write_closed() || ev.is_error()) {
            self.core.flush(id);
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            // A short read proves the socket drained only if no FIN had
            // arrived yet: a FIN already queued raises no new edge.
            self.read(id, !ev.is_read_closed());
        }
    }

    /// Reads once (level) or until EAGAIN (edge, within the budget). With
    /// `short_read_drains`, an edge-triggered read that returns less than
    /// the buffer also ends it: new data after it raises a new edge.
    fn read(&mut self, id: ConnId, short_read_drains: bool) {
        let edge = self.core.mode == Mode::Edge;
        let budget = if edge { self.core.cfg.read_budget.max(1) } else { 1 };
        for _ in 0..budget {
            let Some(c) = self.core.conns.get(id) else { return };
            if !c.reading() {
                return;
            }
            let lingering = c.has(LINGER);
            match sys::read(c.fd.raw(), &mut self.scratch) {
                Ok(0) if lingering => {
                    let reason = self.core.closing_reason();
                    return self.core.doom(id, reason);
                }
                Ok(0) => return self.core.peer_eof(id),
                Ok(_) if lingering => continue,
                Ok(n) => {
                    self.core.stats.bytes_in += n as u64;
                    self.core.stats.reads += 1;
                    self.deliver(id, n);
                    self.settle();
                    if !edge || (short_read_drains && n < self.scratch.len()) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.core.doom(id, io_reason("read", e));
                    return self.settle();
                }
            }
        }
        // Budget used and maybe still readable: come back after the others.
        if let Some(c) = self.core.conns.get_mut(id) {
            if c.reading() && !c.has(IN_READY) {
                c.flags |= IN_READY;
                self.core.ready.push_back(id);
            }
        }
    }

    /// Hands `scratch[..n]` (after any unconsumed input) to the handler.
    fn deliver(&mut self, id: ConnId, n: usize) {
        let Some(c) = self.core.conns.get_mut(id) else { return };
        let mut pending = std::mem::take(&mut c.pending_in);
        let max_input = self.core.cfg.max_input;
        let overflow = feed(self.handler, &mut self.core, id, &mut pending, &self.scratch[..n], max_input);
        if let Some(c) = self.core.conns.get_mut(id) {
            if overflow {
                self.core.doom(id, CloseReason::InputLimit);
            } else if !pending.is_empty() {
                c.pending_in = pending;
            }
        }
    }

    fn finish_connect(&mut self, id: ConnId) {
        let Some(c) = self.core.conns.get_mut(id) else { return };
        match net::take_socket_error(c.fd.raw()) {
            Ok(None) => {
                c.flags &= !CONNECTING;
                self.core.stats.connected += 1;
                self.core.update_interest(id);
                self.handler.on_open(&mut self.core, id);
                // Output written while connecting goes out now.
                if self.core.conns.get(id).is_some_and(|c| c.buffered() > 0) {
                    self.core.flush(id);
                }
            }
            Ok(Some(e)) | Err(e) => self.core.doom(id, CloseReason::ConnectFailed(e)),
        }
        self.settle();
    }

    /// Closes doomed connections and delivers drained notices, until none
    /// are left (a handler may cause more of either).
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
        // Delete before close: never leave a closed fd registered.
        if let Err(e) = self.core.poller.delete(c.fd.raw()) {
            debug_assert!(false, "delete of a registered fd failed: {e}");
        }
        drop(c);
        self.core.stats.closed += 1;
        if !reason.is_clean() {
            self.core.stats.closed_abnormally += 1;
        }
        self.handler.on_close(&mut self.core, id, &reason);
        if !self.listening && self.accept_resume_at.is_none() && self.listener.is_some() && !self.core.shutting_down {
            self.resume_accept();
        }
    }

    fn accept(&mut self) {
        let Some(lfd) = self.listener.as_ref().map(Fd::raw) else { return };
        for _ in 0..ACCEPT_BUDGET {
            if self.core.cfg.max_conns.is_some_and(|m| self.core.conns.len() >= m) {
                return self.pause_accept(None);
            }
            match net::accept(lfd) {
                Ok(fd) => self.adopt(fd),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR) | Some(libc::ECONNABORTED) | Some(libc::EPROTO) | Some(libc::EPERM) => {}
                    // Out of descriptors or memory: back off instead of
                    // spinning on a listener that stays readable.
                    _ => {
                        self.core.stats.accept_backoffs += 1;
                        let until = self.core.now + self.core.cfg.accept_backoff;
                        return self.pause_accept(Some(until));
                    }
                },
            }
        }
    }

    fn adopt(&mut self, fd: Fd) {
        // TCP_NODELAY comes from the listener (see net::tcp_listener).
        let raw = fd.raw();
        let id = self.core.conns.insert(Conn {
            fd,
            out: Vec::new(),
            out_pos: 0,
            pending_in: Vec::new(),
            registered: Interest::READABLE,
            flags: 0,
        });
        if let Err(e) = self.core.poller.add(raw, token(id), Interest::READABLE, self.core.mode) {
            // select cannot watch fd >= FD_SETSIZE: refuse this one, loudly.
            self.core.conns.remove(id);
            self.core.stats.refused += 1;
            self.handler.on_refused(&e);
            return;
        }
        self.core.stats.accepted += 1;
        self.core.stats.peak_conns = self.core.stats.peak_conns.max(self.core.conns.len() as u64);
        self.handler.on_open(&mut self.core, id);
        self.settle();
    }

    fn pause_accept(&mut self, until: Option<Instant>) {
        if self.listening {
            if let Some(l) = &self.listener {
                // Failure leaves it registered: accepting just retries sooner.
                let _ = self.core.poller.delete(l.raw());
            }
            self.listening = false;
        }
        self.accept_resume_at = until;
    }

    fn resume_accept(&mut self) {
        self.accept_resume_at = None;
        if self.listening || self.core.shutting_down {
            return;
        }
        if let Some(l) = &self.listener {
            if self.core.poller.add(l.raw(), LISTENER, Interest::READABLE, Mode::Level).is_ok() {
                self.listening = true;
            } else {
                self.accept_resume_at = Some(self.core.now + self.core.cfg.accept_backoff);
            }
        }
    }

    fn begin_shutdown(&mut self) {
        // Handled: later turns may wait again (for the output to drain).
        self.core.stop_requested = false;
        if self.core.shutting_down {
            return;
        }
        self.core.shutting_down = true;
        if let Some(l) = self.listener.take() {
            if self.listening {
                let _ = self.core.poller.delete(l.raw());
            }
            self.listening = false;
        }
        self.accept_resume_at = None;
        self.drain_deadline = Some(self.core.now + self.core.cfg.drain_timeout);
        for id in self.core.conns.ids() {
            if self.core.conns.get(id).is_some_and(|c| c.buffered() == 0) {
                self.core.doom(id, CloseReason::Shutdown);
            } else if let Some(c) = self.core.conns.get_mut(id) {
                c.flags |= CLOSING;
                self.core.update_interest(id);
            }
        }
        self.settle();
    }
}
