//! E4 at the article's size: more connections than one process may hold,
//! so the server (`iomux serve --procs`) and the load (`iomux load
//! --procs`) each run as several processes, the load as a child process
//! of its own so that none of its descriptors count against the lab's.
//! Kernel memory is sampled while the connections are held.

use crate::lab::experiments::echo::kernel_memory::Sampler;
use crate::lab::experiments::echo::{KernelMemory, Sample};
use crate::lab::rig::cell::{cpus, LOAD_BACKEND};
use crate::lab::rig::child::{ServerChild, Tracer};
use crate::limits::{self, Need};
use crate::load::result::LoadResult;
use crate::CliResult;
use iomux::Backend;
use std::process::{Command, Stdio};

/// Connections one process of either side holds at most: the descriptor
/// limit less what the process keeps for itself, rounded down to a
/// thousand so the split is easy to read.
pub fn conns_per_process(nofile_hard: u64) -> usize {
    let usable = nofile_hard.saturating_sub(limits::FDS_OVERHEAD + 200);
    ((usable / 1000) * 1000).max(1000) as usize
}

/// Processes each side for `conns`: `procs`, or as few as the
/// descriptor limit allows when 0.
pub fn procs_for(conns: usize, procs: usize) -> usize {
    if procs == 0 {
        conns.div_ceil(conns_per_process(crate::os::nofile_limit().1))
    } else {
        procs
    }
}

/// Refuses, before anything runs, a size the kernel's limits would not allow.
pub fn require(conns: usize, procs: usize) -> CliResult<()> {
    let procs = procs_for(conns, procs);
    limits::require(
        &format!("E4 with {conns} connections in {procs} processes each side"),
        &Need {
            sockets: 2 * conns as u64,
            conns_per_dest: conns as u64,
            sources: (conns as u64).div_ceil(limits::CONNS_PER_SOURCE),
            fds_per_process: conns.div_ceil(procs) as u64 + limits::FDS_OVERHEAD,
            accept_burst: 4096,
        },
    )
}

/// Runs `conns` connections x `messages` echoes against `backend` with
/// `procs` processes each side (0: as few as the descriptor limit allows).
pub fn run(backend: Backend, conns: usize, messages: u64, procs: usize, tracer: Option<Tracer>) -> CliResult<Sample> {
    require(conns, procs)?;
    let procs = procs_for(conns, procs);
    let (server_cpu, load_cpu) = cpus();
    let server = ServerChild::start_procs(backend, "echo", server_cpu, tracer, procs)?;
    let server_rss_start = server.workers_rss();
    // Removed with its contents however the run ends.
    let dir = crate::os::PrivateDir::new("iomux-lab-e4", "the load's result")?;
    let json_path = dir.0.join("load.json");
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
    let status = load.status();
    let (before, peak) = (sampler.before, sampler.finish());
    let result = server.stop()?;
    let status = status.map_err(|e| format!("cannot start iomux load: {e}"))?;
    let text = std::fs::read_to_string(&json_path);
    let load: Option<LoadResult> = text.as_ref().ok().and_then(|t| serde_json::from_str(t).ok());
    let load = match load {
        Some(l) if status.success() => l,
        Some(l) => {
            return Err(format!(
                "E4 {backend}: iomux load --procs {procs} exited with {status}; errors: {:?}",
                l.errors
            )
            .into())
        }
        None => {
            let why = text.map_or_else(|e| e.to_string(), |_| "not a load result".into());
            return Err(format!(
                "E4 {backend}: iomux load --procs {procs} exited with {status}; {}: {why}",
                json_path.display()
            )
            .into());
        }
    };
    let expected = conns as u64 * messages;
    if load.errors.total > 0 || load.echoes != expected {
        return Err(format!(
            "E4 {backend} at {conns} connections: {} of {expected} echoes, {} errors: {:?}",
            load.echoes, load.errors.total, load.errors
        )
        .into());
    }
    let per_conn = |bytes: u64| bytes as f64 / conns.max(1) as f64;
    let server_rss = per_conn(result.typed.peak_rss_bytes.saturating_sub(server_rss_start));
    let kernel = KernelMemory {
        slab_bytes_per_conn: per_conn(peak.slab.saturating_sub(before.slab)),
        tcp_bytes_per_conn: per_conn(peak.tcp.saturating_sub(before.tcp)),
        machine_used_peak_bytes: peak.used,
        tcp_sockets_peak: peak.tcp_sockets,
    };
    Ok(Sample::of(conns, &load, &result, server_rss, Some(kernel)))
}
