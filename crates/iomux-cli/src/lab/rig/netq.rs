//! `iomux netq` (hidden): the lab's delay line where the kernel has no
//! netem. It binds an NFQUEUE of the network namespace it runs in and
//! gives each queued packet its verdict (accept) only when the packet's
//! delay has passed, so that packets are delayed, jittered and reordered
//! as netem would: each with delay + jitter x N(0, 1), released in the
//! order their times come (jitter reorders, as netem's does), and under
//! `--reorder-pct` that share of packets passed at once while the others
//! wait (netem's `reorder`). E8 sends a namespace's TCP to it with
//! `iptables -j NFQUEUE` (this kernel's nftables has no `queue`).
//!
//! The netlink protocol is the `nfq` crate's; it keeps its socket private,
//! so the socket to wait on is found by its inode (`netq_socket`).

use crate::CliResult;
use anyhow::{anyhow, Context as _};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// Packets the kernel may hold for us before it drops new ones (its
/// default, 1024, is about 120 ms of full-sized frames at 100 Mbit/s).
const QUEUE_MAX_LEN: u32 = 65_536;
/// The socket's receive buffer: a burst of queued packets' metadata must
/// not overflow it while netq sleeps (nfq turns ENOBUFS off: an overflow
/// would drop packets silently).
const RECV_BUFFER: usize = 8 << 20;

#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct NetqArgs {
    /// NFQUEUE number to bind (as the iptables rule's --queue-num)
    #[arg(long, default_value_t = 0)]
    pub queue: u16,
    /// Mean delay of each packet, microseconds
    #[arg(long, default_value_t = 0)]
    pub delay_us: u64,
    /// Standard deviation of the delay (normally distributed, as netem's
    /// `distribution normal`), microseconds
    #[arg(long, default_value_t = 0)]
    pub jitter_us: u64,
    /// Percent of packets passed at once instead of delayed (netem's `reorder`)
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    pub reorder_pct: f64,
    /// Correlation of each reorder decision with the last, percent
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    pub correlation_pct: f64,
    /// Seed of the random choices [default: from the clock]
    #[arg(long)]
    pub seed: Option<u64>,
}

fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a percentage from 0 to 100")),
    }
}

impl NetqArgs {
    /// The flags that give these arguments back to `iomux netq`.
    pub fn to_cli(&self) -> Vec<String> {
        let mut flags = vec![
            "--queue".to_string(),
            self.queue.to_string(),
            "--delay-us".into(),
            self.delay_us.to_string(),
            "--jitter-us".into(),
            self.jitter_us.to_string(),
            "--reorder-pct".into(),
            self.reorder_pct.to_string(),
            "--correlation-pct".into(),
            self.correlation_pct.to_string(),
        ];
        if let Some(seed) = self.seed {
            flags.extend(["--seed".into(), seed.to_string()]);
        }
        flags
    }
}

/// How long each packet is held: netem's delay, jitter and reorder.
pub struct DelayLine {
    delay_s: f64,
    jitter_s: f64,
    reorder: f64,
    correlation: f64,
    /// The last reorder draw, for the correlation (netem's get_crandom).
    last: f64,
    rng: fastrand::Rng,
}

impl DelayLine {
    pub fn new(args: &NetqArgs) -> DelayLine {
        DelayLine {
            delay_s: args.delay_us as f64 / 1e6,
            jitter_s: args.jitter_us as f64 / 1e6,
            reorder: args.reorder_pct / 100.0,
            correlation: args.correlation_pct / 100.0,
            last: 0.0,
            rng: args.seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed),
        }
    }

    /// The next packet's delay.
    pub fn hold(&mut self) -> Duration {
        if self.reorder > 0.0 {
            let draw = self.rng.f64() * (1.0 - self.correlation) + self.last * self.correlation;
            self.last = draw;
            if draw < self.reorder {
                return Duration::ZERO;
            }
        }
        let mut delay = self.delay_s;
        if self.jitter_s > 0.0 {
            delay += self.jitter_s * self.standard_normal();
        }
        Duration::from_secs_f64(delay.max(0.0))
    }

    /// Box-Muller: no crate of ours has a normal distribution, and this is
    /// two lines.
    fn standard_normal(&mut self) -> f64 {
        let u = 1.0 - self.rng.f64(); // in (0, 1]: ln is finite
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.rng.f64()).cos()
    }
}

/// The fd of this process's one NETLINK_NETFILTER socket: the kernel's
/// list of netlink sockets gives the inodes, our descriptors the one that
/// is ours.
fn netq_socket() -> CliResult<std::os::fd::RawFd> {
    const NETLINK_NETFILTER: &str = "12";
    let table = std::fs::read_to_string("/proc/self/net/netlink")?;
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 10 && f[1] == NETLINK_NETFILTER)
        .map(|f| format!("socket:[{}]", f[9]))
        .collect();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        if inodes.iter().any(|i| target.as_os_str() == i.as_str()) {
            if let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                return Ok(fd);
            }
        }
    }
    Err(anyhow!("netq: cannot find the NFQUEUE socket among this process's descriptors"))
}

/// Binds the queue, says `netq: bound queue N` on stdout, then holds
/// packets until killed.
pub fn run(args: NetqArgs) -> CliResult<std::process::ExitCode> {
    let q = args.queue;
    let mut queue = nfq::Queue::open().context("netq: opening a netfilter queue socket")?;
    let fd = netq_socket()?;
    // SAFETY: `fd` is the socket `queue` owns and keeps open for as long
    // as `queue` lives, which is longer than every borrow of it here.
    let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::net::sockopt::set_socket_recv_buffer_size_force(socket, RECV_BUFFER)
        .context("netq: receive buffer of the queue's socket")?;
    queue.bind(q).with_context(|| format!("netq: binding NFQUEUE {q} (another process bound it?)"))?;
    // Metadata only: the verdict needs the packet's id, not its bytes.
    queue.set_copy_range(q, 0).with_context(|| format!("netq: queue {q}: copy range"))?;
    queue.set_queue_max_len(q, QUEUE_MAX_LEN).with_context(|| format!("netq: queue {q}: max length"))?;
    queue.set_nonblocking(true);
    // A packet's time is a timer's: the default 50 us of slack would add
    // to every delay.
    rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)).context("netq: setting the timer slack")?;
    let mut line = DelayLine::new(&args);
    // Held packets by the time they go, then arrival order.
    let mut held: BTreeMap<(Instant, u64), nfq::Message> = BTreeMap::new();
    let mut arrived = 0u64;
    println!("netq: bound queue {q}");
    std::io::stdout().flush()?;
    loop {
        let now = Instant::now();
        while let Some(entry) = held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            queue.verdict(entry.remove()).with_context(|| format!("netq: queue {q}: verdict"))?;
        }
        let wait = held.first_key_value().map(|(k, _)| k.0.saturating_duration_since(now));
        let mut fds = [rustix::event::PollFd::new(&socket, rustix::event::PollFlags::IN)];
        let timeout =
            wait.map(|w| rustix::event::Timespec { tv_sec: w.as_secs() as i64, tv_nsec: i64::from(w.subsec_nanos()) });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e).with_context(|| format!("netq: poll on queue {q}")),
        }
        loop {
            match queue.recv() {
                Ok(msg) => {
                    let due = Instant::now() + line.hold();
                    held.insert((due, arrived), msg);
                    arrived += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // The kernel's answer to a verdict for a packet it let go
                // of already (the queue flushed), or a signal: the packets
                // still held are unaffected.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINTR)) => {}
                Err(e) => return Err(e).with_context(|| format!("netq: receiving from queue {q}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(delay_us: u64, jitter_us: u64, reorder_pct: f64, correlation_pct: f64) -> DelayLine {
        DelayLine::new(&NetqArgs {
            delay_us,
            jitter_us,
            reorder_pct,
            correlation_pct,
            seed: Some(7),
            ..Default::default()
        })
    }

    fn stats(d: &[f64]) -> (f64, f64) {
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (d.len() - 1) as f64;
        (mean, var.sqrt())
    }

    #[test]
    fn a_plain_delay_holds_every_packet_exactly_that_long() {
        let mut l = line(12_500, 0, 0.0, 0.0);
        assert!((0..1000).all(|_| l.hold() == Duration::from_micros(12_500)));
    }

    #[test]
    fn jitter_is_normal_around_the_delay() {
        let mut l = line(12_500, 2_500, 0.0, 0.0);
        let d: Vec<f64> = (0..100_000).map(|_| l.hold().as_secs_f64() * 1e6).collect();
        let (mean, sd) = stats(&d);
        assert!((mean - 12_500.0).abs() < 30.0, "mean {mean}");
        assert!((sd - 2_500.0).abs() < 30.0, "standard deviation {sd}");
        // A normal puts 68.3% within one standard deviation.
        let within = d.iter().filter(|x| (*x - 12_500.0).abs() < 2_500.0).count() as f64 / d.len() as f64;
        assert!((within - 0.683).abs() < 0.01, "{within}");
    }

    #[test]
    fn a_delay_is_never_negative() {
        let mut l = line(100, 10_000, 0.0, 0.0);
        let zeros = (0..10_000).filter(|_| l.hold() == Duration::ZERO).count();
        // P(N(100 us, 10 ms) < 0) = 0.496: 4,960 of 10,000, give or take 50.
        assert!((4_750..5_150).contains(&zeros), "{zeros}");
    }

    #[test]
    fn reorder_passes_its_share_at_once_and_delays_the_rest() {
        for correlation in [0.0, 50.0] {
            let mut l = line(1_000, 0, 25.0, correlation);
            let d: Vec<Duration> = (0..100_000).map(|_| l.hold()).collect();
            let now = d.iter().filter(|h| h.is_zero()).count() as f64 / d.len() as f64;
            assert!(d.iter().all(|h| h.is_zero() || *h == Duration::from_millis(1)));
            // netem's correlated draw (u (1 - c) + last c) narrows the
            // draws around 0.5: with c = 0.5 they have a standard
            // deviation of 1/6, and 6.7% of them fall below 0.25 (as in
            // netem); without correlation, the percentage itself.
            let expected = if correlation == 0.0 { 0.25 } else { 0.067 };
            assert!((now - expected).abs() < 0.01, "correlation {correlation}%: {now} passed at once");
        }
    }

    #[test]
    fn flags_round_trip() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            netq: NetqArgs,
        }
        let args = NetqArgs {
            queue: 3,
            delay_us: 12_500,
            jitter_us: 2_500,
            reorder_pct: 25.0,
            correlation_pct: 50.0,
            seed: Some(9),
        };
        let parsed = Cli::try_parse_from(std::iter::once("netq".to_string()).chain(args.to_cli())).unwrap();
        assert_eq!(parsed.netq, args);
        assert!(Cli::try_parse_from(["netq", "--reorder-pct", "101"]).is_err());
    }
}
