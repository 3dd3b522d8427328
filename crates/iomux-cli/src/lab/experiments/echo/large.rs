//! E4 at the article's size: more connections than one process may hold,
//! so the server (`iomux serve --procs`) and the load (`iomux load
//! --procs`) each run as several processes, the load as a child process
//! of its own so that none of its descriptors count against the lab's.
//! Kernel memory is sampled while the connections are held.

use crate::lab::experiments::echo::kernel_memory::Sampler;
use crate::lab::experiments::echo::{KernelMemory, Sample};
use crate::lab::rig::cell::{cpus, LOAD_BACKEND};
use crate::lab::rig::child::{ServerChild, Tracer};
use crate::lab::rig::load_child::{LoadChild, Stderr};
use crate::limits::{self, Need};
use crate::CliResult;
use anyhow::{anyhow, bail};
use iomux::Backend;
use std::process::Command;
use std::time::Duration;

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
    let mut args = server.load_args(LOAD_BACKEND, load_cpu);
    args.procs = u16::try_from(procs).map_err(|_| anyhow!("E4: {procs} load processes are too many"))?;
    (args.conns, args.per_conn, args.timeout) = (conns, Some(messages), 300.0);
    let sampler = Sampler::start();
    // Its progress shows as it goes: a full-size run takes most of an hour.
    let mut load = LoadChild::start(&args, |exe| Command::new(exe), "", Stderr::Shown);
    // A full-size run took 2,216 to 2,522 s of echoes here (docs/
    // experiments/echo.md); its --timeout ends a stall mid-echo, and this
    // cap one anywhere else (a connect that hangs, a child that never ends).
    let cap = Duration::from_secs(4 * 3600);
    let status = load.as_mut().map_err(crate::one_line).and_then(|l| {
        let status = l.wait(cap, |_| {}).map_err(crate::one_line)?;
        status.ok_or_else(|| format!("still running after {} h; killed", cap.as_secs() / 3600))
    });
    let (before, peak) = (sampler.before, sampler.finish());
    let result = server.stop()?;
    let (load, status) = (load?, status.map_err(|e| anyhow!("E4 {backend}: iomux load --procs {procs}: {e}"))?);
    let load = match load.result() {
        Ok(l) if status.success() => l,
        Ok(l) => {
            bail!("E4 {backend}: iomux load --procs {procs} exited with {status}; errors: {:?}", l.errors);
        }
        Err(why) => bail!("E4 {backend}: --procs {procs}, exit {status}: {why}"),
    };
    let expected = conns as u64 * messages;
    if load.errors.total > 0 || load.echoes != expected {
        bail!(
            "E4 {backend} at {conns} connections: {} of {expected} echoes, {} errors: {:?}",
            load.echoes,
            load.errors.total,
            load.errors
        );
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
