//! `iomux load`: active and idle connections, closed or open loop, every
//! echoed byte checked, latency in HDR histograms; as one process, as
//! several (`--procs`), or as one shard of a load spread over hosts
//! (`--shard`), with results that merge exactly (`iomux merge`).

mod client;
mod hdrlog;
mod hist;
pub mod merge;
mod pattern;
mod procs;
pub mod pubsub;
pub mod result;
pub(crate) mod sources;
mod split;
mod summary;
mod tls;
mod watch;

use anyhow::{anyhow, bail, Context as _};
pub use client::{LoadMode, Report};

use crate::flags::Flags;
use crate::CliResult;
use client::{Client, Plan};
use hdrlog::{Log, UnixClock};
use iomux::runtime::{Config, Control};
use iomux::Backend;
use result::{LoadResult, ShardOf};
use split::{Shard, Share};
use std::ffi::OsString;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use watch::{Counters, Display};

/// `--tick-us` unless told.
pub const DEFAULT_TICK_US: u32 = 100;

#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// The server's address.
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub connect: SocketAddr,
    /// Active connections.
    #[arg(long, default_value_t = 100)]
    pub conns: usize,
    /// Idle connections: they connect and hold, never sending.
    #[arg(long, default_value_t = 0)]
    pub idle: usize,
    /// Loops (threads), each with its share of the connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: u16,
    /// Bytes per message.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=(64 << 20)))]
    pub msg_size: u32,
    /// Messages in all (instead of --duration).
    #[arg(long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// How long to send, in seconds [default: 10, unless --requests]
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// The client's own mechanism.
    #[arg(long, value_parser = crate::parse_backend, default_value = "epoll")]
    pub backend: Backend,
    /// echo: closed loop (or open loop with --rate); sink: send only.
    #[arg(long, value_enum, default_value_t = LoadMode::Echo)]
    pub mode: LoadMode,
    /// Open loop: messages per second in all, on a fixed schedule; latency
    /// counts from each message's scheduled time (coordinated omission
    /// corrected, as wrk2 does). With --mode sink: the sending pace.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: the schedule's grid, in microseconds. Each message's due
    /// time is rounded up to it, so the messages due within one tick go
    /// out together (latency still counts from that due time) and the load
    /// wakes once per tick rather than once per message. 0: no rounding.
    #[arg(long, default_value_t = DEFAULT_TICK_US)]
    pub tick_us: u32,
    /// Source addresses, one or a range (127.0.0.1-127.0.0.50): more than
    /// one multiplies the ports available towards one server address.
    /// Without it, a loopback load too big for one address's ephemeral
    /// ports spreads over 127.0.0.2 and up by itself.
    #[arg(long, value_parser = parse_sources)]
    pub bind: Option<Sources>,
    /// New connections per second, at most (in all, over every process).
    #[arg(long)]
    pub connect_rate: Option<f64>,
    /// Each connection sends exactly this many messages (instead of
    /// --requests or --duration).
    #[arg(long, conflicts_with_all = ["duration", "requests"])]
    pub per_conn: Option<u64>,
    /// Pin the load's threads to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Give up, with an error, when echoes are awaited and none has
    /// arrived for this many seconds.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// TCP keepalive on the load's connections, in seconds, as `iomux
    /// serve --keepalive`: a server that vanished (no FIN, no reset) is
    /// given up within about 2 x SECS, each such connection counted as
    /// closed early and "vanished". 0 (the default): off, the kernel's
    /// defaults.
    #[arg(long, default_value_t = 0, value_name = "SECS", value_parser = clap::value_parser!(u16).range(0..=32767))]
    pub keepalive: u16,
    /// Echo: reconnect an active connection the server closed or reset
    /// early, up to N times each; its unanswered messages are sent again
    /// on the new connection, and their latency includes the reconnect.
    /// Each close is still counted (closed early, vanished, reset), each
    /// new connection as a reconnect. 0 (the default): a connection closed
    /// early stays closed, its messages counted unanswered.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub reconnect: u32,
    /// Write every figure as JSON here, with the latency histogram in full
    /// (`iomux merge` adds such files up exactly).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// pubsub: subscribers that read every message.
    #[arg(long, default_value_t = 20)]
    pub subscribers: usize,
    /// pubsub: subscribers that subscribe and then never read (the server
    /// should drop them at its output limit).
    #[arg(long, default_value_t = 0)]
    pub slow_subscribers: usize,
    /// pubsub: publishers.
    #[arg(long, default_value_t = 1)]
    pub publishers: usize,
    /// pubsub: PUBLISHes each publisher keeps unanswered.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub window: u32,
    /// pubsub: the channel.
    #[arg(long, default_value = "iomux-load")]
    pub channel: String,
    /// Speak TLS (1.2 or 1.3, rustls) on every connection, trusting the
    /// certificates in this PEM file (for a self-signed server, its own:
    /// `serve --tls-self-signed DIR` writes DIR/cert.pem). echo and sink.
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// TLS: the server's name, sent by SNI and checked in its certificate.
    #[arg(long, default_value = "localhost", value_name = "NAME")]
    pub tls_name: String,
    /// TLS: a full handshake on every connection, no session resumed
    /// (measures the handshake itself; by default reconnects and later
    /// connections resume by tickets).
    #[arg(long, requires = "tls_ca")]
    pub tls_full_handshakes: bool,
    /// Run as this many processes, each with its share of the connections,
    /// requests and rates (one process may hold only RLIMIT_NOFILE
    /// descriptors); their results are merged exactly.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub procs: u16,
    /// Run only shard I (0-based) of N of the load the other flags describe:
    /// its share of connections, requests and rates, and its own range of
    /// connection numbers. Merge the shards' --json files with `iomux merge`.
    #[arg(long, value_parser = split::parse_shard, conflicts_with = "shard_count")]
    pub shard: Option<Shard>,
    /// As --shard I/N, with N given here and I taken from the environment
    /// variable JOB_COMPLETION_INDEX (set by Kubernetes Indexed Jobs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub shard_count: Option<u32>,
    /// Write the latency of each second as an HdrHistogram interval log
    /// (V2, for HdrLogProcessing or HistogramLogAnalyzer) here.
    #[arg(long)]
    pub hdr_log: Option<PathBuf>,
    /// Internal (--procs): the global number of this process's first
    /// active connection, so byte patterns stay unique across processes.
    #[arg(long, hide = true, default_value_t = 0)]
    pub first_conn: u32,
    /// Internal (--procs): the global index of this process's first idle
    /// connection, for an even spread over source addresses.
    #[arg(long, hide = true, default_value_t = 0)]
    pub first_idle: u64,
    /// Internal (--procs): report progress as compact lines on stdout for
    /// the parent, and print no summary.
    #[arg(long, hide = true)]
    pub report_progress: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sources(pub Vec<IpAddr>);

impl std::fmt::Display for Sources {
    /// As [`parse_sources`] reads it: `A` or `A-B` (always a range).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.0.first(), self.0.last()) {
            (Some(a), Some(b)) if a == b => write!(f, "{a}"),
            (Some(a), Some(b)) => write!(f, "{a}-{b}"),
            _ => Ok(()),
        }
    }
}

/// `A` or `A-B` (IPv4, inclusive, at most 65,536 addresses).
fn parse_sources(s: &str) -> Result<Sources, String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let parse = |x: &str| x.trim().parse::<Ipv4Addr>().map_err(|e| format!("'{x}' is not an IPv4 address: {e}"));
    let (a, b) = (u32::from(parse(a)?), u32::from(parse(b)?));
    if b < a {
        return Err(format!("the range {s} ends before it starts"));
    }
    if b - a >= 65_536 {
        return Err(format!("the range {s} has more than 65,536 addresses"));
    }
    Ok(Sources((a..=b).map(|ip| IpAddr::V4(Ipv4Addr::from(ip))).collect()))
}

impl LoadArgs {
    /// What is divided between shards, processes and loops.
    fn share(&self) -> Share {
        Share {
            conns: self.conns,
            idle: self.idle,
            first_conn: u64::from(self.first_conn),
            first_idle: self.first_idle,
            requests: self.requests,
            rate: self.rate,
            connect_rate: self.connect_rate,
        }
    }

    /// These flags with `part`'s share of the load.
    fn with_share(&self, part: Share) -> CliResult<LoadArgs> {
        let first_conn = u32::try_from(part.first_conn)
            .map_err(|_| anyhow!("connection number {} is past 2^32: too many connections", part.first_conn))?;
        Ok(LoadArgs {
            conns: part.conns,
            idle: part.idle,
            first_conn,
            first_idle: part.first_idle,
            requests: part.requests,
            rate: part.rate,
            connect_rate: part.connect_rate,
            ..self.clone()
        })
    }

    /// The command line that parses back into these flags (for a child
    /// process). Every field is named here, so a new flag cannot be
    /// forgotten: the destructuring stops compiling.
    pub fn to_cli(&self) -> Vec<OsString> {
        let LoadArgs {
            connect,
            conns,
            idle,
            threads,
            msg_size,
            requests,
            duration,
            warmup,
            backend,
            mode,
            rate,
            tick_us,
            bind,
            connect_rate,
            per_conn,
            cpu,
            timeout,
            keepalive,
            reconnect,
            json,
            procs,
            shard,
            shard_count,
            hdr_log,
            first_conn,
            first_idle,
            report_progress,
            subscribers,
            slow_subscribers,
            publishers,
            window,
            channel,
            tls_ca,
            tls_name,
            tls_full_handshakes,
        } = self;
        let mut f = Flags::default();
        f.value("connect", connect)
            .value("conns", conns)
            .value("idle", idle)
            .value("threads", threads)
            .value("msg-size", msg_size)
            .value("warmup", warmup)
            .value("backend", backend.name())
            .value("mode", result::mode_name(*mode))
            .value("timeout", timeout)
            .value("keepalive", keepalive)
            .value("reconnect", reconnect)
            .value("tick-us", tick_us)
            .value("procs", procs)
            .value("first-conn", first_conn)
            .value("first-idle", first_idle)
            .optional("requests", *requests)
            .optional("duration", *duration)
            .optional("rate", *rate)
            .optional("bind", bind.as_ref())
            .optional("connect-rate", *connect_rate)
            .optional("per-conn", *per_conn)
            .optional("cpu", *cpu)
            .optional("shard", shard.map(|s| format!("{}/{}", s.index, s.count)))
            .optional("shard-count", *shard_count)
            .path("json", json.as_deref())
            .path("hdr-log", hdr_log.as_deref())
            .switch("report-progress", *report_progress)
            .value("subscribers", subscribers)
            .value("slow-subscribers", slow_subscribers)
            .value("publishers", publishers)
            .value("window", window)
            .value("channel", channel)
            .path("tls-ca", tls_ca.as_deref())
            .value("tls-name", tls_name)
            .switch("tls-full-handshakes", *tls_full_handshakes);
        f.into_args()
    }
}

/// How long the run is: a duration, or a number of messages (None).
fn checked_duration(args: &LoadArgs) -> CliResult<Option<Duration>> {
    if args.hdr_log.is_some() && args.mode == LoadMode::Sink {
        bail!("--hdr-log records echo latency, and --mode sink has none");
    }
    if let Some(r) = args.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate must be a positive number of messages per second, not {r}");
        }
        if args.conns == 0 {
            bail!("--rate needs at least one active connection (--conns)");
        }
    }
    if let Some(r) = args.connect_rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--connect-rate must be a positive number per second, not {r}");
        }
    }
    if args.per_conn == Some(0) || args.requests == Some(0) {
        bail!("--requests and --per-conn must be at least 1");
    }
    let duration = match (args.duration, args.requests.or(args.per_conn)) {
        (Some(d), _) if !(d.is_finite() && d > 0.0) => {
            bail!("--duration must be positive, not {d}")
        }
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    if !(args.warmup.is_finite() && args.warmup >= 0.0) {
        bail!("--warmup must be zero or more seconds, not {}", args.warmup);
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds, not {}", args.timeout);
    }
    if args.conns + args.idle == 0 {
        bail!("nothing to do: --conns and --idle are both 0");
    }
    if u64::from(args.first_conn) + args.conns as u64 > u64::from(u32::MAX) {
        bail!("--conns {} is more connections than can be numbered (2^32)", args.conns);
    }
    Ok(duration)
}

/// Descriptors one process needs for `conns` connections on `threads`
/// loops, and the most it may have; an error says how to fit.
fn check_descriptors(conns: usize, threads: usize, procs: u16) -> CliResult<()> {
    let limit = crate::os::raise_nofile_limit().context("raising RLIMIT_NOFILE")? as usize;
    // Each loop needs a few descriptors of its own (epoll or ring, waker).
    let overhead = crate::os::open_fd_count().unwrap_or(8) + 4 * threads;
    let needed = conns + overhead;
    if needed <= limit {
        return Ok(());
    }
    let per_proc = limit.saturating_sub(overhead).max(1);
    let total = conns * usize::from(procs);
    Err(anyhow!(
        "{conns} connections need {needed} file descriptors in one process, but RLIMIT_NOFILE allows {limit} \
         (its hard limit); run several processes: --procs {} or more",
        total.div_ceil(per_proc).max(usize::from(procs) + 1)
    ))
}

/// What a finished load run says.
pub struct Outcome {
    pub report: Report,
    pub result: LoadResult,
    /// --hdr-log: the intervals, to be written.
    pub log: Option<Log>,
}

pub fn run(args: LoadArgs) -> CliResult<ExitCode> {
    if args.mode == LoadMode::Pubsub {
        if args.tls_ca.is_some() {
            bail!("--tls-ca is for --mode echo and sink; pubsub speaks plaintext");
        }
        return pubsub::run_cli(&args);
    }
    // A certificate that cannot be read fails now, not in every loop.
    tls::client(&args)?;
    // Everything that can be refused is refused before any connection.
    let (mut args, shard) = resolve_shard(args, std::env::var(split::INDEX_ENV).ok().as_deref())?;
    checked_duration(&args)?;
    let procs = usize::from(args.procs);
    if procs > 1 {
        args.share().check_split(procs, "--procs")?;
    }
    // Part 0 is the largest.
    let largest = args.share().part(procs, 0);
    check_descriptors(largest.conns + largest.idle, usize::from(args.threads), args.procs)?;
    // The figures are written at the end: refuse a path they could not go
    // to now, before any load.
    for path in [&args.json, &args.hdr_log].into_iter().flatten() {
        crate::stats::check_writable(path)?;
    }
    if !args.report_progress {
        let ports = sources::port_range();
        match sources::choose(args.connect, (args.conns + args.idle) as u64, args.bind.as_ref(), ports)
            .map_err(anyhow::Error::msg)?
        {
            sources::Choice::One => {}
            sources::Choice::Chosen(chosen, why) => {
                println!("iomux load: {why}");
                args.bind = Some(chosen);
            }
            sources::Choice::Short(why) => eprintln!("iomux load: warning: {why}"),
        }
        let conns = (args.conns + args.idle) as u64;
        // A loopback server's sockets are on this machine too.
        let both_ends = if args.connect.ip().is_loopback() { 2 } else { 1 };
        crate::limits::require(
            &format!("iomux load of {conns} connections"),
            &crate::limits::Need {
                sockets: both_ends * conns,
                conns_per_dest: conns,
                sources: args.bind.as_ref().map_or(1, |b| b.0.len() as u64),
                fds_per_process: (largest.conns + largest.idle) as u64 + crate::limits::FDS_OVERHEAD,
                accept_burst: 0,
            },
        )?;
    }
    if args.report_progress {
        // A --procs child: ends when its parent does, however that dies.
        let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
    }
    // Children leave it to the parent, which watches the whole run.
    let overflows_before = (!args.report_progress).then(crate::os::listen_overflows).flatten();
    let retransmits_before = (!args.report_progress).then(crate::os::retransmitted_segments).flatten();
    let (mut result, failed) = if procs > 1 {
        procs::run(&args)?
    } else {
        let outcome = execute(&args, !args.report_progress)?;
        if let (Some(path), Some(log)) = (&args.hdr_log, outcome.log) {
            log.write(path)?;
        }
        (outcome.result, Vec::new())
    };
    result.shard = shard;
    result.listen_overflows = overflows_before.and_then(|b| Some(crate::os::listen_overflows()?.saturating_sub(b)));
    result.retransmits = retransmits_before.and_then(|b| Some(crate::os::retransmitted_segments()?.saturating_sub(b)));
    summary::conclude("iomux load", &result, args.json.as_deref(), !args.report_progress, &failed)
}

/// Applies `--shard` or `--shard-count` (with `index`, the environment's):
/// the flags become this shard's share of the whole.
fn resolve_shard(args: LoadArgs, index: Option<&str>) -> CliResult<(LoadArgs, Option<ShardOf>)> {
    let shard = match (args.shard, args.shard_count) {
        (Some(s), _) => s,
        (None, Some(n)) => split::shard_from_env(n, index)?,
        (None, None) => return Ok((args, None)),
    };
    let whole = args.share();
    whole.check_split(shard.count as usize, "--shard")?;
    let mut part = args.with_share(whole.part(shard.count as usize, shard.index as usize))?;
    (part.shard, part.shard_count) = (None, None);
    let of = ShardOf { index: shard.index, count: shard.count, of_conns: args.conns as u64, of_idle: args.idle as u64 };
    Ok((part, Some(of)))
}

/// Runs the load in this process and returns the merged report (used by the lab too).
pub fn execute(args: &LoadArgs, show_progress: bool) -> CliResult<Outcome> {
    execute_with(args, show_progress, &Control::new())
}

/// As [`execute`], stopping early (gracefully) when `control` is stopped.
pub fn execute_with(args: &LoadArgs, show_progress: bool, control: &Control) -> CliResult<Outcome> {
    let duration = checked_duration(args)?;
    let threads = usize::from(args.threads).min(args.conns + args.idle);
    check_descriptors(args.conns + args.idle, threads, 1)?;
    let progress = Arc::new(Counters::default());
    let sources = Arc::new(args.bind.clone().map(|s| s.0).unwrap_or_default());
    let rate_per_conn = args.rate.map(|r| r / args.conns as f64);
    let config = crate::serve::with_keepalive(Config::builder().backend(args.backend), args.keepalive).build()?;
    let tls = tls::client(args)?;
    let clock = UnixClock::now();
    let whole = args.share();
    let plans: Vec<Plan> = (0..threads)
        .map(|i| {
            let part = whole.part(threads, i);
            Plan {
                addr: args.connect,
                conns: part.conns,
                idle: part.idle,
                // Checked against 2^32 with the flags.
                first_conn: part.first_conn as u32,
                first_idle: part.first_idle,
                msg_size: args.msg_size as usize,
                mode: args.mode,
                rate_per_conn,
                duration,
                requests: part.requests,
                per_conn: args.per_conn,
                warmup: Duration::from_secs_f64(args.warmup),
                sources: sources.clone(),
                connect_rate: part.connect_rate,
                progress: progress.clone(),
                intervals: args.hdr_log.as_ref().map(|_| clock),
                grace: Duration::from_secs(5),
                stall_timeout: Duration::from_secs_f64(args.timeout),
                reconnect: if args.mode == LoadMode::Echo { args.reconnect } else { 0 },
                tls: tls.clone(),
                tick: Duration::from_micros(u64::from(args.tick_us)),
            }
        })
        .collect();
    let total_secs = duration.map(|d| d.as_secs_f64() + args.warmup);
    let total_msgs = args.requests.unwrap_or(0) + args.per_conn.unwrap_or(0) * args.conns as u64;
    let target = (args.conns + args.idle) as u64;
    let display = (show_progress && !args.report_progress).then(|| Display::new(target, total_secs, total_msgs));
    let runtime = iomux::runtime::Runtime::new(config, threads)?.controlled_by(control.clone());
    let running = AtomicBool::new(true);
    let cpu = args.cpu;
    let finished = std::thread::scope(|scope| {
        if display.is_some() || args.report_progress {
            scope.spawn(|| {
                while running.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    show(&display, args.report_progress, &progress);
                }
            });
        }
        let finished = runtime.run(|i| {
            if let Some(cpu) = cpu {
                if let Err(e) = crate::os::pin_to_cpu(cpu) {
                    eprintln!("iomux load: cannot pin to CPU {cpu}: {e}");
                }
            }
            Client::new(plans[i].clone())
        });
        running.store(false, Ordering::Relaxed);
        finished
    })?;
    // The last figures, so that a parent's line ends on the final counts.
    show(&display, args.report_progress, &progress);
    if let Some(display) = &display {
        display.finish();
    }
    let mut report = Report::default();
    for client in &finished.handlers {
        report.merge(&client.report);
    }
    if report.connected == 0 && !report.connect_errors.is_empty() {
        bail!(
            "server unreachable at {}: {}",
            args.connect,
            report.first_error.clone().unwrap_or_else(|| "every connect failed".into())
        );
    }
    if let Some(e) = &report.interval_error {
        bail!("recording latency per second (--hdr-log): {e}");
    }
    let log = args.hdr_log.as_ref().map(|_| Log {
        start: report.measure_start.map(|t| clock.unix(t)),
        intervals: std::mem::take(&mut report.intervals),
    });
    let result = LoadResult::of_run(args, &report, &finished.stats, &clock)?;
    Ok(Outcome { report, result, log })
}

/// One progress update: on the bar, or as a line for the parent process.
fn show(display: &Option<Display>, to_parent: bool, progress: &Counters) {
    let now = progress.snapshot();
    if let Some(display) = display {
        display.show(&now);
    }
    if to_parent {
        let mut out = std::io::stdout().lock();
        // A parent that has gone away is no reason to stop the load.
        let _ = writeln!(out, "{}", now.to_wire()).and_then(|()| out.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(args: &[&str]) -> LoadArgs {
        Cli::try_parse_from(std::iter::once("load").chain(args.iter().copied())).unwrap().load
    }

    #[test]
    fn source_ranges_parse() {
        let s = parse_sources("127.0.0.1-127.0.0.3").unwrap();
        assert_eq!(s.0.len(), 3);
        assert_eq!(s.0[2], "127.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(s.to_string(), "127.0.0.1-127.0.0.3");
        assert_eq!(parse_sources("127.0.0.9").unwrap().0.len(), 1);
        assert!(parse_sources("127.0.0.9-127.0.0.1").unwrap_err().contains("ends before"));
        assert!(parse_sources("nope").unwrap_err().contains("not an IPv4"));
    }

    #[test]
    fn a_child_command_line_parses_back_into_the_same_flags() {
        let all = parse(&[
            "--connect",
            "127.0.0.1:9",
            "--conns",
            "7",
            "--idle",
            "3",
            "--threads",
            "2",
            "--msg-size",
            "64",
            "--requests",
            "99",
            "--warmup",
            "0.5",
            "--backend",
            "uring",
            "--rate",
            "12.5",
            "--tick-us",
            "250",
            "--bind",
            "127.0.0.2-127.0.0.4",
            "--connect-rate",
            "1000",
            "--cpu",
            "1",
            "--timeout",
            "3",
            "--keepalive",
            "9",
            "--reconnect",
            "2",
            "--json",
            "/tmp/a b.json",
            "--procs",
            "3",
            "--shard",
            "1/4",
            "--hdr-log",
            "/tmp/x.hlog",
            "--first-conn",
            "70",
            "--first-idle",
            "30",
            "--report-progress",
        ]);
        let back = Cli::try_parse_from(std::iter::once(OsString::from("load")).chain(all.to_cli())).unwrap().load;
        assert_eq!(format!("{back:?}"), format!("{all:?}"));
        let few = parse(&["--per-conn", "5", "--mode", "sink", "--shard-count", "3"]);
        let back = Cli::try_parse_from(std::iter::once(OsString::from("load")).chain(few.to_cli())).unwrap().load;
        assert_eq!(format!("{back:?}"), format!("{few:?}"));
    }

    #[test]
    fn a_shard_is_its_share_with_its_own_connection_numbers() {
        let args = parse(&["--conns", "30", "--idle", "3", "--per-conn", "50", "--shard", "2/3"]);
        let (part, of) = resolve_shard(args.clone(), None).unwrap();
        assert_eq!((part.conns, part.idle, part.first_conn, part.first_idle), (10, 1, 20, 2));
        assert_eq!(of, Some(ShardOf { index: 2, count: 3, of_conns: 30, of_idle: 3 }));
        assert!(part.shard.is_none());
        let by_env = parse(&["--conns", "30", "--idle", "3", "--per-conn", "50", "--shard-count", "3"]);
        let (env_part, _) = resolve_shard(by_env.clone(), Some("2")).unwrap();
        assert_eq!(format!("{env_part:?}"), format!("{part:?}"));
        assert!(resolve_shard(by_env, None).unwrap_err().to_string().contains("JOB_COMPLETION_INDEX"));
        let tiny = parse(&["--conns", "2", "--shard", "0/3"]);
        assert!(resolve_shard(tiny, None).unwrap_err().to_string().contains("exceeds"));
    }
}
