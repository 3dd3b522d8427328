//! E4 at the article's size: more connections than one process may hold,
//! so the server (`iomux serve --procs`) and the load (`iomux load
//! --procs`) each run as several processes, the load as a child process
//! of its own so that none of its descriptors count against the lab's.
//! Kernel memory is sampled while the connections are held.

use super::cell::{cpus, f64_of, LOAD_BACKEND};
use super::child::{ServerChild, Tracer};
use super::kernel_memory::{Reading, Sampler};
use crate::limits::{self, Need};
use crate::CliResult;
use iomux::Backend;
use serde_json::{json, Value};
use std::process::{Command, Stdio};

/// Connections one process of either side holds at most: the descriptor
/// limit less what the process keeps for itself, rounded down to a
/// thousand so the split is easy to read.
pub fn conns_per_process(nofile_hard: u64) -> usize {
    let usable = nofile_hard.saturating_sub(limits::FDS_OVERHEAD + 200);
    ((usable / 1000) * 1000).max(1000) as usize
}

/// What one full-size run measured.
pub struct LargeRun {
    pub procs: usize,
    pub load: Value,
    pub server: Value,
    /// Syscalls the external tracer counted over every server process.
    pub traced: Option<u64>,
    /// Server RSS (all processes) when every worker was listening.
    pub server_rss_start: u64,
    pub memory_before: Reading,
    pub memory_peak: Reading,
}

/// Runs `conns` connections x `messages` echoes against `backend` with
/// `procs` processes each side (0: as few as the descriptor limit allows).
pub fn run(
    backend: Backend,
    conns: usize,
    messages: u64,
    procs: usize,
    tracer: Option<Tracer>,
) -> CliResult<LargeRun> {
    let hard = crate::os::nofile_limit().1;
    let procs = if procs == 0 { conns.div_ceil(conns_per_process(hard)) } else { procs };
    let per_process = conns.div_ceil(procs) as u64;
    limits::require(
        &format!("E4 with {conns} connections in {procs} processes each side"),
        &Need {
            sockets: 2 * conns as u64,
            conns_per_dest: conns as u64,
            sources: (conns as u64).div_ceil(limits::CONNS_PER_SOURCE),
            fds_per_process: per_process + limits::FDS_OVERHEAD,
            accept_burst: 4096,
        },
    )?;
    let (server_cpu, load_cpu) = cpus();
    let server = ServerChild::start_procs(backend, "echo", server_cpu, tracer, procs)?;
    let server_rss_start = server.rss_with_workers();
    let json_path = std::env::temp_dir().join(format!("iomux-lab-{}-e4-load.json", std::process::id()));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the iomux executable: {e}"))?;
    let mut load = Command::new(exe);
    load.args(["load", "--connect", &server.addr.to_string(), "--backend", LOAD_BACKEND.name()])
        .args(["--conns", &conns.to_string(), "--per-conn", &messages.to_string()])
        .args(["--procs", &procs.to_string(), "--timeout", "300", "--json"])
        .arg(&json_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(cpu) = load_cpu {
        load.args(["--cpu", &cpu.to_string()]);
    }
    let sampler = Sampler::start();
    let status = load.status().map_err(|e| format!("cannot start iomux load: {e}"))?;
    let memory_before = sampler.before;
    let memory_peak = sampler.finish();
    let result = server.stop()?;
    if !status.success() {
        let said = std::fs::read_to_string(&json_path).unwrap_or_default();
        return Err(format!("E4 {backend}: iomux load --procs {procs} exited with {status} {said}").into());
    }
    let text = std::fs::read_to_string(&json_path).map_err(|e| format!("reading {}: {e}", json_path.display()))?;
    let _ = std::fs::remove_file(&json_path);
    let load: Value = serde_json::from_str(&text)?;
    Ok(LargeRun {
        procs,
        load,
        server: result.stats,
        traced: result.traced,
        server_rss_start,
        memory_before,
        memory_peak,
    })
}

impl LargeRun {
    /// The row's figures, as the table and the JSON show them.
    pub fn figures(&self, conns: usize) -> Value {
        let per_conn = |bytes: u64| bytes as f64 / conns.max(1) as f64;
        let (b, p) = (self.memory_before, self.memory_peak);
        let echoes = self.load["echoes"].as_u64().unwrap_or(0);
        let syscalls = self.server["syscalls_total"].as_u64().unwrap_or(0);
        json!({
            "procs_each_side": self.procs,
            "connected": self.load["connected"],
            "setup_s": self.load["setup_s"],
            "echo_s": self.load["seconds"],
            "echoes": echoes,
            "echoes_per_sec": self.load["echoes_per_sec"],
            "syscalls_total": syscalls,
            "syscalls_per_echo": syscalls as f64 / echoes.max(1) as f64,
            "traced_syscalls": self.traced,
            "p50_us": self.load["latency"]["p50_us"],
            "p99_us": self.load["latency"]["p99_us"],
            "p999_us": self.load["latency"]["p999_us"],
            "errors": self.load["errors"]["total"],
            "server_rss_peak_bytes": self.server["peak_rss_bytes"],
            "server_rss_start_bytes": self.server_rss_start,
            "server_user_bytes_per_conn":
                per_conn(self.server["peak_rss_bytes"].as_u64().unwrap_or(0).saturating_sub(self.server_rss_start)),
            "kernel_slab_bytes_per_conn": per_conn(p.slab.saturating_sub(b.slab)),
            "kernel_tcp_bytes_per_conn": per_conn(p.tcp.saturating_sub(b.tcp)),
            "machine_used_peak_bytes": p.used,
            "machine_used_before_bytes": b.used,
            "tcp_sockets_peak": p.tcp_sockets,
            "server_cpu_s": f64_of(&self.server["user_cpu_s"]) + f64_of(&self.server["sys_cpu_s"]),
            "server_syscalls": self.server["syscalls"],
        })
    }
}
