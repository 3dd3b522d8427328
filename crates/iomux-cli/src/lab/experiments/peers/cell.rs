//! One E5 cell: a fresh server (`iomux serve` or a peer's, `iomux peer`)
//! pinned to its CPU, `iomux load` as a child process pinned to the
//! other, both watched from outside the same way whoever wrote the server.
//!
//! The window. The load connects first (unmeasured), then measures: it
//! sends from `measure_window.0` for the duration and reports, as
//! `drained_at`, when every message it sent was answered, before it closes
//! anything. With no warm-up, every echo it counts was sent and answered
//! inside [measure start, drained_at], and the server did nothing else
//! then, so that is the window: echoes/s and both sides' CPU are taken
//! over it. (The load's --warmup would break this: it counts the echoes
//! of messages sent in the warm-up and answered after it, one per
//! connection in a closed loop, whose server work partly precedes the
//! window.) The load gives the window on the Unix clock only once it has
//! finished; the sampler (each process's CPU clock every 2 ms, which read
//! from outside can lag by up to a scheduler tick) and perf (a count every
//! 10 ms) record on that clock meanwhile, and the window is cut out of
//! their samples afterwards, interpolating at its two edges.

use crate::lab::rig::cell::{cpus, LOAD_BACKEND};
use crate::lab::rig::child::ServerChild;
use crate::lab::rig::load_child::{LoadChild, Stderr};
use crate::lab::rig::sampler::{Readings, Sampler, Timeline};
use crate::lab::rig::syscount::SyscallCounter;
use crate::load::result::LoadResult;
use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use iomux::Backend;
use iomux_peers::Peer;
use serde::{Deserialize, Serialize};
use std::process::Command;
use std::time::Duration;

/// Who serves a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Iomux(Backend),
    /// Another runtime's server, run by `iomux peer --server NAME`.
    Peer(Peer),
}

impl Server {
    pub fn name(&self) -> String {
        match self {
            Server::Iomux(b) => format!("iomux-{b}"),
            Server::Peer(p) => p.name().to_string(),
        }
    }

    pub fn is_iomux(&self) -> bool {
        matches!(self, Server::Iomux(_))
    }

    fn start(&self, cpu: Option<usize>) -> CliResult<ServerChild> {
        match self {
            Server::Iomux(b) => ServerChild::start_procs(*b, "echo", cpu, None, 1),
            Server::Peer(p) => ServerChild::start_peer(p.name(), cpu),
        }
    }
}

/// The load a cell runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    pub conns: usize,
    /// Open loop: messages per second in all; closed loop: None.
    pub rate: Option<f64>,
    /// The load's schedule grid (`--tick-us`).
    pub tick_us: u32,
    pub seconds: f64,
}

/// How long a load may take beyond its duration (connecting, draining)
/// before it is killed; its own stall timeout (30 s) comes first.
const LOAD_SLACK: Duration = Duration::from_secs(120);

/// What one cell measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Run {
    /// The load's window: its start of measuring to its last answer (Unix s).
    pub window: (f64, f64),
    pub window_s: f64,
    /// Connecting, before the window.
    pub setup_s: f64,
    pub echoes: u64,
    pub echoes_per_sec: f64,
    pub server_cpu_s: f64,
    pub cpu_us_per_echo: f64,
    /// The server's CPU over the window, in CPUs (1.0: one CPU all the time).
    pub server_util: f64,
    pub load_cpu_s: f64,
    pub load_cpu_us_per_echo: f64,
    pub load_util: f64,
    /// "load's own report" (its JSON's `cpu_s`, when it has one) or "sampled".
    pub load_cpu_source: String,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// The server's VmRSS at the end of the window.
    pub rss_bytes: Option<f64>,
    pub syscalls_per_echo: Option<f64>,
    pub syscalls_source: Option<String>,
}

/// How a cell counts the server's syscalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscalls {
    /// perf attached to the server over the window. It slows every
    /// syscall a little, so such a cell's CPU figures are not to be kept.
    Perf,
    /// Not at all. (iomux's own count covers its whole run, connecting
    /// and closing too, and the peers keep none: not comparable.)
    Not,
}

pub const PERF_SOURCE: &str = "perf stat over the window";

/// Why a cell has no figures.
#[derive(Debug)]
pub enum Failure {
    /// The server did not start: no use trying it again.
    NoServer(String),
    /// perf could not attach to the server: no use trying it again.
    NoPerf(String),
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NoServer(e) | Failure::NoPerf(e) | Failure::Failed(e) => f.write_str(e),
        }
    }
}

/// Runs one cell.
pub fn run(server: &Server, load: Load, count: Syscalls) -> Result<Run, Failure> {
    let (server_cpu, load_cpu) = cpus();
    let child = server.start(server_cpu).map_err(|e| Failure::NoServer(crate::one_line(e)))?;
    // Started after the server, which keeps the mask it had.
    let _pinned = crate::os::PinnedHere::to(load_cpu);
    let sampler = Sampler::start(load_cpu);
    sampler.watch(child.pid);
    let counter = match count {
        Syscalls::Perf => {
            let bound = Duration::from_secs_f64(load.seconds) + LOAD_SLACK + Duration::from_secs(10);
            Some(SyscallCounter::attach(child.pid, bound).map_err(|e| Failure::NoPerf(crate::one_line(e)))?)
        }
        Syscalls::Not => None,
    };
    measure(child, sampler, counter, load).map_err(|e| Failure::Failed(crate::one_line(e)))
}

/// Runs the load against `child`, watched by `sampler` (and `counter`).
fn measure(child: ServerChild, sampler: Sampler, counter: Option<SyscallCounter>, load: Load) -> CliResult<Run> {
    let (_, load_cpu) = cpus();
    let server_pid = child.pid;
    let mut args = child.load_args(LOAD_BACKEND, load_cpu);
    args.conns = load.conns;
    args.threads = 1;
    args.duration = Some(load.seconds);
    args.rate = load.rate;
    args.tick_us = load.tick_us;
    let mut load_child = LoadChild::start(&args, |exe| Command::new(exe), "", Stderr::Kept)?;
    let load_pid = load_child.pid();
    sampler.watch(load_pid);
    let limit = Duration::from_secs_f64(load.seconds) + LOAD_SLACK;
    let exited = load_child.wait(limit, |pid| sampler.sample_now(pid));
    let readings = sampler.finish();
    let traced = counter.map(SyscallCounter::finish).transpose();
    let stopped = child.stop();
    // A server that failed mid-run is why the load failed: say so first.
    let server_failed = stopped.as_ref().err().map_or(String::new(), |e| format!("{}; ", crate::one_line(e)));
    let (status, report) = load_child.outcome(exited?, limit).map_err(|why| anyhow!("{server_failed}{why}"))?;
    let (errors, connected) = (report.errors.total, report.connected);
    if errors > 0 || connected != load.conns as u64 || !status.success() {
        let first = report.errors.first.as_deref().unwrap_or("");
        bail!(
            "{server_failed}the load connected {connected} of {}, counted {errors} errors (exit {status}); first: {first}",
            load.conns
        );
    }
    stopped?;
    let syscall_timeline = traced?;
    let of = |pid: u32| readings.iter().find(|r| r.pid == pid);
    figures(&report, (of(server_pid), of(load_pid)), syscall_timeline.as_ref())
}

/// The cell's figures from the load's report and what was sampled.
fn figures(
    report: &LoadResult,
    (server, load): (Option<&Readings>, Option<&Readings>),
    perf: Option<&Timeline>,
) -> CliResult<Run> {
    let start = report.measure_window.context("the load reported no measure window")?.0;
    let end = report.drained_at.context("the load reported no drained_at")?;
    let window = (start, end);
    let window_s = end - start;
    let echoes = report.echoes;
    if echoes == 0 || window_s <= 0.0 {
        bail!("no echoes in the window ({echoes} in {window_s:.3} s)");
    }
    let per_echo_us = |s: f64| s * 1e6 / echoes as f64;
    let latency = |f: fn(&crate::load::result::Latency) -> f64| report.latency.as_ref().map_or(f64::NAN, f);
    let cut = |r: Option<&Readings>, who: &str| {
        r.and_then(|r| r.cpu_s.over(window))
            .with_context(|| format!("the {who}'s CPU time was not sampled on both sides of the window"))
    };
    let server_cpu_s = cut(server, "server")?;
    // The load's own figure, where its JSON has one: its loops' CPU over
    // this same window, read in-process; else sampled like the server's.
    let (load_cpu_s, load_cpu_source) = match report.cpu_s {
        Some(s) => (s, "load's own report".to_string()),
        None => (cut(load, "load")?, "sampled".to_string()),
    };
    let (syscalls_per_echo, syscalls_source) = match perf {
        Some(t) => {
            let n = t.over(window).context("perf's counts do not cover the window")?;
            (Some(n / echoes as f64), Some(PERF_SOURCE.to_string()))
        }
        None => (None, None),
    };
    Ok(Run {
        window,
        window_s,
        setup_s: report.setup_s,
        echoes,
        echoes_per_sec: echoes as f64 / window_s,
        server_cpu_s,
        cpu_us_per_echo: per_echo_us(server_cpu_s),
        server_util: server_cpu_s / window_s,
        load_cpu_s,
        load_cpu_us_per_echo: per_echo_us(load_cpu_s),
        load_util: load_cpu_s / window_s,
        load_cpu_source,
        p50_us: latency(|l| l.p50_us),
        p99_us: latency(|l| l.p99_us),
        p999_us: latency(|l| l.p999_us),
        rss_bytes: server.and_then(|r| r.rss_bytes.last_until(end)),
        syscalls_per_echo,
        syscalls_source,
    })
}
