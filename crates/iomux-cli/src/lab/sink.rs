//! E3 `sink`: 40 connections send 100-byte messages without pause; the
//! server only reads. What it costs the server per byte (seed 002).

use super::cell::{self, f64_of};
use super::plot;
use super::table::Table;
use super::{Check, Outcome, Settings};
use crate::load::LoadMode;
use crate::progress::Progress;
use crate::CliResult;
use iomux::Backend;
use serde_json::json;

pub const NAME: &str = "sink";
const SENDERS: usize = 40;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Seconds of sending per backend [default: 2, --full: 10]
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Backends, comma-separated [default: all]
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend)]
    pub backends: Option<Vec<Backend>>,
}

/// The article's epoll traffic, 97,950 kbit/s, as 100-byte messages per second.
const PUBLISHED_RATE: f64 = 97_950_000.0 / 8.0 / 100.0;

pub struct Row {
    pub backend: Backend,
    /// Paced to the article's NIC, or as fast as loopback goes.
    pub paced: bool,
    pub mb_per_sec: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub cpu_s_per_gb: f64,
    pub syscalls_per_mb: f64,
    pub syscalls: serde_json::Value,
}

/// One cell: SENDERS senders for `seconds` (paced or not) against a
/// `backend` sink started with `serve_flags`.
pub fn cell(backend: Backend, paced: bool, seconds: f64, serve_flags: &[String]) -> CliResult<Row> {
    let c = cell::run_with_flags(backend, "sink", 0, serve_flags, |a| {
        a.conns = SENDERS;
        a.mode = LoadMode::Sink;
        a.duration = Some(seconds);
        a.rate = paced.then_some(PUBLISHED_RATE);
    })?;
    let s = &c.server.stats;
    let bytes = s["bytes_in"].as_u64().unwrap_or(0) as f64;
    let secs = f64_of(&c.load["seconds"]);
    let (user, sys) = (f64_of(&s["user_cpu_s"]), f64_of(&s["sys_cpu_s"]));
    Ok(Row {
        backend,
        paced,
        mb_per_sec: bytes / 1e6 / secs,
        user_s: user,
        sys_s: sys,
        cpu_s_per_gb: (user + sys) / (bytes / 1e9),
        syscalls_per_mb: s["syscalls_total"].as_u64().unwrap_or(0) as f64 / (bytes / 1e6),
        syscalls: s["syscalls"].clone(),
    })
}

pub fn run(args: &Args, settings: &Settings) -> CliResult<Outcome> {
    let seconds = args.seconds.unwrap_or(if settings.full { 10.0 } else { 2.0 });
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("--seconds must be positive, not {seconds}").into());
    }
    let backends = args.backends.clone().unwrap_or_else(|| Backend::ALL.to_vec());
    let progress = Progress::new(NAME, 2 * backends.len() as u64);
    let mut rows = Vec::new();
    for paced in [true, false] {
        for &backend in &backends {
            let pace = if paced { "at the article's 97.95 Mbit/s" } else { "unpaced" };
            progress.step(&format!("{backend}: {SENDERS} senders {pace} for {seconds} s"));
            rows.push(cell(backend, paced, seconds, &[])?);
            progress.inc(1);
        }
    }
    progress.finish();

    let cpu_of =
        |b: Backend, paced: bool| rows.iter().find(|r| r.backend == b && r.paced == paced).map(|r| r.cpu_s_per_gb);
    let mut checks = Vec::new();
    for b in [Backend::EpollEt, Backend::Uring] {
        let claim = format!("{b} CPU per GB / poll's, paced as the article's NIC");
        checks.push(
            match (cpu_of(b, true), cpu_of(Backend::Poll, true)) {
                (Some(x), Some(p)) => Check::at_most(&claim, x / p, 1.0, "below poll's".into()),
                _ => Check::not_measured(&claim, 1.0),
            }
            .documents(&format!("{b} uses less CPU per byte than poll")),
        );
    }
    let claim = "uring CPU per GB / epoll-et's, loopback";
    checks.push(match (cpu_of(Backend::Uring, false), cpu_of(Backend::EpollEt, false)) {
        (Some(u), Some(e)) => Check::at_most(claim, u / e, 1.0, "at most epoll-et's".into()),
        _ => Check::not_measured(claim, 1.0),
    });
    let (checks, noise) = settings.judge(checks);

    let mut t = Table::new([
        "backend",
        "pace",
        "MB/s",
        "user s",
        "sys s",
        "CPU s per GB",
        "syscalls per MB",
        "syscalls by kind",
    ]);
    for r in &rows {
        t.row([
            r.backend.name().to_string(),
            if r.paced { "97.95 Mbit/s".to_string() } else { "loopback".to_string() },
            format!("{:.1}", r.mb_per_sec),
            format!("{:.3}", r.user_s),
            format!("{:.3}", r.sys_s),
            format!("{:.3}", r.cpu_s_per_gb),
            format!("{:.1}", r.syscalls_per_mb),
            super::table::kinds(&r.syscalls),
        ]);
    }
    let mut published =
        Table::new(["published (100 Mbit NIC)", "traffic", "server %sys", "server %idle", "process CPU", "strace -c"]);
    published.row(["poll", "95,165 kbit/s", "~78%", "~20%", "56.9%", "111,511 poll + 347,887 read"]);
    published.row(["epoll (ET)", "97,950 kbit/s", "~24%", "~74%", "9.9%", "323,798 epoll_wait + 654,077 read"]);
    let mut md = format!(
        "## E3 sink: {SENDERS} senders, 100-byte messages, the server only reads ({seconds} s per backend)\n\n\
         Machine: {}. Each backend runs twice: with the senders paced to the article's measured 97.95 Mbit/s \
         (its 100 Mbit NIC was the bottleneck, so the server mostly waited for data: the regime the article's \
         CPU figures describe), and unpaced on loopback, where the network is not the bottleneck and every \
         server is busy copying bytes. The figure to compare is CPU per byte. Server CPU is the whole server \
         process's, including io_uring's SQPOLL kernel thread.\n\n",
        settings.machine.summary()
    );
    md += &t.render();
    md += "\nPublished (the article's test; CPU share of one machine while the NIC was saturated):\n\n";
    md += &published.render();
    md += "\n";
    md += &super::render_checks(&checks, noise.as_ref());
    println!("{md}");

    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": {"senders": SENDERS, "msg_size": 100, "seconds": seconds, "paced_msgs_per_sec": PUBLISHED_RATE,
                   "load_backend": cell::LOAD_BACKEND.name()},
        "published": {
            "poll": {"kbit_per_sec": 95165, "sys_pct": 78, "idle_pct": 20, "process_cpu_pct": 56.9,
                     "strace": {"poll": 111511, "read": 347887}},
            "epoll_et": {"kbit_per_sec": 97950, "sys_pct": 24, "idle_pct": 74, "process_cpu_pct": 9.9,
                         "strace": {"epoll_wait": 323798, "read": 654077}}
        },
        "rows": rows.iter().map(|r| json!({
            "backend": r.backend.name(), "paced": r.paced, "mb_per_sec": r.mb_per_sec, "user_s": r.user_s, "sys_s": r.sys_s,
            "cpu_s_per_gb": r.cpu_s_per_gb, "syscalls_per_mb": r.syscalls_per_mb, "syscalls": r.syscalls,
        })).collect::<Vec<_>>(),
        "noise": noise,
        "checks": checks,
    });
    let bars = |paced: bool| -> Vec<(String, f64)> {
        rows.iter().filter(|r| r.paced == paced).map(|r| (r.backend.name().to_string(), r.cpu_s_per_gb)).collect()
    };
    const CPU_PER_GB: &str = "CPU s per GB received (user + system)";
    let svg = plot::bar_panels(&[
        plot::Panel { title: "E3: CPU s per GB, paced (97.95 Mbit/s)", y_label: CPU_PER_GB, bars: bars(true) },
        plot::Panel { title: "E3: CPU s per GB, loopback", y_label: CPU_PER_GB, bars: bars(false) },
    ])?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files })
}
