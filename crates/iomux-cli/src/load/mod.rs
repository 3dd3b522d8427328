//! `iomux load`: active and idle connections, closed or open loop, every
//! echoed byte checked, latency in HDR histograms.

mod client;
mod pattern;

pub use client::{LoadMode, Report};

use crate::progress::Progress as Bar;
use crate::CliResult;
use client::{Client, Plan, Progress};
use iomux::runtime::{run_loop, Config, Control};
use iomux::Backend;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Source addresses, one or a range (127.0.0.1-127.0.0.50): more than
    /// one multiplies the ports available towards one server address.
    #[arg(long, value_parser = parse_sources)]
    pub bind: Option<Sources>,
    /// New connections per second, at most.
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
    /// Write every figure as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct Sources(pub Vec<IpAddr>);

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

/// Splits `n` over `parts` as evenly as possible.
fn share(n: usize, parts: usize, i: usize) -> usize {
    n / parts + usize::from(i < n % parts)
}

/// What a finished load run says.
pub struct Outcome {
    pub report: Report,
    pub json: serde_json::Value,
}

pub fn run(args: LoadArgs) -> CliResult<ExitCode> {
    let outcome = execute(&args, true)?;
    let r = &outcome.report;
    print_summary(&args, r);
    if let Some(path) = &args.json {
        crate::stats::write_json(path, &outcome.json)?;
    }
    if r.errors() > 0 {
        eprintln!(
            "iomux load: {} errors{}",
            r.errors(),
            r.first_error.as_ref().map_or(String::new(), |e| format!("; first: {e}"))
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the load and returns the merged report (used by the lab too).
pub fn execute(args: &LoadArgs, show_progress: bool) -> CliResult<Outcome> {
    execute_with(args, show_progress, &Control::new())
}

/// As [`execute`], stopping early (gracefully) when `control` is stopped.
pub fn execute_with(args: &LoadArgs, show_progress: bool, control: &Control) -> CliResult<Outcome> {
    if let Some(r) = args.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(format!("--rate must be a positive number of messages per second, not {r}").into());
        }
        if args.conns == 0 {
            return Err("--rate needs at least one active connection (--conns)".into());
        }
    }
    if let Some(r) = args.connect_rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(format!("--connect-rate must be a positive number per second, not {r}").into());
        }
    }
    if args.per_conn == Some(0) || args.requests == Some(0) {
        return Err("--requests and --per-conn must be at least 1".into());
    }
    let duration = match (args.duration, args.requests.or(args.per_conn)) {
        (Some(d), _) if !(d.is_finite() && d > 0.0) => {
            return Err(format!("--duration must be positive, not {d}").into())
        }
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    if !(args.warmup.is_finite() && args.warmup >= 0.0) {
        return Err(format!("--warmup must be zero or more seconds, not {}", args.warmup).into());
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(format!("--timeout must be a positive number of seconds, not {}", args.timeout).into());
    }
    if args.conns + args.idle == 0 {
        return Err("nothing to do: --conns and --idle are both 0".into());
    }
    let threads = usize::from(args.threads).min((args.conns + args.idle).max(1));
    // Each loop needs a few descriptors of its own (epoll or ring, waker).
    let limit = crate::os::raise_nofile_limit().map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))? as usize;
    let needed = args.conns + args.idle + crate::os::open_fd_count().unwrap_or(8) + 4 * threads;
    if needed > limit {
        return Err(format!(
            "--conns {} + --idle {} need {needed} file descriptors in this process, but RLIMIT_NOFILE allows {limit} \
             (its hard limit); use fewer connections per process and run several `iomux load` processes",
            args.conns, args.idle
        )
        .into());
    }
    let progress = Arc::new(Progress::default());
    let sources = Arc::new(args.bind.clone().map(|s| s.0).unwrap_or_default());
    let rate_per_conn = args.rate.map(|r| r / args.conns as f64);
    let config = Config { backend: args.backend, ..Config::default() };
    let started = Instant::now();
    let mut first_conn = 0u32;
    let mut handles = Vec::new();
    for i in 0..threads {
        let conns = share(args.conns, threads, i);
        let plan = Plan {
            addr: args.connect,
            conns,
            idle: share(args.idle, threads, i),
            first_conn,
            msg_size: args.msg_size as usize,
            mode: args.mode,
            rate_per_conn,
            duration,
            requests: args.requests.map(|r| share(r as usize, threads, i) as u64),
            per_conn: args.per_conn,
            warmup: Duration::from_secs_f64(args.warmup),
            sources: sources.clone(),
            connect_rate: args.connect_rate.map(|r| r / threads as f64),
            progress: progress.clone(),
            grace: Duration::from_secs(5),
            stall_timeout: Duration::from_secs_f64(args.timeout),
        };
        first_conn += conns as u32;
        let (config, control) = (config.clone(), control.clone());
        let cpu = args.cpu;
        let handle = std::thread::Builder::new().name(format!("iomux-load-{i}")).spawn(move || {
            if let Some(cpu) = cpu {
                if let Err(e) = crate::os::pin_to_cpu(cpu) {
                    eprintln!("iomux load: cannot pin to CPU {cpu}: {e}");
                }
            }
            let mut client = Client::new(plan);
            let stats = run_loop(&config, None, &mut client, &control);
            (client.report, stats)
        })?;
        handles.push(handle);
    }
    let total_secs = duration.map(|d| d.as_secs_f64() + args.warmup);
    let total_msgs = args.requests.unwrap_or(0) + args.per_conn.unwrap_or(0) * args.conns as u64;
    let bar = show_progress.then(|| Bar::new("load", total_secs.map_or(total_msgs, |s| s.ceil() as u64)));
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(200));
        if let Some(bar) = &bar {
            let secs = started.elapsed().as_secs_f64();
            bar.set_position(match total_secs {
                Some(_) => secs as u64,
                None => progress.echoes.load(Ordering::Relaxed),
            });
            bar.set_message(&format!(
                "{} connected, {} echoes, {} errors",
                progress.connected.load(Ordering::Relaxed),
                progress.echoes.load(Ordering::Relaxed),
                progress.errors.load(Ordering::Relaxed)
            ));
        }
    }
    if let Some(bar) = &bar {
        bar.finish();
    }
    let mut report = Report::default();
    let mut loop_stats = iomux::runtime::LoopStats::default();
    for h in handles {
        let (r, stats) = h.join().map_err(|_| "a load thread panicked")?;
        report.merge(&r);
        loop_stats.merge(&stats?);
    }
    if report.connected == 0 && !report.connect_errors.is_empty() {
        return Err(format!(
            "server unreachable at {}: {}",
            args.connect,
            report.first_error.clone().unwrap_or_else(|| "every connect failed".into())
        )
        .into());
    }
    let json = report_json(args, &report, &loop_stats)?;
    Ok(Outcome { report, json })
}

fn per_sec(n: u64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

fn report_json(args: &LoadArgs, r: &Report, stats: &iomux::runtime::LoopStats) -> CliResult<serde_json::Value> {
    let us = |q: f64| r.latency.value_at_quantile(q) as f64 / 1000.0;
    let has_latency = !r.latency.is_empty();
    let latency = has_latency.then(|| {
        json!({"p50_us": us(0.5), "p90_us": us(0.9), "p99_us": us(0.99), "p999_us": us(0.999),
               "max_us": r.latency.max() as f64 / 1000.0, "mean_us": r.latency.mean() / 1000.0,
               "count": r.latency.len()})
    });
    let client = crate::stats::stats_json(stats, args.backend, &[])?;
    Ok(json!({
        "connect": args.connect.to_string(),
        "conns": args.conns,
        "idle": args.idle,
        "threads": args.threads,
        "msg_size": args.msg_size,
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "rate": args.rate,
        "backend": args.backend.name(),
        "connected": r.connected,
        "seconds": r.measured.as_secs_f64(),
        "echoes": r.echoes,
        "echo_bytes": r.echo_bytes,
        "sent_messages": r.sent_messages,
        "sent_bytes": r.sent_bytes,
        "echoes_per_sec": per_sec(r.echoes, r.measured),
        "mb_per_sec": per_sec(r.echo_bytes.max(if args.mode == LoadMode::Sink { r.sent_bytes } else { 0 }), r.measured) / 1e6,
        "latency": latency,
        "errors": {
            "total": r.errors(),
            "mismatches": r.mismatches,
            "unexpected_closes": r.unexpected_closes,
            "unanswered": r.unanswered,
            "connect": r.connect_errors,
            "first": r.first_error,
        },
        "client": client,
    }))
}

fn print_summary(args: &LoadArgs, r: &Report) {
    let secs = r.measured.as_secs_f64();
    let loop_kind = match (args.mode, args.rate) {
        (LoadMode::Sink, _) => "sink".to_string(),
        (LoadMode::Echo, Some(rate)) => format!("echo, open loop at {rate} msg/s"),
        (LoadMode::Echo, None) => "echo, closed loop".to_string(),
    };
    println!(
        "iomux load: {} connections (+{} idle) to {}, client backend {}, {} thread(s), {loop_kind}, {} B messages",
        args.conns, args.idle, args.connect, args.backend, args.threads, args.msg_size
    );
    if args.mode == LoadMode::Sink {
        println!(
            "  {secs:.2} s: {} messages sent, {:.0} msg/s, {:.2} MB/s",
            r.sent_messages,
            per_sec(r.sent_messages, r.measured),
            per_sec(r.sent_bytes, r.measured) / 1e6
        );
    } else {
        println!(
            "  {secs:.2} s: {} echoes verified, {:.0} echoes/s, {:.2} MB/s each way",
            r.echoes,
            per_sec(r.echoes, r.measured),
            per_sec(r.echo_bytes, r.measured) / 1e6
        );
        if !r.latency.is_empty() {
            let us = |q: f64| r.latency.value_at_quantile(q) as f64 / 1000.0;
            println!(
                "  latency (us): p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
                us(0.5),
                us(0.9),
                us(0.99),
                us(0.999),
                r.latency.max() as f64 / 1000.0
            );
        }
    }
    let connect: Vec<String> = r.connect_errors.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    println!(
        "  errors: {} mismatched, {} closed early, {} unanswered, connect errors: {}",
        r.mismatches,
        r.unexpected_closes,
        r.unanswered,
        if connect.is_empty() { "none".to_string() } else { connect.join(", ") }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ranges_parse() {
        let s = parse_sources("127.0.0.1-127.0.0.3").unwrap();
        assert_eq!(s.0.len(), 3);
        assert_eq!(s.0[2], "127.0.0.3".parse::<IpAddr>().unwrap());
        assert_eq!(parse_sources("127.0.0.9").unwrap().0.len(), 1);
        assert!(parse_sources("127.0.0.9-127.0.0.1").unwrap_err().contains("ends before"));
        assert!(parse_sources("nope").unwrap_err().contains("not an IPv4"));
    }

    #[test]
    fn shares_add_up() {
        for (n, parts) in [(10, 3), (100, 7), (0, 2), (5, 5)] {
            assert_eq!((0..parts).map(|i| share(n, parts, i)).sum::<usize>(), n);
        }
    }
}
