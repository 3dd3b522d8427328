//! One load-generating loop: a [`Handler`] that opens its share of the
//! connections, drives them closed- or open-loop, checks every echoed
//! byte, and records latency in an HDR histogram.

use super::hdrlog::{Interval, IntervalRecorder, UnixClock};
use super::pattern::Pattern;
use super::watch::Counters;
use hdrhistogram::Histogram;
use iomux::runtime::{CloseReason, ConnId, Handler, Io, TimerId};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadMode {
    /// Send a message, wait for its whole echo, send the next (closed loop;
    /// with --rate, open loop).
    Echo,
    /// Send continuously and read nothing.
    Sink,
    /// A RESP server's pub/sub: --subscribers SUBSCRIBE, --publishers
    /// PUBLISH --msg-size byte messages (--window unanswered each) for
    /// --duration; messages delivered per second.
    Pubsub,
}

/// What one loop does.
#[derive(Clone, Debug)]
pub struct Plan {
    pub addr: SocketAddr,
    pub conns: usize,
    pub idle: usize,
    /// Global number of this loop's first active connection.
    pub first_conn: u32,
    /// Global index of this loop's first idle connection.
    pub first_idle: u64,
    pub msg_size: usize,
    pub mode: LoadMode,
    /// Open loop: messages per second per connection.
    pub rate_per_conn: Option<f64>,
    pub duration: Option<Duration>,
    /// This loop's share of --requests.
    pub requests: Option<u64>,
    /// Messages each connection sends (--per-conn).
    pub per_conn: Option<u64>,
    pub warmup: Duration,
    /// Source addresses, taken in turn by global connection index (so
    /// every loop, process and shard spreads evenly over them).
    pub sources: Arc<Vec<IpAddr>>,
    /// New connections per second for this loop.
    pub connect_rate: Option<f64>,
    pub progress: Arc<Counters>,
    /// Set for --hdr-log: record latency per second on this clock.
    pub intervals: Option<UnixClock>,
    /// How long to wait for outstanding echoes after the end.
    pub grace: Duration,
    /// Give up when echoes are awaited and none arrives for this long.
    pub stall_timeout: Duration,
    /// Open loop: the grid the schedule is rounded up to (--tick-us).
    pub tick: Duration,
    /// Echo: new connections each active one may take in place of one
    /// closed early (--reconnect).
    pub reconnect: u32,
    /// --tls-ca: every connection speaks TLS.
    pub tls: Option<Arc<super::tls::TlsClient>>,
}

/// What one loop measured (merged across loops at the end).
pub struct Report {
    /// Latency in nanoseconds.
    pub latency: Histogram<u64>,
    pub echoes: u64,
    pub echo_bytes: u64,
    pub sent_messages: u64,
    pub sent_bytes: u64,
    pub mismatches: u64,
    pub unexpected_closes: u64,
    /// Of those, closed because the server vanished (keepalive or user
    /// timeout: ETIMEDOUT and the unreachable errors), and by a reset.
    pub vanished: u64,
    pub resets: u64,
    /// New connections opened in place of those closed early.
    pub reconnects: u64,
    pub unanswered: u64,
    pub connect_errors: BTreeMap<String, u64>,
    pub connected: u64,
    pub measured: Duration,
    pub first_error: Option<String>,
    /// The first connect, and the last connection established or failed.
    pub setup: Option<(Instant, Instant)>,
    /// When measuring began (the earliest loop's start, when merged).
    pub measure_start: Option<Instant>,
    /// When measuring ended (the latest loop's end, when merged).
    pub measure_end: Option<Instant>,
    /// When the loop finished: every message sent while measuring was
    /// answered (or given up on), before any connection closed. A closed
    /// loop's last round is answered after `measure_end`.
    pub drained: Option<Instant>,
    /// --hdr-log: the measured latencies second by second.
    pub intervals: Vec<Interval>,
    pub interval_error: Option<String>,
    /// The process's CPU time (user + system, every thread: io_uring's
    /// SQPOLL and worker threads are the load's work too) when measuring
    /// began and when the last echo was in (the earliest and the latest
    /// of the loops, when merged).
    pub cpu: Option<(Duration, Duration)>,
}

impl Report {
    fn new() -> Report {
        Report {
            latency: super::hist::latency_histogram(),
            echoes: 0,
            echo_bytes: 0,
            sent_messages: 0,
            sent_bytes: 0,
            mismatches: 0,
            unexpected_closes: 0,
            vanished: 0,
            resets: 0,
            reconnects: 0,
            unanswered: 0,
            connect_errors: BTreeMap::new(),
            connected: 0,
            measured: Duration::ZERO,
            first_error: None,
            setup: None,
            measure_start: None,
            measure_end: None,
            drained: None,
            intervals: Vec::new(),
            interval_error: None,
            cpu: None,
        }
    }

    pub fn errors(&self) -> u64 {
        self.mismatches + self.unexpected_closes + self.unanswered + self.connect_errors.values().sum::<u64>()
    }

    pub fn merge(&mut self, o: &Report) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.latency.add(&o.latency);
        self.echoes += o.echoes;
        self.echo_bytes += o.echo_bytes;
        self.sent_messages += o.sent_messages;
        self.sent_bytes += o.sent_bytes;
        self.mismatches += o.mismatches;
        self.unexpected_closes += o.unexpected_closes;
        self.vanished += o.vanished;
        self.resets += o.resets;
        self.reconnects += o.reconnects;
        self.unanswered += o.unanswered;
        for (k, v) in &o.connect_errors {
            *self.connect_errors.entry(k.clone()).or_default() += v;
        }
        self.connected += o.connected;
        self.measured = self.measured.max(o.measured);
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        self.setup = match (self.setup, o.setup) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (a, b) => a.or(b),
        };
        self.measure_start = match (self.measure_start, o.measure_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.measure_end = self.measure_end.max(o.measure_end);
        self.drained = self.drained.max(o.drained);
        self.intervals.extend(o.intervals.iter().cloned());
        if self.interval_error.is_none() {
            self.interval_error.clone_from(&o.interval_error);
        }
        self.cpu = match (self.cpu, o.cpu) {
            (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
            (a, b) => a.or(b),
        };
    }
}

impl Default for Report {
    fn default() -> Report {
        Report::new()
    }
}

/// One connection's state, kept by the loop beside the connection (the
/// handler's `Conn`), so that an echo costs no lookup.
pub struct Conn {
    number: u32,
    active: bool,
    next_seq: u64,
    /// Messages sent and not yet fully echoed: (seq, when it was sent or,
    /// open loop, scheduled).
    outstanding: VecDeque<(u64, Instant)>,
    /// Bytes of the oldest outstanding message already echoed.
    received: usize,
    /// New connections it may still take in place of this one.
    reconnects_left: u32,
    /// It replaces one closed early: its outstanding messages go again.
    replacement: bool,
}

const CONNECT_TICK: u64 = 1;
const WARMUP_END: u64 = 2;
const END: u64 = 3;
const GRACE_END: u64 = 4;
const WATCHDOG: u64 = 5;
const PACE: u64 = 6;
const START: u64 = 7;
const SINK_BATCH: usize = 64 << 10;

/// Open loop: when each of the loop's messages is due. They go
/// round-robin over its active connections (so each connection keeps its
/// own rate, the connections staggered evenly over one interval), message
/// `k` at `start + k * gap` rounded up to the tick grid: the messages due
/// within one tick go out together, stamped with the same due time, and
/// the loop wakes once per tick, not once per message.
struct Pacer {
    start: Instant,
    /// Nanoseconds between two messages of this loop.
    gap_ns: f64,
    tick_ns: u64,
    /// Messages scheduled so far (sent, or skipped for a closed connection).
    next: u64,
    /// With a duration: when sending ends. A message due then or later is
    /// never sent, even when a stalled loop wakes past the end, so the
    /// rate times the duration is what goes out.
    end: Option<Instant>,
}

impl Pacer {
    fn due(&self, k: u64) -> Instant {
        let exact = (k as f64 * self.gap_ns).ceil() as u64;
        self.start + Duration::from_nanos(exact.div_ceil(self.tick_ns) * self.tick_ns)
    }
}

pub struct Client {
    plan: Plan,
    /// Every connection opened, active ones first (closing them all at the
    /// end; a closed one's id is dead, and closing it does nothing).
    ids: Vec<ConnId>,
    /// The active connections, in the order they take messages (open loop).
    active: Vec<ConnId>,
    /// Connections opened and not closed yet, and how many are active.
    open: usize,
    open_active: usize,
    next_active: usize,
    next_idle: usize,
    opening: usize,
    /// --connect-rate: when the first connect was due.
    connecting_since: Option<Instant>,
    /// The START timer is set.
    start_pending: bool,
    started: bool,
    sending: bool,
    finishing: bool,
    measuring: bool,
    measure_start: Instant,
    /// The process's CPU time when measuring began.
    cpu_start: Option<Duration>,
    quota_left: Option<u64>,
    /// Messages sent and not yet fully echoed, over all connections.
    in_flight: usize,
    last_progress: Instant,
    pacer: Option<Pacer>,
    message: Vec<u8>,
    batch: Vec<u8>,
    pattern: Pattern,
    intervals: Option<IntervalRecorder>,
    pub report: Report,
}

/// User + system CPU time of the whole process so far.
fn process_cpu() -> Option<Duration> {
    crate::os::usage().ok().map(|u| u.user + u.system)
}

fn errno_name(e: &iomux::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "ECONNREFUSED".into(),
        Some(libc::ETIMEDOUT) => "ETIMEDOUT".into(),
        Some(libc::EADDRNOTAVAIL) => "EADDRNOTAVAIL".into(),
        Some(libc::EMFILE) => "EMFILE".into(),
        Some(libc::ENFILE) => "ENFILE".into(),
        Some(libc::ECONNRESET) => "ECONNRESET".into(),
        Some(libc::EHOSTUNREACH) => "EHOSTUNREACH".into(),
        Some(libc::ENETUNREACH) => "ENETUNREACH".into(),
        Some(n) => format!("errno {n}"),
        None => e.to_string(),
    }
}

impl Client {
    pub fn new(plan: Plan) -> Client {
        let quota_left = plan.requests.or(plan.per_conn.map(|k| k * plan.conns as u64));
        let message = vec![0; plan.msg_size.max(1)];
        let pattern = Pattern::new(message.len());
        let intervals = plan.intervals.map(IntervalRecorder::new);
        Client {
            plan,
            ids: Vec::new(),
            active: Vec::new(),
            open: 0,
            open_active: 0,
            next_active: 0,
            next_idle: 0,
            opening: 0,
            connecting_since: None,
            start_pending: false,
            started: false,
            sending: false,
            finishing: false,
            measuring: false,
            measure_start: Instant::now(),
            cpu_start: None,
            quota_left,
            in_flight: 0,
            last_progress: Instant::now(),
            pacer: None,
            message,
            batch: Vec::new(),
            pattern,
            intervals,
            report: Report::new(),
        }
    }

    fn total(&self) -> usize {
        self.plan.conns + self.plan.idle
    }

    /// Opens up to `n` more connections (active ones first).
    fn open_some(&mut self, io: &mut Io<Conn>, n: usize) {
        for _ in 0..n {
            let (active, number, global) = if self.next_active < self.plan.conns {
                self.next_active += 1;
                let number = self.plan.first_conn + self.next_active as u32 - 1;
                (true, number, u64::from(number))
            } else if self.next_idle < self.plan.idle {
                self.next_idle += 1;
                (false, u32::MAX, self.plan.first_idle + self.next_idle as u64 - 1)
            } else {
                return;
            };
            let now = Instant::now();
            self.report.setup.get_or_insert((now, now));
            let sources = &self.plan.sources;
            let source = (!sources.is_empty()).then(|| sources[(global % sources.len() as u64) as usize]);
            let conn = Conn {
                number,
                active,
                next_seq: 0,
                outstanding: VecDeque::new(),
                received: 0,
                reconnects_left: self.plan.reconnect,
                replacement: false,
            };
            // A connect that fails, at once or later, comes to on_close.
            let id = io.connect(self.plan.addr, source, conn);
            if let Some(tls) = &self.plan.tls {
                tls.layer_on(io, id);
            }
            self.opening += 1;
            self.open += 1;
            self.ids.push(id);
            if active {
                self.open_active += 1;
                self.active.push(id);
            }
        }
        self.maybe_start(io);
    }

    /// --per-conn: what an active connection that sent `sent` messages
    /// will never send (it failed to connect, or closed early) leaves the
    /// quota, so that the others' last messages still end the run.
    fn give_up_quota(&mut self, sent: u64) {
        if let (Some(k), Some(q)) = (self.plan.per_conn, &mut self.quota_left) {
            *q = q.saturating_sub(k.saturating_sub(sent));
            if *q == 0 {
                self.sending = false;
            }
        }
    }

    /// Opens a connection in place of `c`, closed early, carrying its
    /// sequence and the messages it left unanswered; false if it cannot.
    fn reconnect(&mut self, io: &mut Io<Conn>, old: ConnId, c: &mut Conn, reason: &CloseReason) -> bool {
        // The server's doing, not ours (a mismatch, a timeout of our own).
        let by_server = matches!(
            reason,
            CloseReason::PeerClosed | CloseReason::Reset | CloseReason::PeerVanished | CloseReason::Error(_)
        );
        let to_send = self.sending && self.plan.per_conn.is_none_or(|k| c.next_seq < k);
        let more = to_send || !c.outstanding.is_empty();
        if !(by_server && c.active && c.reconnects_left > 0 && self.started && more) {
            return false;
        }
        let sources = &self.plan.sources;
        let source = (!sources.is_empty()).then(|| sources[(u64::from(c.number) % sources.len() as u64) as usize]);
        let next = Conn {
            number: c.number,
            active: true,
            next_seq: c.next_seq,
            outstanding: c.outstanding.clone(),
            received: 0,
            reconnects_left: c.reconnects_left - 1,
            replacement: true,
        };
        // A connect that fails, at once or later, comes to on_close,
        // which counts what the replacement carried as unanswered.
        let id = io.connect(self.plan.addr, source, next);
        if let Some(tls) = &self.plan.tls {
            tls.layer_on(io, id);
        }
        // The messages it left unanswered go again first (written now,
        // sent once connected, ahead of anything the open loop's schedule
        // stages meanwhile), with the times they were first sent.
        for (seq, _) in std::mem::take(&mut c.outstanding) {
            self.pattern.fill(&mut self.message, c.number, seq);
            let _ = io.write(id, &self.message);
        }
        self.report.reconnects += 1;
        self.opening += 1;
        self.open += 1;
        self.open_active += 1;
        self.ids.push(id);
        // Its turn in the open loop's schedule is the old one's.
        match self.active.iter_mut().find(|a| **a == old) {
            Some(slot) => *slot = id,
            None => self.active.push(id),
        }
        true
    }

    /// A connection is established or has failed: the setup lasts until the last one.
    fn connection_settled(&mut self) {
        if let Some((_, last)) = &mut self.report.setup {
            *last = Instant::now();
        }
    }

    /// A failed connect, counted by errno; `setup`: one of the run's first
    /// connections (a replacement's failure does not stretch the setup).
    fn connect_failed(&mut self, e: &iomux::Error, setup: bool) {
        let kind = errno_name(e);
        self.plan.progress.error(&kind);
        *self.report.connect_errors.entry(kind).or_default() += 1;
        if setup {
            self.connection_settled();
        }
        if self.report.first_error.is_none() {
            self.report.first_error = Some(format!("connect to {}: {}", self.plan.addr, crate::chain(e)));
        }
    }

    /// Once every connection is open (or has failed), starts the load from
    /// a timer due now: outside any connection's callback, so that every
    /// connection's state is at hand.
    fn maybe_start(&mut self, io: &mut Io<Conn>) {
        let all_tried = self.next_active + self.next_idle == self.total();
        if self.start_pending || !all_tried || self.opening > 0 {
            return;
        }
        self.start_pending = true;
        io.set_timer(Instant::now(), START);
    }

    /// Starts the clock and the sending.
    fn start(&mut self, io: &mut Io<Conn>) {
        self.started = true;
        let now = Instant::now();
        if self.plan.warmup.is_zero() {
            self.begin_measuring(now);
        } else {
            io.set_timer(now + self.plan.warmup, WARMUP_END);
        }
        if let Some(d) = self.plan.duration {
            io.set_timer(now + self.plan.warmup + d, END);
        }
        self.sending = self.quota_left != Some(0);
        self.last_progress = now;
        if self.plan.mode == LoadMode::Echo {
            io.set_timer(now + Duration::from_secs(1), WATCHDOG);
        }
        // Only the connections that opened take messages.
        self.active.retain(|&id| io.state(id).is_some());
        if self.active.is_empty() {
            // Idle connections only: hold them for the duration (or until
            // stopped); with nothing to count down, finish now.
            if self.plan.duration.is_none() {
                self.finish(io);
            }
            return;
        }
        if let Some(rate) = self.plan.rate_per_conn {
            let gap_ns = 1e9 / rate / self.active.len() as f64;
            let end = self.plan.duration.map(|d| now + self.plan.warmup + d);
            let tick_ns = self.plan.tick.as_nanos().max(1) as u64;
            self.pacer = Some(Pacer { start: now, gap_ns, tick_ns, next: 0, end });
            return self.pace(io, now);
        }
        for i in 0..self.active.len() {
            let id = self.active[i];
            match self.plan.mode {
                // Its output is empty: on_drained comes next turn and fills it.
                LoadMode::Sink => io.notify_drained(id),
                LoadMode::Pubsub => unreachable!("--mode pubsub runs load/pubsub.rs, not this client"),
                LoadMode::Echo => {
                    if let Some(c) = io.state(id) {
                        if self.stage(c, now) {
                            let _ = io.write(id, &self.message);
                        }
                    }
                }
            }
        }
    }

    fn begin_measuring(&mut self, now: Instant) {
        self.measuring = true;
        self.measure_start = now;
        self.cpu_start = process_cpu();
        // What connecting found and every error stay; the warm-up's echoes go.
        let fresh = Report {
            connected: self.report.connected,
            connect_errors: std::mem::take(&mut self.report.connect_errors),
            first_error: self.report.first_error.take(),
            mismatches: self.report.mismatches,
            unexpected_closes: self.report.unexpected_closes,
            vanished: self.report.vanished,
            resets: self.report.resets,
            reconnects: self.report.reconnects,
            unanswered: self.report.unanswered,
            setup: self.report.setup,
            measure_start: Some(now),
            ..Report::new()
        };
        self.report = fresh;
    }

    /// Puts connection `c`'s next message in `self.message`, stamped `at`
    /// (now, or, open loop, when it was due: latency then includes any
    /// delay in sending), and counts it; false if nothing is to be sent.
    fn stage(&mut self, c: &mut Conn, at: Instant) -> bool {
        if !self.sending {
            return false;
        }
        let echo = self.plan.mode == LoadMode::Echo;
        if echo && self.plan.per_conn.is_some_and(|k| c.next_seq >= k) {
            return false;
        }
        self.pattern.fill(&mut self.message, c.number, c.next_seq);
        if echo {
            c.outstanding.push_back((c.next_seq, at));
            self.in_flight += 1;
        }
        c.next_seq += 1;
        self.report.sent_messages += 1;
        self.report.sent_bytes += self.message.len() as u64;
        if let Some(q) = &mut self.quota_left {
            *q -= 1;
            if *q == 0 {
                self.sending = false;
            }
        }
        true
    }

    /// Sink mode: queues about 64 KiB of messages in one write, then asks
    /// to hear when they are sent.
    fn sink_more(&mut self, io: &mut Io<Conn>, id: ConnId, c: &mut Conn) {
        let per_batch = (SINK_BATCH / self.message.len()).max(1);
        self.batch.clear();
        let now = io.now();
        for _ in 0..per_batch {
            if !self.stage(c, now) {
                break;
            }
            self.batch.extend_from_slice(&self.message);
        }
        if !self.batch.is_empty() {
            let _ = io.write(id, &self.batch);
        }
        if self.sending {
            io.notify_drained(id);
        } else if self.plan.duration.is_none() {
            self.end(io);
        }
    }

    /// Open loop: sends every message due by `now` (the loop writes each
    /// connection's messages of a turn in one send), then wakes at the
    /// next tick that has one.
    fn pace(&mut self, io: &mut Io<Conn>, now: Instant) {
        // Out of self while messages are staged (put back below).
        let Some(mut pacer) = self.pacer.take() else { return };
        let n = self.active.len() as u64;
        while self.sending {
            let due = pacer.due(pacer.next);
            if due > now || pacer.end.is_some_and(|end| due >= end) {
                break;
            }
            let id = self.active[(pacer.next % n) as usize];
            pacer.next += 1;
            // A closed connection's turn passes: it sends no more.
            let Some(c) = io.state(id) else { continue };
            if !self.stage(c, due) {
                continue;
            }
            let _ = io.write(id, &self.message);
        }
        let next = pacer.due(pacer.next);
        self.pacer = Some(pacer);
        if self.sending {
            io.set_timer(next, PACE);
        } else if self.plan.mode == LoadMode::Sink && self.plan.duration.is_none() {
            self.end(io);
        }
    }

    /// Stops sending; finishes when every echo is in (or after the grace).
    fn end(&mut self, io: &mut Io<Conn>) {
        self.sending = false;
        if self.measuring && self.report.measured.is_zero() {
            self.report.measured = self.measure_start.elapsed();
            self.report.measure_end = Some(Instant::now());
        }
        if self.in_flight == 0 {
            self.finish(io);
        } else {
            io.set_timer(Instant::now() + self.plan.grace, GRACE_END);
        }
    }

    fn finish(&mut self, io: &mut Io<Conn>) {
        if self.finishing {
            return;
        }
        self.finishing = true;
        if self.measuring && self.report.measured.is_zero() {
            self.report.measured = self.measure_start.elapsed();
            self.report.measure_end = Some(Instant::now());
        }
        if self.measuring {
            self.report.drained = Some(Instant::now());
        }
        self.report.cpu = self.cpu_start.zip(process_cpu());
        self.report.unanswered += self.in_flight as u64;
        self.in_flight = 0;
        if let Some(recorder) = &mut self.intervals {
            recorder.flush();
            self.report.intervals = std::mem::take(&mut recorder.done);
            self.report.interval_error = recorder.error.take();
        }
        for &id in &self.ids {
            io.close(id);
        }
        io.stop();
    }

    fn mismatch(&mut self, io: &mut Io<Conn>, id: ConnId, c: &mut Conn, what: String) {
        self.report.mismatches += 1;
        self.plan.progress.error("mismatched");
        if self.report.first_error.is_none() {
            self.report.first_error = Some(what);
        }
        // Its messages will never be answered correctly: count them once.
        self.report.unanswered += c.outstanding.len() as u64;
        self.in_flight -= c.outstanding.len();
        c.outstanding.clear();
        io.close(id);
    }
}

impl Handler for Client {
    type Conn = Conn;
    type Message = ();

    fn on_start(&mut self, io: &mut Io<Conn>) {
        match self.plan.connect_rate {
            Some(_) => {
                io.set_timer(Instant::now(), CONNECT_TICK);
            }
            None => {
                let n = self.total();
                self.open_some(io, n);
            }
        }
    }

    /// The load only connects; it never listens (so this is never called).
    fn on_accept(&mut self, _io: &mut Io<Conn>, _conn: ConnId) -> Conn {
        Conn {
            number: u32::MAX,
            active: false,
            next_seq: 0,
            outstanding: VecDeque::new(),
            received: 0,
            reconnects_left: 0,
            replacement: false,
        }
    }

    fn on_connect(&mut self, io: &mut Io<Conn>, id: ConnId, state: &mut Conn) {
        self.opening -= 1;
        if state.replacement {
            // Its carried messages are on their way (written at connect);
            // with none, the closed loop goes on here.
            if !self.finishing && state.outstanding.is_empty() && self.pacer.is_none() && self.stage(state, io.now()) {
                let _ = io.write(id, &self.message);
            }
            return;
        }
        self.report.connected += 1;
        self.connection_settled();
        self.plan.progress.connected.fetch_add(1, Ordering::Relaxed);
        self.maybe_start(io);
    }

    fn on_data(&mut self, io: &mut Io<Conn>, id: ConnId, c: &mut Conn, mut data: &[u8]) -> usize {
        let consumed = data.len();
        let size = self.message.len();
        // The loop's clock, read once per turn as the wait returned: when
        // the echoes of this turn were known to have arrived.
        let now = io.now();
        let mut completed = 0;
        while !data.is_empty() {
            let Some(&(seq, sent_at)) = c.outstanding.front() else {
                let what = format!("connection {}: {} bytes arrived that were never sent", c.number, data.len());
                self.mismatch(io, id, c, what);
                break;
            };
            let n = data.len().min(size - c.received);
            if let Some(bad) = self.pattern.check(&data[..n], c.number, seq, c.received) {
                let what = format!("connection {}: byte {bad} of message {seq} differs from what was sent", c.number);
                self.mismatch(io, id, c, what);
                break;
            }
            c.received += n;
            data = &data[n..];
            if c.received == size {
                c.received = 0;
                c.outstanding.pop_front();
                self.in_flight -= 1;
                completed += 1;
                if self.measuring {
                    let ns = now.saturating_duration_since(sent_at).as_nanos().min(u64::MAX as u128) as u64;
                    self.report.latency.saturating_record(ns.max(1));
                    if let Some(recorder) = &mut self.intervals {
                        recorder.record(now, ns.max(1));
                    }
                    self.report.echoes += 1;
                    self.report.echo_bytes += size as u64;
                }
                if self.pacer.is_none() && self.stage(c, now) {
                    let _ = io.write(id, &self.message);
                }
            }
        }
        if completed > 0 {
            self.last_progress = now;
            self.plan.progress.echoes.fetch_add(completed, Ordering::Relaxed);
        }
        if !self.sending && !self.finishing && self.started && self.in_flight == 0 {
            self.end(io);
        }
        consumed
    }

    fn on_drained(&mut self, io: &mut Io<Conn>, id: ConnId, c: &mut Conn) {
        if self.plan.mode == LoadMode::Sink && self.pacer.is_none() {
            self.sink_more(io, id, c);
        }
    }

    fn on_close(&mut self, io: &mut Io<Conn>, id: ConnId, mut c: Conn, reason: &CloseReason) {
        self.open -= 1;
        if c.active {
            self.open_active -= 1;
        }
        let early = !self.finishing && !matches!(reason, CloseReason::ConnectFailed(_) | CloseReason::Shutdown);
        if early {
            // Counted as closed early whether or not it is replaced.
            self.report.unexpected_closes += 1;
            self.report.vanished += u64::from(matches!(reason, CloseReason::PeerVanished));
            self.report.resets += u64::from(matches!(reason, CloseReason::Reset));
            self.plan.progress.error("closed early");
            if self.report.first_error.is_none() {
                // A TLS refusal may be ours (the server's certificate), not the server's.
                let by = if matches!(reason, CloseReason::Layer(_)) { "ended" } else { "closed by the server" };
                // Idle connections have no number of their own.
                let who = if c.active { format!("connection {}", c.number) } else { "an idle connection".into() };
                self.report.first_error = Some(format!("{who} {by}: {reason}"));
            }
        }
        // A replacement takes its quota and its unanswered messages along.
        let replaced = early && self.reconnect(io, id, &mut c, reason);
        if c.active && !self.finishing && !replaced {
            self.give_up_quota(c.next_seq);
        }
        match reason {
            _ if replaced => {}
            CloseReason::ConnectFailed(e) => {
                self.opening -= 1;
                // A replacement that failed to connect: what it carried is
                // lost (once finishing, `finish` counted it already).
                if !self.finishing {
                    self.in_flight -= c.outstanding.len();
                    self.report.unanswered += c.outstanding.len() as u64;
                }
                self.connect_failed(e, !c.replacement);
                self.maybe_start(io);
                let no_active_left = self.plan.conns > 0 && self.open_active == 0;
                if self.started && (no_active_left || (!self.sending && self.in_flight == 0)) {
                    self.end(io);
                }
            }
            _ if self.finishing => {}
            CloseReason::Shutdown => {
                self.report.unanswered += c.outstanding.len() as u64;
                self.in_flight -= c.outstanding.len();
            }
            _ => {
                self.in_flight -= c.outstanding.len();
                self.report.unanswered += c.outstanding.len() as u64;
                // No active connection left (whatever idle ones remain):
                // nothing more will be sent or answered. A run of idle
                // connections alone goes on while any is open (each close
                // is counted). With messages still awaited elsewhere, the
                // last echo ends the run (on_data).
                let no_active_left = self.plan.conns > 0 && self.open_active == 0;
                if self.started && (no_active_left || (!self.sending && self.in_flight == 0)) {
                    self.end(io);
                }
            }
        }
        if self.open == 0 && self.started && !self.finishing {
            self.finish(io);
        }
    }

    fn on_timer(&mut self, io: &mut Io<Conn>, _timer: TimerId, token: u64) {
        match token {
            CONNECT_TICK => {
                // On a schedule from the first connect: connection k is due
                // k / rate seconds in (whatever the rate: a fixed number per
                // 1 ms tick rounded rates under 1,000/s up to 1,000/s).
                let Some(rate) = self.plan.connect_rate else { return };
                let now = Instant::now();
                let since = *self.connecting_since.get_or_insert(now);
                let due = (now.duration_since(since).as_secs_f64() * rate) as usize + 1;
                self.open_some(io, due.saturating_sub(self.next_active + self.next_idle));
                let tried = self.next_active + self.next_idle;
                if tried < self.total() {
                    let next = since + Duration::from_secs_f64(tried as f64 / rate);
                    io.set_timer(next.max(now + Duration::from_micros(100)), CONNECT_TICK);
                }
            }
            WARMUP_END => self.begin_measuring(Instant::now()),
            END => self.end(io),
            GRACE_END => self.finish(io),
            WATCHDOG if !self.finishing => {
                let now = Instant::now();
                if self.in_flight > 0 && now.duration_since(self.last_progress) >= self.plan.stall_timeout {
                    if self.report.first_error.is_none() {
                        self.report.first_error = Some(format!(
                            "no echo arrived for {:.1} s with {} messages awaited (--timeout)",
                            self.plan.stall_timeout.as_secs_f64(),
                            self.in_flight
                        ));
                    }
                    self.plan.progress.error("stalled");
                    return self.finish(io);
                }
                io.set_timer(now + Duration::from_secs(1), WATCHDOG);
            }
            PACE => self.pace(io, io.now()),
            START => self.start(io),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_keeps_the_rate_on_the_tick_grid() {
        let start = Instant::now();
        // 30 us between messages, on a 100 us grid.
        let p = Pacer { start, gap_ns: 30_000.0, tick_ns: 100_000, next: 0, end: None };
        let at = |k| p.due(k).duration_since(start).as_micros();
        assert_eq!([at(0), at(1), at(3), at(4), at(7), at(10)], [0, 100, 100, 200, 300, 300]);
        // Over any whole number of ticks, the rate is the rate asked for.
        assert_eq!((0..1000).filter(|&k| at(k) <= 3_000).count(), 101);
        // Without a grid (1 ns), each message is due at its own time.
        let exact = Pacer { start, gap_ns: 30_000.0, tick_ns: 1, next: 0, end: None };
        assert_eq!(exact.due(7).duration_since(start).as_nanos(), 210_000);
    }
}
