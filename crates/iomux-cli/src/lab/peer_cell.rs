//! One E5 cell: a fresh server (`iomux serve` or a peer's, `iomux peer`)
//! pinned to its CPU, `iomux load` as a child process pinned to the
//! other, both watched from outside the same way whoever wrote the server.
//!
//! The window. The load connects first (unmeasured), then measures: it
//! sends from `measure_window.0` for the duration and reports, as
//! `drained_at`, when every message it sent was answered, before it closes
//! anything. Every echo it counts was sent and answered inside
//! [measure start, drained_at], and the server did nothing else then, so
//! that is the window: echoes/s and both sides' CPU are taken over it. The
//! load gives the window on the Unix clock only once it has finished; the
//! sampler (CPU time exact to the ns, every 2 ms) and perf (a count every
//! 10 ms) record on that clock meanwhile, and the window is cut out of
//! their samples afterwards, interpolating at its two edges.

use super::cell::{cpus, data_path_syscalls, f64_of, LOAD_BACKEND};
use super::child::ServerChild;
use super::sampler::{Readings, Sampler, Timeline};
use super::syscount::SyscallCounter;
use crate::CliResult;
use iomux::Backend;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Who serves a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    Iomux(Backend),
    /// A name `iomux peer --server` knows.
    Peer(&'static str),
}

impl Server {
    pub fn name(&self) -> String {
        match self {
            Server::Iomux(b) => format!("iomux-{b}"),
            Server::Peer(p) => p.to_string(),
        }
    }

    pub fn is_iomux(&self) -> bool {
        matches!(self, Server::Iomux(_))
    }

    fn start(&self, cpu: Option<usize>) -> CliResult<ServerChild> {
        match self {
            Server::Iomux(b) => ServerChild::start_procs(*b, "echo", cpu, None, 1),
            Server::Peer(p) => ServerChild::start_peer(p, cpu),
        }
    }
}

/// The load a cell runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    pub conns: usize,
    /// Open loop: messages per second in all; closed loop: None.
    pub rate: Option<f64>,
    pub seconds: f64,
}

/// How long a load may take beyond its duration (connecting, draining)
/// before it is killed; its own stall timeout (30 s) comes first.
const LOAD_SLACK: Duration = Duration::from_secs(120);

/// What one cell measured.
#[derive(Clone, Debug, Default, Serialize)]
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
    pub load_cpu_source: &'static str,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// The server's VmRSS at the end of the window.
    pub rss_bytes: Option<f64>,
    pub syscalls_per_echo: Option<f64>,
    pub syscalls_source: Option<&'static str>,
}

/// How a cell counts the server's syscalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscalls {
    /// perf attached to the server over the window. It slows every
    /// syscall a little, so such a cell's CPU figures are not to be kept.
    Perf,
    /// The server's own count, if it keeps one (iomux does).
    OwnCount,
    Not,
}

pub const PERF_SOURCE: &str = "perf stat over the window";
pub const OWN_SOURCE: &str = "iomux's own count, data path, whole run";

/// Why a cell has no figures.
#[derive(Debug)]
pub enum Failure {
    /// The server did not start (a peer this build lacks): no use trying again.
    NoServer(String),
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NoServer(e) | Failure::Failed(e) => f.write_str(e),
        }
    }
}

/// Runs one cell, its working files in `scratch`.
pub fn run(server: &Server, load: Load, count: Syscalls, scratch: &Path) -> Result<Run, Failure> {
    let (server_cpu, _) = cpus();
    let child = server.start(server_cpu).map_err(|e| Failure::NoServer(e.to_string()))?;
    measure(server, child, load, count, scratch).map_err(|e| Failure::Failed(e.to_string()))
}

fn measure(server: &Server, child: ServerChild, load: Load, count: Syscalls, scratch: &Path) -> CliResult<Run> {
    let (_, load_cpu) = cpus();
    let name = server.name();
    let server_pid = child.pid;
    let sampler = Sampler::start(load_cpu);
    sampler.watch(server_pid);
    let bound = Duration::from_secs_f64(load.seconds) + LOAD_SLACK + Duration::from_secs(10);
    let counter = if count == Syscalls::Perf { Some(SyscallCounter::attach(server_pid, bound)?) } else { None };

    let json_path = scratch.join(format!("{name}-{}.json", load.conns));
    let err_path = scratch.join(format!("{name}-{}.err", load.conns));
    let mut args = child.load_args(LOAD_BACKEND, load_cpu);
    args.conns = load.conns;
    args.threads = 1;
    args.duration = Some(load.seconds);
    args.rate = load.rate;
    args.json = Some(json_path.clone());
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the iomux executable: {e}"))?;
    let err_file = std::fs::File::create(&err_path).map_err(|e| format!("creating {}: {e}", err_path.display()))?;
    let mut load_child = Command::new(exe)
        .arg("load")
        .args(args.to_cli())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("cannot start iomux load: {e}"))?;
    let load_pid = load_child.id();
    sampler.watch(load_pid);
    let exited = wait_sampled(&mut load_child, &sampler, Duration::from_secs_f64(load.seconds) + LOAD_SLACK);
    let readings = sampler.finish();
    let traced = counter.map(SyscallCounter::finish).transpose();
    let stopped = child.stop();
    let status = exited?;
    let said = std::fs::read_to_string(&err_path).unwrap_or_default();
    let text = std::fs::read_to_string(&json_path);
    let _ = std::fs::remove_file(&json_path);
    let _ = std::fs::remove_file(&err_path);
    let report: Option<Value> = text.ok().and_then(|t| serde_json::from_str(&t).ok());
    let Some(report) = report else {
        let last = said.lines().last().unwrap_or("no message");
        return Err(format!("iomux load exited with {status} and wrote no result: {last}").into());
    };
    let errors = report["errors"]["total"].as_u64().unwrap_or(u64::MAX);
    let connected = report["connected"].as_u64().unwrap_or(0);
    if errors > 0 || connected != load.conns as u64 || !status.success() {
        let first = report["errors"]["first"].as_str().unwrap_or("");
        return Err(format!(
            "the load connected {connected} of {}, counted {errors} errors (exit {status}); first: {first}",
            load.conns
        )
        .into());
    }
    let server_stats = stopped?.stats;
    let syscall_timeline = traced?;
    let of = |pid: u32| readings.iter().find(|r| r.pid == pid);
    let own = if count == Syscalls::OwnCount { Some(&server_stats) } else { None };
    figures(&report, (of(server_pid), of(load_pid)), own, syscall_timeline.as_ref())
}

/// Waits for the load, sampling it once it has exited and before it is
/// reaped (its CPU clock still reads then: its final CPU time); kills it
/// after `limit`.
fn wait_sampled(child: &mut Child, sampler: &Sampler, limit: Duration) -> CliResult<std::process::ExitStatus> {
    use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
    let deadline = Instant::now() + limit;
    let pid = i32::try_from(child.id()).ok().and_then(Pid::from_raw).ok_or("iomux load has no pid")?;
    loop {
        let peek = waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT);
        match peek {
            Ok(Some(_)) => {
                sampler.sample_now(child.id());
                return Ok(child.wait().map_err(|e| format!("reaping iomux load: {e}"))?);
            }
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("waiting for iomux load: {e}").into());
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("iomux load did not finish within {} s; killed", limit.as_secs()).into());
        }
        // Seldom: it wakes on either CPU, maybe the server's. When the
        // load is seen gone does not matter: its final CPU time stays.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The cell's figures from the load's report and what was sampled.
fn figures(
    report: &Value,
    (server, load): (Option<&Readings>, Option<&Readings>),
    own_count: Option<&Value>,
    perf: Option<&Timeline>,
) -> CliResult<Run> {
    let start = report["measure_window"][0].as_f64().ok_or("the load reported no measure window")?;
    let end = report["drained_at"].as_f64().ok_or("the load reported no drained_at")?;
    let window = (start, end);
    let window_s = end - start;
    let echoes = report["echoes"].as_u64().unwrap_or(0);
    if echoes == 0 || window_s <= 0.0 {
        return Err(format!("no echoes in the window ({echoes} in {window_s:.3} s)").into());
    }
    let per_echo_us = |s: f64| s * 1e6 / echoes as f64;
    let cut = |r: Option<&Readings>, who: &str| {
        r.and_then(|r| r.cpu_s.over(window))
            .ok_or_else(|| format!("the {who}'s CPU time was not sampled on both sides of the window"))
    };
    let server_cpu_s = cut(server, "server")?;
    // The load's own figure, where its JSON has one: its loops' CPU over
    // this same window, read in-process; else sampled like the server's.
    let (load_cpu_s, load_cpu_source) = match report.get("cpu_s").and_then(Value::as_f64) {
        Some(s) => (s, "load's own report"),
        None => (cut(load, "load")?, "sampled"),
    };
    let (syscalls_per_echo, syscalls_source) = match (perf, own_count) {
        (Some(t), _) => {
            let n = t.over(window).ok_or("perf's counts do not cover the window")?;
            (Some(n / echoes as f64), Some(PERF_SOURCE))
        }
        // iomux's own count: the data path over the server's whole life,
        // all of it for these echoes but for the waits while connecting.
        (None, Some(stats)) if stats.is_object() => {
            (Some(data_path_syscalls(stats) as f64 / echoes as f64), Some(OWN_SOURCE))
        }
        _ => (None, None),
    };
    Ok(Run {
        window,
        window_s,
        setup_s: f64_of(&report["setup_s"]),
        echoes,
        echoes_per_sec: echoes as f64 / window_s,
        server_cpu_s,
        cpu_us_per_echo: per_echo_us(server_cpu_s),
        server_util: server_cpu_s / window_s,
        load_cpu_s,
        load_cpu_us_per_echo: per_echo_us(load_cpu_s),
        load_util: load_cpu_s / window_s,
        load_cpu_source,
        p50_us: f64_of(&report["latency"]["p50_us"]),
        p99_us: f64_of(&report["latency"]["p99_us"]),
        p999_us: f64_of(&report["latency"]["p999_us"]),
        rss_bytes: server.and_then(|r| r.rss_bytes.last_until(end)),
        syscalls_per_echo,
        syscalls_source,
    })
}
