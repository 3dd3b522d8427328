//! `iomux load --mode pubsub`: a pub/sub load for a RESP server (redis's
//! protocol), since redis-benchmark has none. Subscribers SUBSCRIBE to one
//! channel; once every one is subscribed, publishers PUBLISH fixed-size
//! messages to it, each keeping `--window` publishes unanswered; slow
//! subscribers subscribe and then never read. Every push a subscriber
//! gets is checked byte for byte against the message it must be.
//!
//! The figure is messages delivered per second: pushes received by the
//! subscribers that read, from the first publish to the last push.

use super::LoadArgs;
use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use iomux::runtime::{CloseReason, Config, ConnId, Control, Handler, Io, Runtime};
use iomux::Backend;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub addr: SocketAddr,
    pub backend: Backend,
    pub threads: usize,
    pub subscribers: usize,
    pub slow: usize,
    pub publishers: usize,
    /// Publishes each publisher keeps unanswered.
    pub window: usize,
    pub payload: usize,
    pub channel: String,
    /// How long publishers publish.
    pub duration: Duration,
    /// How long to wait for pushes still on their way after the last publish.
    pub timeout: Duration,
}

/// What it measured.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PubsubResult {
    pub subscribers: u64,
    pub slow_subscribers: u64,
    pub publishers: u64,
    pub payload_bytes: u64,
    /// PUBLISHes answered.
    pub published: u64,
    /// Pushes received intact by the subscribers that read.
    pub delivered: u64,
    /// published x subscribers: what they should have got.
    pub expected: u64,
    /// Pushes that differed from the message sent, or replies that were
    /// not a PUBLISH's count.
    pub errors: u64,
    /// Slow subscribers this client saw closed (a server that closes
    /// without a reset, as redis does, leaves it unseen: see
    /// `still_subscribed`).
    pub slow_closed: u64,
    /// The channel's subscribers by the server's count (PUBSUB NUMSUB) at
    /// the end, before this client leaves: the slow ones dropped are gone.
    #[serde(default)]
    pub still_subscribed: Option<u64>,
    /// Subscribers that read and were closed before the end.
    pub lost_subscribers: u64,
    /// From the first publish to the last push.
    pub seconds: f64,
    pub delivered_per_sec: f64,
    pub published_per_sec: f64,
}

/// Counters every loop adds to.
#[derive(Default)]
struct Shared {
    subscribed: AtomicU64,
    published: AtomicU64,
    delivered: AtomicU64,
    errors: AtomicU64,
    slow_closed: AtomicU64,
    lost: AtomicU64,
    /// Publishers still publishing.
    publishing: AtomicU64,
}

enum Role {
    Subscriber {
        confirmed: bool,
        pos: usize,
    },
    Slow {
        confirmed: bool,
    },
    /// `done` once its last publish was answered (and it closed).
    Publisher {
        outstanding: usize,
        line: Vec<u8>,
        done: bool,
    },
}

struct Client {
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    /// The confirmation SUBSCRIBE gets, and the push each message is.
    confirm: Vec<u8>,
    push: Vec<u8>,
    publish: Vec<u8>,
    /// This loop's connections by role, made at start.
    mine: (usize, usize, usize),
    start: Instant,
    publishers: Vec<ConnId>,
}

fn resp_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl Client {
    fn new(plan: Arc<Plan>, shared: Arc<Shared>, loop_index: usize) -> Client {
        let ch = plan.channel.as_bytes();
        let payload: Vec<u8> = (0..plan.payload).map(|i| b'a' + (i % 26) as u8).collect();
        let confirm = format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n{}\r\n:1\r\n", ch.len(), plan.channel).into_bytes();
        let mut push =
            format!("*3\r\n$7\r\nmessage\r\n${}\r\n{}\r\n${}\r\n", ch.len(), plan.channel, payload.len()).into_bytes();
        push.extend_from_slice(&payload);
        push.extend_from_slice(b"\r\n");
        let publish = resp_command(&[b"PUBLISH", ch, &payload]);
        // This loop's share of each role.
        let share = |n: usize| n / plan.threads + usize::from(loop_index < n % plan.threads);
        let mine = (share(plan.subscribers), share(plan.slow), share(plan.publishers));
        Client { plan, shared, confirm, push, publish, mine, start: Instant::now(), publishers: Vec::new() }
    }

    fn all_subscribed(&self) -> bool {
        self.shared.subscribed.load(Ordering::SeqCst) == (self.plan.subscribers + self.plan.slow) as u64
    }

    /// Keeps the publisher's window full while it publishes; returns the
    /// publishes now unanswered.
    fn publish_more(&self, io: &mut Io<Role>, conn: ConnId, outstanding: usize) -> usize {
        let missing = self.plan.window.saturating_sub(outstanding);
        if missing == 0 || self.start.elapsed() >= self.plan.duration {
            return outstanding;
        }
        let publish = &self.publish;
        let queued = io.write_with(conn, |out| {
            for _ in 0..missing {
                out.extend_from_slice(publish);
            }
        });
        outstanding + queued.map_or(0, |()| missing)
    }
}

impl Handler for Client {
    type Conn = Role;
    type Message = ();

    fn on_start(&mut self, io: &mut Io<Role>) {
        let (subs, slow, pubs) = self.mine;
        for _ in 0..subs {
            io.connect(self.plan.addr, None, Role::Subscriber { confirmed: false, pos: 0 });
        }
        for _ in 0..slow {
            io.connect(self.plan.addr, None, Role::Slow { confirmed: false });
        }
        for _ in 0..pubs {
            let id =
                io.connect(self.plan.addr, None, Role::Publisher { outstanding: 0, line: Vec::new(), done: false });
            self.publishers.push(id);
        }
        self.shared.publishing.fetch_add(pubs as u64, Ordering::SeqCst);
        // Publishers start once every subscriber, on every loop, is in.
        io.set_timer(io.now() + Duration::from_millis(1), 0);
    }

    fn on_accept(&mut self, _io: &mut Io<Role>, _conn: ConnId) -> Role {
        Role::Slow { confirmed: true } // a client accepts nothing
    }

    fn on_connect(&mut self, io: &mut Io<Role>, conn: ConnId, role: &mut Role) {
        if matches!(role, Role::Subscriber { .. } | Role::Slow { .. }) {
            let _ = io.write(conn, &resp_command(&[b"SUBSCRIBE", self.plan.channel.as_bytes()]));
        }
    }

    fn on_timer(&mut self, io: &mut Io<Role>, _timer: iomux::runtime::TimerId, _token: u64) {
        if !self.all_subscribed() {
            io.set_timer(io.now() + Duration::from_millis(1), 0);
            return;
        }
        self.start = Instant::now();
        for conn in std::mem::take(&mut self.publishers) {
            let Some(&mut Role::Publisher { outstanding, .. }) = io.state(conn) else { continue };
            let now = self.publish_more(io, conn, outstanding);
            if let Some(Role::Publisher { outstanding, .. }) = io.state(conn) {
                *outstanding = now;
            }
        }
    }

    fn on_data(&mut self, io: &mut Io<Role>, conn: ConnId, role: &mut Role, data: &[u8]) -> usize {
        match role {
            Role::Slow { confirmed } => {
                if !*confirmed {
                    if data.len() < self.confirm.len() {
                        return 0;
                    }
                    *confirmed = true;
                    self.shared.subscribed.fetch_add(1, Ordering::SeqCst);
                    io.pause_reading(conn); // and never reads again
                    return self.confirm.len();
                }
                0
            }
            Role::Subscriber { confirmed, pos } => {
                let mut at = 0;
                if !*confirmed {
                    if data.len() < self.confirm.len() {
                        return 0;
                    }
                    if data[..self.confirm.len()] != self.confirm[..] {
                        self.shared.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    *confirmed = true;
                    self.shared.subscribed.fetch_add(1, Ordering::SeqCst);
                    at = self.confirm.len();
                }
                // Pushes, each compared with the message it must be.
                let (push, mut delivered, mut errors) = (&self.push, 0, 0);
                while at < data.len() {
                    let n = (push.len() - *pos).min(data.len() - at);
                    if data[at..at + n] != push[*pos..*pos + n] {
                        errors += 1;
                    }
                    (at, *pos) = (at + n, *pos + n);
                    if *pos == push.len() {
                        *pos = 0;
                        delivered += 1;
                    }
                }
                self.shared.delivered.fetch_add(delivered, Ordering::Relaxed);
                self.shared.errors.fetch_add(errors, Ordering::Relaxed);
                data.len()
            }
            Role::Publisher { outstanding, line, done } => {
                // Each reply is `:N\r\n`, the receivers.
                let mut answered = 0;
                for &b in data {
                    line.push(b);
                    if b == b'\n' {
                        if line.first() != Some(&b':') {
                            self.shared.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        line.clear();
                        answered += 1;
                    }
                }
                *outstanding = outstanding.saturating_sub(answered);
                self.shared.published.fetch_add(answered as u64, Ordering::Relaxed);
                *outstanding = self.publish_more(io, conn, *outstanding);
                if *outstanding == 0 && self.start.elapsed() >= self.plan.duration && !*done {
                    *done = true;
                    self.shared.publishing.fetch_sub(1, Ordering::SeqCst);
                    io.close(conn);
                }
                data.len()
            }
        }
    }

    fn on_close(&mut self, _io: &mut Io<Role>, _conn: ConnId, role: Role, reason: &CloseReason) {
        match role {
            Role::Slow { .. } if !matches!(reason, CloseReason::Shutdown) => {
                self.shared.slow_closed.fetch_add(1, Ordering::SeqCst);
            }
            Role::Subscriber { .. } if !matches!(reason, CloseReason::Shutdown) => {
                self.shared.lost.fetch_add(1, Ordering::SeqCst);
            }
            Role::Publisher { done: false, .. } => {
                // Closed before its last answer: it publishes no more.
                self.shared.publishing.fetch_sub(1, Ordering::SeqCst);
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Runs the plan: publishers for `duration`, then until every push sent
/// has arrived (or `timeout`).
pub fn run(plan: Plan) -> Result<PubsubResult, String> {
    // iomux::Error's own text leaves the kernel's reason to its source.
    let config = Config::builder().backend(plan.backend).build().map_err(|e| crate::chain(&e))?;
    let control = Control::new();
    let runtime = Runtime::new(config, plan.threads).map_err(|e| crate::chain(&e))?.controlled_by(control.clone());
    let (plan, shared) = (Arc::new(plan), Arc::new(Shared::default()));
    let (p, s) = (plan.clone(), shared.clone());
    let loops = std::thread::spawn(move || runtime.run(move |i| Client::new(p.clone(), s.clone(), i)));
    // Subscribed, then publishing, then the last pushes.
    let subscribers = (plan.subscribers + plan.slow) as u64;
    let deadline = Instant::now() + plan.timeout;
    while shared.subscribed.load(Ordering::SeqCst) < subscribers {
        if Instant::now() > deadline || loops.is_finished() {
            control.stop();
            return Err(format!(
                "{} of {subscribers} subscribers subscribed within {:?}",
                shared.subscribed.load(Ordering::SeqCst),
                plan.timeout
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let started = Instant::now();
    let mut last_delivery = (0, started);
    let end = started + plan.duration + plan.timeout;
    loop {
        let delivered = shared.delivered.load(Ordering::Relaxed);
        if delivered != last_delivery.0 {
            last_delivery = (delivered, Instant::now());
        }
        let publishing = shared.publishing.load(Ordering::SeqCst) > 0;
        let expected = shared.published.load(Ordering::Relaxed) * plan.subscribers as u64;
        let idle_for = last_delivery.1.elapsed();
        if (!publishing && delivered >= expected) || Instant::now() > end || (!publishing && idle_for > plan.timeout) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let still_subscribed = numsub(plan.addr, &plan.channel).ok();
    control.stop();
    loops.join().map_err(|_| "a client loop panicked".to_string())?.map_err(|e| crate::chain(&e))?;
    let published = shared.published.load(Ordering::SeqCst);
    let delivered = shared.delivered.load(Ordering::SeqCst);
    let seconds = last_delivery.1.saturating_duration_since(started).as_secs_f64();
    Ok(PubsubResult {
        subscribers: plan.subscribers as u64,
        slow_subscribers: plan.slow as u64,
        publishers: plan.publishers as u64,
        payload_bytes: plan.payload as u64,
        published,
        delivered,
        expected: published * plan.subscribers as u64,
        errors: shared.errors.load(Ordering::SeqCst),
        slow_closed: shared.slow_closed.load(Ordering::SeqCst),
        still_subscribed,
        lost_subscribers: shared.lost.load(Ordering::SeqCst),
        seconds,
        delivered_per_sec: delivered as f64 / seconds.max(1e-9),
        published_per_sec: published as f64 / seconds.max(1e-9),
    })
}

/// The server's count of `channel`'s subscribers (PUBSUB NUMSUB).
fn numsub(addr: SocketAddr, channel: &str) -> std::io::Result<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(&resp_command(&[b"PUBSUB", b"NUMSUB", channel.as_bytes()]))?;
    // `*2 $len channel :count`: the count is the last line.
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while got.iter().filter(|&&b| b == b'\n').count() < 4 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    text.lines()
        .find_map(|l| l.strip_prefix(':'))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("PUBSUB NUMSUB answered {text:?}")))
}

/// `--mode pubsub`: its own load (see pubsub.rs), its own figures.
pub fn run_cli(args: &LoadArgs) -> CliResult<ExitCode> {
    let refused = [
        ("--rate", args.rate.is_some()),
        ("--idle", args.idle > 0),
        ("--requests", args.requests.is_some()),
        ("--per-conn", args.per_conn.is_some()),
        ("--procs", args.procs > 1),
        ("--shard", args.shard.is_some() || args.shard_count.is_some()),
        ("--hdr-log", args.hdr_log.is_some()),
    ];
    if let Some((flag, _)) = refused.iter().find(|(_, set)| *set) {
        bail!("{flag} is not for --mode pubsub (it publishes for --duration)");
    }
    if args.subscribers + args.slow_subscribers == 0 || args.publishers == 0 {
        bail!("--mode pubsub needs at least one subscriber and one publisher");
    }
    if let Some(path) = &args.json {
        crate::stats::check_writable(path)?;
    }
    let duration = args.duration.unwrap_or(10.0);
    if !(0.001..=86400.0).contains(&duration) {
        bail!("--duration must be between 0.001 and 86400 seconds");
    }
    if let Some(cpu) = args.cpu {
        crate::os::pin_to_cpu(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    let plan = Plan {
        addr: args.connect,
        backend: args.backend,
        threads: usize::from(args.threads),
        subscribers: args.subscribers,
        slow: args.slow_subscribers,
        publishers: args.publishers,
        window: args.window as usize,
        payload: args.msg_size as usize,
        channel: args.channel.clone(),
        duration: Duration::from_secs_f64(duration),
        timeout: Duration::from_secs_f64(args.timeout),
    };
    let r = run(plan).map_err(|e| anyhow!("iomux load --mode pubsub: {e}"))?;
    println!(
        "iomux load: pubsub: {} published, {} of {} delivered to {} subscribers in {:.3} s: {:.0} messages/s \
         delivered; {} errors; {} of {} slow subscribers closed by the server; {} readers lost",
        r.published,
        r.delivered,
        r.expected,
        r.subscribers,
        r.seconds,
        r.delivered_per_sec,
        r.errors,
        r.slow_closed,
        r.slow_subscribers,
        r.lost_subscribers
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&r)?).with_context(|| format!("writing {}", path.display()))?;
    }
    let clean = r.errors == 0 && r.delivered == r.expected && r.lost_subscribers == 0;
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
