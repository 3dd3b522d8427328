//! Pub/sub for `iomux serve --proto resp`, across every loop, as redis
//! does it on one thread:
//! - one registry of who subscribes to what, counted per loop, behind a
//!   lock (a command holds it for a map lookup), so PUBLISH answers how
//!   many receive a message across all loops, as redis does;
//! - each loop delivers to its own subscribers: a message for another
//!   loop's goes there by the runtime's messages; a burst of pushes to the
//!   same subscribers is built once, in one buffer that every one of them
//!   shares (`Io::write_bytes`);
//! - inboxes are bounded: a delivery refused by a full one waits here, in
//!   order, and its publisher is no longer read until the inbox has room
//!   (`Sender::try_send`, `Io::when_room`), so a burst of publishes holds
//!   its publishers back instead of queueing without bound;
//! - a subscriber that reads but lags (more than `LAG_MARK` queued) holds
//!   the publishers back, this loop's directly and other loops' through
//!   this loop's inbox (`Io::hold_messages`), until it has caught up to
//!   half of that: a fast publisher cannot outrun subscribers that read,
//!   whatever the machine schedules first;
//! - a subscriber that stops reading (no progress for `STALL`) holds
//!   nobody back, and is dropped as redis's `client-output-buffer-limit
//!   pubsub 32mb 8mb 60` drops it: at once past the hard limit, or after
//!   the soft limit held for its seconds.

use iomux::runtime::{Bytes, ConnId, Io, Sender};
use iomux_resp::pubsub::{glob_match, message, pmessage};
use iomux_resp::{Broker, Subscriptions};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Deliveries a loop's inbox holds before publishers on other loops wait.
pub const INBOX_CAPACITY: usize = 4096;
/// Queued bytes past which a subscriber that reads holds publishers back.
const LAG_MARK: usize = 1 << 20;
/// A lagging subscriber that drains nothing for this long is stalled: it
/// holds nobody back, and the output limits decide its fate.
const STALL: Duration = Duration::from_millis(50);

/// redis's `client-output-buffer-limit pubsub HARD SOFT SECONDS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub hard: usize,
    pub soft: usize,
    pub soft_for: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { hard: 32 << 20, soft: 8 << 20, soft_for: Duration::from_secs(60) }
    }
}

impl Limits {
    /// `HARD,SOFT,SECONDS` with redis's units (`32mb,8mb,60`); 0 turns a
    /// limit off, as in redis.
    pub fn parse(s: &str) -> Result<Limits, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [hard, soft, secs] = parts[..] else {
            return Err(format!("{s:?}: not HARD,SOFT,SECONDS (redis's 32mb,8mb,60)"));
        };
        let secs: u64 = secs.parse().map_err(|_| format!("{secs:?}: not a number of seconds"))?;
        Ok(Limits { hard: bytes(hard)?, soft: bytes(soft)?, soft_for: Duration::from_secs(secs) })
    }
}

/// A size with redis's units: b, k, kb, m, mb, g, gb (k = 1000, kb = 1024).
fn bytes(s: &str) -> Result<usize, String> {
    let lower = s.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &lower[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        other => return Err(format!("{s:?}: unknown unit {other:?} (b, k, kb, m, mb, g, gb)")),
    };
    let n: usize = digits.parse().map_err(|_| format!("{s:?}: not a size"))?;
    n.checked_mul(unit).ok_or_else(|| format!("{s:?}: too large"))
}

/// Subscriptions counted per loop, for every loop.
#[derive(Default)]
pub struct Registry {
    channels: HashMap<Bytes, Vec<u32>>,
    patterns: HashMap<Bytes, Vec<u32>>,
}

impl Registry {
    pub fn shared() -> Arc<Mutex<Registry>> {
        Arc::new(Mutex::new(Registry::default()))
    }
}

/// A published message, for another loop's subscribers (whose pushes
/// that loop builds).
#[derive(Clone, Debug)]
pub struct Delivery {
    channel: Bytes,
    payload: Bytes,
}

/// Pushes waiting to be queued, in publish order: a run of pushes to the
/// same subscribers (a publisher's burst on one channel) is joined in one
/// buffer as it is built, which every one of them then shares, as the
/// fan-out floor sends it: no copy, allocation or reference per message
/// and subscriber, and a subscriber that keeps up sends it by one plain
/// send.
#[derive(Default)]
struct Outgoing {
    runs: Vec<Run>,
    /// Every run's subscribers, one after the other.
    to: Vec<ConnId>,
}

struct Run {
    pushes: Vec<u8>,
    count: u64,
    /// Its subscribers: a range of `Outgoing::to`.
    to: Range<usize>,
}

impl Outgoing {
    /// The buffer a push to `subscribers` is appended to: the last run's
    /// if it goes to the same ones, else a new run's.
    fn run_to(&mut self, subscribers: &[ConnId]) -> &mut Vec<u8> {
        let same = self.runs.last().is_some_and(|r| self.to[r.to.clone()] == *subscribers);
        if !same {
            let start = self.to.len();
            self.to.extend_from_slice(subscribers);
            self.runs.push(Run { pushes: Vec::new(), count: 0, to: start..self.to.len() });
        }
        let last = self.runs.len() - 1; // one was found or pushed above
        self.runs[last].count += 1;
        &mut self.runs[last].pushes
    }
}

/// What pub/sub did, all loops' together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PubsubCounts {
    pub published: u64,
    /// Pushes queued to subscribers.
    pub delivered: u64,
    /// Subscribers dropped by the output limits.
    pub slow_dropped: u64,
    /// Deliveries that waited for room in another loop's inbox.
    pub held: u64,
}

impl PubsubCounts {
    pub fn add(&mut self, o: &PubsubCounts) {
        self.published += o.published;
        self.delivered += o.delivered;
        self.slow_dropped += o.slow_dropped;
        self.held += o.held;
    }
}

/// A subscriber's state beside its subscriptions.
#[derive(Default)]
pub struct Subscriber {
    pub subs: Subscriptions,
    /// Since when its output has been over the soft limit.
    over_soft_since: Option<Instant>,
}

impl Subscriber {
    pub fn new(subs: Subscriptions) -> Box<Subscriber> {
        Box::new(Subscriber { subs, over_soft_since: None })
    }
}

/// A RESP connection's state: none until it first subscribes (a plain
/// client costs one pointer).
pub type RespConn = Option<Box<Subscriber>>;

/// One loop's pub/sub.
pub struct Hub {
    loop_index: usize,
    registry: Arc<Mutex<Registry>>,
    senders: Vec<Sender<Delivery>>,
    limits: Limits,
    channels: HashMap<Bytes, Vec<ConnId>>,
    patterns: Vec<(Bytes, Vec<ConnId>)>,
    /// Deliveries for each loop refused by its full inbox, in order.
    waiting: Vec<VecDeque<Delivery>>,
    /// Publishers not read until `waiting` empties.
    held_back: Vec<ConnId>,
    /// Pushes for this loop's subscribers, chosen when published and
    /// queued after the feed (which holds the publisher's output).
    outgoing: Outgoing,
    /// The current feed published something: its connection is a
    /// publisher, held back with the others when they must wait.
    published: bool,
    /// Subscribers over LAG_MARK that read: their queued bytes at the last
    /// look. Publishers wait while any is here.
    lagging: Vec<(ConnId, usize)>,
    /// Subscribers that stopped reading while lagging: not waited for
    /// until they drain to half of LAG_MARK.
    stalled: Vec<ConnId>,
    /// The timer that looks at the lagging ones again.
    stall_timer: Option<iomux::runtime::TimerId>,
    pub counts: PubsubCounts,
}

impl Hub {
    pub fn new(
        loop_index: usize,
        registry: Arc<Mutex<Registry>>,
        senders: Vec<Sender<Delivery>>,
        limits: Limits,
    ) -> Hub {
        let loops = senders.len();
        Hub {
            loop_index,
            registry,
            senders,
            limits,
            channels: HashMap::new(),
            patterns: Vec::new(),
            waiting: vec![VecDeque::new(); loops],
            held_back: Vec::new(),
            outgoing: Outgoing::default(),
            published: false,
            lagging: Vec::new(),
            stalled: Vec::new(),
            stall_timer: None,
            counts: PubsubCounts::default(),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // A panic elsewhere left whole updates behind (each is one map change).
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The broker one connection's commands run against.
    pub fn broker(&mut self, conn: ConnId) -> ConnBroker<'_> {
        ConnBroker { hub: self, conn }
    }

    /// After a feed: this loop's deliveries go out, and a publisher whose
    /// deliveries wait for room is no longer read.
    pub fn after_feed(&mut self, io: &mut Io<RespConn>, conn: ConnId) {
        // Most feeds published nothing, and nothing waits for room: then
        // there is nothing below to do.
        if !self.published && self.outgoing.runs.is_empty() && self.waiting.iter().all(VecDeque::is_empty) {
            return;
        }
        self.push_all(io);
        let waits_room = self.waiting.iter().any(|w| !w.is_empty());
        let publisher = std::mem::take(&mut self.published);
        if publisher && (waits_room || !self.lagging.is_empty()) && !self.held_back.contains(&conn) {
            io.pause_reading(conn);
            self.held_back.push(conn);
        }
        if waits_room {
            for (l, waiting) in self.waiting.iter().enumerate() {
                if !waiting.is_empty() {
                    io.when_room(&self.senders[l]);
                }
            }
        }
    }

    /// Messages are taken again once nobody lags (another loop may wait
    /// for room here: a loop waiting for this one must never wait on it);
    /// publishers go on once, too, nothing waits for room elsewhere.
    fn maybe_resume(&mut self, io: &mut Io<RespConn>) {
        if !self.lagging.is_empty() {
            return;
        }
        io.release_messages();
        if self.waiting.iter().any(|w| !w.is_empty()) {
            return;
        }
        for conn in std::mem::take(&mut self.held_back) {
            io.resume_reading(conn);
        }
    }

    /// A subscriber's output fell to half of LAG_MARK (`Io::notify_below`).
    pub fn drained(&mut self, io: &mut Io<RespConn>, conn: ConnId) {
        self.lagging.retain(|&(c, _)| c != conn);
        self.stalled.retain(|&c| c != conn);
        self.maybe_resume(io);
    }

    /// The stall timer: a lagging subscriber that drained nothing since the
    /// last look stops holding publishers back.
    pub fn check_stalls(&mut self, io: &mut Io<RespConn>) {
        self.stall_timer = None;
        let mut still = Vec::new();
        for (conn, before) in std::mem::take(&mut self.lagging) {
            let now = io.buffered(conn);
            if now == 0 {
                continue; // closed, or caught up
            }
            if now < before {
                still.push((conn, now)); // it reads
            } else {
                self.stalled.push(conn); // no progress: it holds nobody back
            }
        }
        self.lagging = still;
        if !self.lagging.is_empty() {
            self.stall_timer = Some(io.set_timer(io.now() + STALL, 0));
        }
        self.maybe_resume(io);
    }

    /// After pushes to `conn`: past LAG_MARK, a subscriber that reads holds
    /// the publishers back (this loop's messages too) until it catches up.
    fn note_lag(&mut self, io: &mut Io<RespConn>, conn: ConnId) {
        let queued = io.buffered(conn);
        if queued <= LAG_MARK || self.stalled.contains(&conn) || self.lagging.iter().any(|&(c, _)| c == conn) {
            return;
        }
        self.lagging.push((conn, queued));
        io.notify_below(conn, LAG_MARK / 2);
        io.hold_messages();
        if self.stall_timer.is_none() {
            self.stall_timer = Some(io.set_timer(io.now() + STALL, 0));
        }
    }

    /// A delivery from another loop.
    pub fn delivered(&mut self, io: &mut Io<RespConn>, delivery: Delivery) {
        self.deliver(io, &delivery);
    }

    /// Loop `target`'s inbox has room: what waited for it goes, and once
    /// nothing waits, the publishers held back are read again.
    pub fn room(&mut self, io: &mut Io<RespConn>, target: usize) {
        while let Some(d) = self.waiting[target].pop_front() {
            if let Err(refused) = self.senders[target].try_send(d) {
                match refused {
                    iomux::runtime::TrySendError::Full(d) => {
                        self.waiting[target].push_front(d);
                        io.when_room(&self.senders[target]);
                        return;
                    }
                    iomux::runtime::TrySendError::Ended(_) => self.waiting[target].clear(),
                }
            }
        }
        self.maybe_resume(io);
    }

    /// Queues `delivery`'s pushes to this loop's subscribers as they are now.
    fn deliver(&mut self, io: &mut Io<RespConn>, d: &Delivery) {
        self.choose(&d.channel, &d.payload);
        self.push_all(io);
    }

    /// Builds a message's pushes for this loop's subscribers of its
    /// channel and of every pattern that matches it, as they are now (one
    /// that subscribes later in the same feed does not get it, as in
    /// redis).
    fn choose(&mut self, channel: &[u8], payload: &[u8]) {
        if let Some(subscribers) = self.channels.get(channel) {
            message(self.outgoing.run_to(subscribers), channel, payload);
        }
        for (pattern, subscribers) in &self.patterns {
            if glob_match(pattern, channel) {
                pmessage(self.outgoing.run_to(subscribers), pattern, channel, payload);
            }
        }
    }

    /// Queues the pushes built: each run's buffer shared by its subscribers.
    fn push_all(&mut self, io: &mut Io<RespConn>) {
        let Outgoing { runs, to } = std::mem::take(&mut self.outgoing);
        for run in runs {
            let pushes = Bytes::from(run.pushes);
            for &conn in &to[run.to] {
                if io.write_bytes(conn, pushes.clone()) {
                    self.counts.delivered += run.count;
                    self.enforce_limits(io, conn);
                    self.note_lag(io, conn);
                }
            }
        }
        // Its subscriber list's room stays for the next feed.
        self.outgoing.to = to;
        self.outgoing.to.clear();
    }

    /// redis's output limits for a subscriber, after a push to it: over the
    /// hard limit, or over the soft one for its seconds, its output is
    /// dropped and it is closed at once (reset), as redis frees it.
    fn enforce_limits(&mut self, io: &mut Io<RespConn>, conn: ConnId) {
        let (queued, now, limits) = (io.buffered(conn), io.now(), self.limits);
        let over_soft = limits.soft > 0 && queued > limits.soft;
        let over_hard = limits.hard > 0 && queued > limits.hard;
        let Some(Some(sub)) = io.state(conn) else { return };
        if !over_soft {
            sub.over_soft_since = None;
        }
        let since = over_soft.then(|| *sub.over_soft_since.get_or_insert(now));
        if over_hard || since.is_some_and(|t| now.saturating_duration_since(t) >= limits.soft_for) {
            io.abort(conn);
            self.counts.slow_dropped += 1;
        }
    }

    /// The connection closed: its subscriptions go.
    pub fn closed(&mut self, conn: ConnId, subs: &Subscriptions) {
        for c in subs.channels() {
            self.subscription(conn, c, false, false);
        }
        for p in subs.patterns() {
            self.subscription(conn, p, true, false);
        }
        self.forget(conn);
    }

    /// A connection closed: it is neither held back nor waited for.
    pub fn forget(&mut self, conn: ConnId) {
        self.held_back.retain(|&c| c != conn);
        self.lagging.retain(|&(c, _)| c != conn);
        self.stalled.retain(|&c| c != conn);
    }

    fn subscription(&mut self, conn: ConnId, name: &Bytes, pattern: bool, on: bool) {
        // This loop's list of subscribers.
        let local = if pattern {
            match self.patterns.iter().position(|(p, _)| p == name) {
                Some(at) => &mut self.patterns[at].1,
                None => {
                    self.patterns.push((name.clone(), Vec::new()));
                    &mut self.patterns.last_mut().expect("just pushed").1
                }
            }
        } else {
            self.channels.entry(name.clone()).or_default()
        };
        if on {
            local.push(conn);
        } else {
            local.retain(|&c| c != conn);
        }
        let empty = local.is_empty();
        if empty {
            if pattern {
                self.patterns.retain(|(p, _)| p != name);
            } else {
                self.channels.remove(name);
            }
        }
        // Every loop's counts.
        let (loops, me) = (self.senders.len(), self.loop_index);
        let mut registry = self.registry();
        let map = if pattern { &mut registry.patterns } else { &mut registry.channels };
        let counts = map.entry(name.clone()).or_insert_with(|| vec![0; loops]);
        if on {
            counts[me] += 1;
        } else {
            counts[me] = counts[me].saturating_sub(1);
        }
        if counts.iter().all(|&n| n == 0) {
            map.remove(name);
        }
    }

    fn publish(&mut self, channel: &[u8], payload: &[u8]) -> i64 {
        self.counts.published += 1;
        self.published = true;
        let (mut receivers, mut loops) = (0i64, vec![false; self.senders.len()]);
        {
            let registry = self.registry();
            if let Some(counts) = registry.channels.get(channel) {
                for (l, &n) in counts.iter().enumerate() {
                    receivers += i64::from(n);
                    loops[l] |= n > 0;
                }
            }
            for (pattern, counts) in &registry.patterns {
                if glob_match(pattern, channel) {
                    for (l, &n) in counts.iter().enumerate() {
                        receivers += i64::from(n);
                        loops[l] |= n > 0;
                    }
                }
            }
        }
        if receivers == 0 {
            return 0;
        }
        // Built once, for the other loops that want it.
        let mut delivery: Option<Delivery> = None;
        for (l, wanted) in loops.into_iter().enumerate() {
            if !wanted {
                continue;
            }
            if l == self.loop_index {
                self.choose(channel, payload);
                continue;
            }
            let d = delivery
                .get_or_insert_with(|| Delivery {
                    channel: Bytes::copy_from_slice(channel),
                    payload: Bytes::copy_from_slice(payload),
                })
                .clone();
            if !self.waiting[l].is_empty() {
                self.waiting[l].push_back(d); // behind those waiting: in order
                self.counts.held += 1;
            } else if let Err(iomux::runtime::TrySendError::Full(d)) = self.senders[l].try_send(d) {
                self.waiting[l].push_back(d);
                self.counts.held += 1;
            }
        }
        receivers
    }
}

/// The broker of one connection's feed.
pub struct ConnBroker<'h> {
    hub: &'h mut Hub,
    conn: ConnId,
}

impl Broker for ConnBroker<'_> {
    fn subscribed(&mut self, name: &Bytes, pattern: bool, on: bool) {
        self.hub.subscription(self.conn, name, pattern, on);
    }

    fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        self.hub.publish(channel, message)
    }

    fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let registry = self.hub.registry();
        let mut channels: Vec<Bytes> =
            registry.channels.keys().filter(|c| pattern.is_none_or(|p| glob_match(p, c))).cloned().collect();
        channels.sort();
        channels
    }

    fn numsub(&self, channel: &[u8]) -> i64 {
        self.hub.registry().channels.get(channel).map_or(0, |counts| counts.iter().map(|&n| i64::from(n)).sum())
    }

    fn numpat(&self) -> i64 {
        self.hub.registry().patterns.len() as i64
    }

    fn hold(&self) -> bool {
        self.hub.waiting.iter().any(|w| !w.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_as_redis_writes_them() {
        assert_eq!(Limits::parse("32mb,8mb,60"), Ok(Limits::default()));
        let l = Limits::parse("1gb, 0, 5").unwrap();
        assert_eq!((l.hard, l.soft, l.soft_for), (1 << 30, 0, Duration::from_secs(5)));
        assert_eq!(Limits::parse("10k,1kb,1").map(|l| (l.hard, l.soft)), Ok((10_000, 1024)));
        assert!(Limits::parse("32mb,8mb").unwrap_err().contains("HARD,SOFT,SECONDS"));
        assert!(Limits::parse("32xb,8mb,60").unwrap_err().contains("unknown unit"));
    }
}
