//! One load-generating loop: a [`Handler`] that opens its share of the
//! connections, drives them closed- or open-loop, checks every echoed
//! byte, and records latency in an HDR histogram.

use super::hdrlog::{Interval, IntervalRecorder, UnixClock};
use super::pattern::Pattern;
use super::watch::Counters;
use hdrhistogram::Histogram;
use iomux::runtime::{CloseReason, ConnId, Handler, Io, TimerId};
use std::collections::{BTreeMap, HashMap, VecDeque};
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
    }
}

impl Default for Report {
    fn default() -> Report {
        Report::new()
    }
}

struct Conn {
    number: u32,
    active: bool,
    next_seq: u64,
    /// Messages sent and not yet fully echoed: (seq, when it was sent or,
    /// open loop, scheduled).
    outstanding: VecDeque<(u64, Instant)>,
    /// Bytes of the oldest outstanding message already echoed.
    received: usize,
    next_due: Instant,
}

const CONNECT_TICK: u64 = 1;
const WARMUP_END: u64 = 2;
const END: u64 = 3;
const GRACE_END: u64 = 4;
const WATCHDOG: u64 = 5;
/// Open-loop send timers carry the connection id with this bit set.
const SEND_TIMER: u64 = 1 << 63;
const SINK_BATCH: usize = 64 << 10;

pub struct Client {
    plan: Plan,
    conns: HashMap<u64, Conn>,
    next_active: usize,
    next_idle: usize,
    opening: usize,
    /// --connect-rate: when the first connect was due.
    connecting_since: Option<Instant>,
    started: bool,
    sending: bool,
    finishing: bool,
    measuring: bool,
    measure_start: Instant,
    quota_left: Option<u64>,
    /// Messages sent and not yet fully echoed, over all connections.
    in_flight: usize,
    last_progress: Instant,
    message: Vec<u8>,
    batch: Vec<u8>,
    pattern: Pattern,
    intervals: Option<IntervalRecorder>,
    pub report: Report,
}

fn errno_name(e: &std::io::Error) -> String {
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
            conns: HashMap::new(),
            next_active: 0,
            next_idle: 0,
            opening: 0,
            connecting_since: None,
            started: false,
            sending: false,
            finishing: false,
            measuring: false,
            measure_start: Instant::now(),
            quota_left,
            in_flight: 0,
            last_progress: Instant::now(),
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
    fn open_some(&mut self, io: &mut Io<()>, n: usize) {
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
            match io.connect(self.plan.addr, source, ()) {
                Ok(id) => {
                    self.opening += 1;
                    let conn = Conn {
                        number,
                        active,
                        next_seq: 0,
                        outstanding: VecDeque::new(),
                        received: 0,
                        next_due: io.now(),
                    };
                    self.conns.insert(id.as_u64(), conn);
                }
                Err(e) => self.connect_failed(&e.into()),
            }
        }
        self.maybe_start(io);
    }

    /// A connection is established or has failed: the setup lasts until the last one.
    fn connection_settled(&mut self) {
        if let Some((_, last)) = &mut self.report.setup {
            *last = Instant::now();
        }
    }

    fn connect_failed(&mut self, e: &std::io::Error) {
        let kind = errno_name(e);
        self.plan.progress.error(&kind);
        *self.report.connect_errors.entry(kind).or_default() += 1;
        self.connection_settled();
        if self.report.first_error.is_none() {
            self.report.first_error = Some(format!("connect to {}: {e}", self.plan.addr));
        }
    }

    /// Starts the clock once every connection is open (or has failed).
    fn maybe_start(&mut self, io: &mut Io<()>) {
        let all_tried = self.next_active + self.next_idle == self.total();
        if self.started || !all_tried || self.opening > 0 {
            return;
        }
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
        let active: Vec<u64> = self.conns.iter().filter(|(_, c)| c.active).map(|(k, _)| *k).collect();
        if active.is_empty() {
            // Idle connections only: hold them for the duration (or until
            // stopped); with nothing to count down, finish now.
            if self.plan.duration.is_none() {
                self.finish(io);
            }
            return;
        }
        let count = active.len();
        for (i, key) in active.into_iter().enumerate() {
            let id = ConnId::from_u64(key);
            match (self.plan.mode, self.plan.rate_per_conn) {
                (LoadMode::Sink, None) => self.sink_more(io, id),
                (_, Some(rate)) => {
                    // Stagger the connections over one interval.
                    let phase = Duration::from_secs_f64(i as f64 / count as f64 / rate);
                    if let Some(c) = self.conns.get_mut(&key) {
                        c.next_due = now + phase;
                        io.set_timer(c.next_due, SEND_TIMER | key);
                    }
                }
                (LoadMode::Echo, None) => self.send(io, id, now),
            }
        }
    }

    fn begin_measuring(&mut self, now: Instant) {
        self.measuring = true;
        self.measure_start = now;
        // What connecting found stays; the warm-up's echoes go.
        let fresh = Report {
            connected: self.report.connected,
            connect_errors: std::mem::take(&mut self.report.connect_errors),
            first_error: self.report.first_error.take(),
            setup: self.report.setup,
            measure_start: Some(now),
            ..Report::new()
        };
        self.report = fresh;
    }

    /// Sends the connection's next message, stamped `at` (now, or, open
    /// loop, when it was due: latency then includes any delay in sending).
    fn send(&mut self, io: &mut Io<()>, id: ConnId, at: Instant) {
        if !self.sending {
            return;
        }
        let Some(c) = self.conns.get_mut(&id.as_u64()) else { return };
        if self.plan.per_conn.is_some_and(|k| c.next_seq >= k) {
            return;
        }
        self.pattern.fill(&mut self.message, c.number, c.next_seq);
        c.outstanding.push_back((c.next_seq, at));
        c.next_seq += 1;
        self.in_flight += 1;
        io.write(id, &self.message);
        self.report.sent_messages += 1;
        self.report.sent_bytes += self.message.len() as u64;
        if let Some(q) = &mut self.quota_left {
            *q -= 1;
            if *q == 0 {
                self.sending = false;
            }
        }
    }

    /// Appends connection `key`'s next message to the sink batch and counts
    /// it against the quota; false if the connection is gone.
    fn batch_next(&mut self, key: u64) -> bool {
        let Some(c) = self.conns.get_mut(&key) else { return false };
        self.pattern.fill(&mut self.message, c.number, c.next_seq);
        c.next_seq += 1;
        self.batch.extend_from_slice(&self.message);
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
    fn sink_more(&mut self, io: &mut Io<()>, id: ConnId) {
        let per_batch = (SINK_BATCH / self.message.len()).max(1);
        self.batch.clear();
        for _ in 0..per_batch {
            if !self.sending || !self.batch_next(id.as_u64()) {
                break;
            }
        }
        if !self.batch.is_empty() {
            io.write(id, &self.batch);
        }
        if self.sending {
            io.notify_drained(id);
        } else if self.plan.duration.is_none() {
            self.end(io);
        }
    }

    /// Paced sink: every message due by `now` for connection `key`, in one write.
    fn sink_due(&mut self, io: &mut Io<()>, key: u64, interval: Duration, now: Instant) {
        self.batch.clear();
        while self.sending {
            let Some(c) = self.conns.get_mut(&key) else { return };
            if c.next_due > now {
                break;
            }
            c.next_due += interval;
            self.batch_next(key);
        }
        let id = ConnId::from_u64(key);
        if !self.batch.is_empty() {
            io.write(id, &self.batch);
        }
        match (self.sending, self.conns.get(&key)) {
            (true, Some(c)) => {
                io.set_timer(c.next_due, SEND_TIMER | key);
            }
            _ if self.plan.duration.is_none() => self.end(io),
            _ => {}
        }
    }

    /// Stops sending; finishes when every echo is in (or after the grace).
    fn end(&mut self, io: &mut Io<()>) {
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

    fn finish(&mut self, io: &mut Io<()>) {
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
        self.report.unanswered += self.in_flight as u64;
        self.in_flight = 0;
        if let Some(recorder) = &mut self.intervals {
            recorder.flush();
            self.report.intervals = std::mem::take(&mut recorder.done);
            self.report.interval_error = recorder.error.take();
        }
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for key in ids {
            io.close(ConnId::from_u64(key));
        }
        io.stop();
    }

    fn mismatch(&mut self, io: &mut Io<()>, id: ConnId, what: String) {
        self.report.mismatches += 1;
        self.plan.progress.error("mismatched");
        if self.report.first_error.is_none() {
            self.report.first_error = Some(what);
        }
        if let Some(c) = self.conns.get_mut(&id.as_u64()) {
            // Its messages will never be answered correctly: count them once.
            self.report.unanswered += c.outstanding.len() as u64;
            self.in_flight -= c.outstanding.len();
            c.outstanding.clear();
        }
        io.close(id);
    }
}

impl Handler for Client {
    type Conn = ();

    fn on_start(&mut self, io: &mut Io<()>) {
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

    /// The load only connects; it never listens.
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_connect(&mut self, io: &mut Io<()>, _conn: ConnId, _state: &mut ()) {
        self.opening -= 1;
        self.report.connected += 1;
        self.connection_settled();
        self.plan.progress.connected.fetch_add(1, Ordering::Relaxed);
        self.maybe_start(io);
    }

    fn on_data(&mut self, io: &mut Io<()>, id: ConnId, _state: &mut (), mut data: &[u8]) -> usize {
        let consumed = data.len();
        let size = self.message.len();
        let now = Instant::now();
        let mut completed = 0;
        while !data.is_empty() {
            let Some(c) = self.conns.get_mut(&id.as_u64()) else { break };
            let Some(&(seq, sent_at)) = c.outstanding.front() else {
                let what = format!("connection {}: {} bytes arrived that were never sent", c.number, data.len());
                self.mismatch(io, id, what);
                break;
            };
            let n = data.len().min(size - c.received);
            if let Some(bad) = self.pattern.check(&data[..n], c.number, seq, c.received) {
                let what = format!("connection {}: byte {bad} of message {seq} differs from what was sent", c.number);
                self.mismatch(io, id, what);
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
                if self.plan.rate_per_conn.is_none() {
                    self.send(io, id, now);
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

    fn on_drained(&mut self, io: &mut Io<()>, id: ConnId, _state: &mut ()) {
        if self.plan.mode == LoadMode::Sink {
            self.sink_more(io, id);
        }
    }

    fn on_close(&mut self, io: &mut Io<()>, id: ConnId, _state: (), reason: &CloseReason) {
        let Some(c) = self.conns.remove(&id.as_u64()) else { return };
        match reason {
            CloseReason::ConnectFailed(e) => {
                self.opening -= 1;
                self.connect_failed(e);
                self.maybe_start(io);
            }
            _ if self.finishing => {}
            CloseReason::Shutdown => {
                self.report.unanswered += c.outstanding.len() as u64;
                self.in_flight -= c.outstanding.len();
            }
            _ => {
                self.in_flight -= c.outstanding.len();
                self.report.unexpected_closes += 1;
                self.report.unanswered += c.outstanding.len() as u64;
                self.plan.progress.error("closed early");
                if self.report.first_error.is_none() {
                    self.report.first_error = Some(format!("connection {} closed by the server: {reason:?}", c.number));
                }
                if self.started && !self.conns.values().any(|c| c.active) {
                    // No active connection left: nothing more will be sent
                    // or answered, whatever idle ones remain.
                    self.end(io);
                }
            }
        }
        if self.conns.is_empty() && self.started && !self.finishing {
            self.finish(io);
        }
    }

    fn on_timer(&mut self, io: &mut Io<()>, _timer: TimerId, token: u64) {
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
            t if t & SEND_TIMER != 0 => {
                let key = t & !SEND_TIMER;
                let Some(rate) = self.plan.rate_per_conn else { return };
                let interval = Duration::from_secs_f64(1.0 / rate);
                let now = Instant::now();
                if self.plan.mode == LoadMode::Sink {
                    return self.sink_due(io, key, interval, now);
                }
                // Send every message that is due, each stamped with the
                // time it was due: a stalled server is charged for the stall.
                while self.sending {
                    let Some(c) = self.conns.get_mut(&key) else { return };
                    if c.next_due > now {
                        break;
                    }
                    let due = c.next_due;
                    c.next_due += interval;
                    self.send(io, ConnId::from_u64(key), due);
                }
                if let (true, Some(c)) = (self.sending, self.conns.get(&key)) {
                    io.set_timer(c.next_due, t);
                }
            }
            _ => {}
        }
    }
}
