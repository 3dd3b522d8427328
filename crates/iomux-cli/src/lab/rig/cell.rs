//! One measured cell of a client/server experiment: start the server on
//! its CPU, run the load on the other, stop the server, keep both reports.

use crate::lab::rig::child::{ServerChild, ServerResult, Tracer};
use crate::lab::rig::load_child::{LoadChild, Stderr};
use crate::load::{self, LoadArgs};
use crate::CliResult;
use anyhow::{anyhow, bail};
use iomux::runtime::Control;
use iomux::Backend;
use std::process::Command;
use std::time::{Duration, Instant};

/// The CPUs for server and load: apart when the machine has two or more.
pub fn cpus() -> (Option<usize>, Option<usize>) {
    match crate::os::cpus() {
        n if n >= 2 => (Some(0), Some(1)),
        _ => (None, None),
    }
}

/// The server's CPU and the load's, when the machine has two to pin to.
pub fn pinned() -> Option<(usize, usize)> {
    match cpus() {
        (Some(server), Some(load)) => Some((server, load)),
        _ => None,
    }
}

/// Refuses, before any cell runs, `conns` connections the kernel's limits
/// would not allow: both ends on this machine, one source address, the
/// server's and the load's in one process each.
pub fn require_loopback(what: &str, conns: usize) -> CliResult<()> {
    crate::limits::require(
        &format!("{what} with {conns} connections"),
        &crate::limits::Need {
            sockets: 2 * conns as u64,
            conns_per_dest: conns as u64,
            sources: 1,
            fds_per_process: conns as u64 + crate::limits::FDS_OVERHEAD,
            accept_burst: 0,
        },
    )
}

/// The load runs on io_uring: the cheapest client there is, so that the
/// server, not the load, is what runs out of time.
pub const LOAD_BACKEND: Backend = Backend::Uring;

pub struct Cell {
    pub result: load::result::LoadResult,
    pub server: ServerResult,
    /// Server RSS before the load started.
    pub rss_before: u64,
    /// Server peak RSS (VmHWM) when the load finished.
    pub rss_peak: u64,
}

impl Cell {
    /// Fails, naming `what`, when the load counted any error.
    pub fn require_no_errors(&self, what: &str) -> CliResult<()> {
        match self.result.errors.total {
            0 => Ok(()),
            n => Err(anyhow!("{what}: the load reported {n} errors: {:?}", self.result.errors)),
        }
    }
}

/// Runs `configure`d load against a fresh server of `backend`.
pub fn run(
    backend: Backend,
    proto: &str,
    tracer: Option<Tracer>,
    configure: impl FnOnce(&mut LoadArgs),
) -> CliResult<Cell> {
    run_with_idle(backend, proto, tracer, 0, configure)
}

/// As [`run_with_idle`], the server started with more `iomux serve` flags.
pub fn run_with_flags(
    backend: Backend,
    proto: &str,
    idle: usize,
    serve_flags: &[String],
    configure: impl FnOnce(&mut LoadArgs),
) -> CliResult<Cell> {
    run_cell(backend, proto, None, idle, serve_flags, LoadIn::Lab, configure)
}

/// As [`run`], with `idle` connections opened first by a separate load and
/// held while the measured one runs: the clock starts only once the server
/// has accepted every idle connection.
pub fn run_with_idle(
    backend: Backend,
    proto: &str,
    tracer: Option<Tracer>,
    idle: usize,
    configure: impl FnOnce(&mut LoadArgs),
) -> CliResult<Cell> {
    run_cell(backend, proto, tracer, idle, &[], LoadIn::Lab, configure)
}

fn run_cell(
    backend: Backend,
    proto: &str,
    tracer: Option<Tracer>,
    idle: usize,
    serve_flags: &[String],
    load_in: LoadIn,
    configure: impl FnOnce(&mut LoadArgs),
) -> CliResult<Cell> {
    let (server_cpu, load_cpu) = cpus();
    let server = ServerChild::start_with(backend, proto, server_cpu, tracer, 1, serve_flags)?;
    let rss_before = server.rss();
    let mut args = server.load_args(LOAD_BACKEND, load_cpu);
    configure(&mut args);
    if load_in == LoadIn::Child {
        return child_cell(server, rss_before, &args);
    }
    let outcome = if idle == 0 {
        load::execute(&args, false)?
    } else {
        let holder = Control::new();
        let mut hold = server.load_args(LOAD_BACKEND, load_cpu);
        hold.conns = 0;
        hold.idle = idle;
        hold.duration = Some(3600.0);
        let base = server.fd_count();
        std::thread::scope(|scope| -> CliResult<load::Outcome> {
            let held = scope.spawn(|| load::execute_with(&hold, false, &holder));
            let deadline = Instant::now() + Duration::from_secs(120);
            while server.fd_count() < base + idle {
                if Instant::now() > deadline || held.is_finished() {
                    holder.stop();
                    bail!("{backend}: the server did not accept {idle} idle connections");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let measured = load::execute(&args, false);
            holder.stop();
            let held = held.join().map_err(|_| anyhow!("the idle-connection load panicked"))??;
            let errors = held.report.errors();
            if errors > 0 {
                bail!("{backend}: {errors} errors on the idle connections");
            }
            measured
        })?
    };
    let rss_peak = server.peak_rss();
    let server = server.stop()?;
    Ok(Cell { result: outcome.result, server, rss_before, rss_peak })
}

/// As [`run_with_flags`] without idle connections, with the load in a
/// fresh process of its own rather than the lab's: what the lab's process
/// ran before cannot change the cell. (Large messages were the case seen:
/// io_uring's default echo of 256 KiB messages took 0.20 s of server CPU
/// per GB alone and 0.32 after E4's cells in the same process, which
/// reversed uring-features' send_zc verdict in every quick lab.)
pub fn run_with_load_child(
    backend: Backend,
    proto: &str,
    serve_flags: &[String],
    configure: impl FnOnce(&mut LoadArgs),
) -> CliResult<Cell> {
    run_cell(backend, proto, None, 0, serve_flags, LoadIn::Child, configure)
}

/// Where a cell's load runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LoadIn {
    /// In the lab's own process (threads of it).
    Lab,
    /// In an `iomux load` child process.
    Child,
}

/// The cell's load run as a child process against `server`.
fn child_cell(server: ServerChild, rss_before: u64, args: &LoadArgs) -> CliResult<Cell> {
    let mut load = LoadChild::start(args, |exe| Command::new(exe), "", Stderr::Kept)?;
    let limit = Duration::from_secs_f64(args.duration.unwrap_or(0.0)) + LOAD_CHILD_SLACK;
    let exited = load.wait(limit, |_| {});
    let rss_peak = server.peak_rss();
    let stopped = server.stop();
    let (status, result) = load.outcome(exited?, limit).map_err(anyhow::Error::msg)?;
    if !status.success() {
        bail!("iomux load exited with {status}: {}", load.last_words());
    }
    Ok(Cell { result, server: stopped?, rss_before, rss_peak })
}

/// How long past its duration a child load may take to connect and finish.
const LOAD_CHILD_SLACK: Duration = Duration::from_secs(60);

/// Syscalls of the data path: waits, reads and writes (not accepting,
/// configuring or closing connections).
pub fn data_path(stats: &crate::stats::ServerStats) -> u64 {
    DATA_PATH.iter().map(|&k| stats.syscalls_of(k)).sum()
}

use iomux::Syscall::*;
const DATA_PATH: [iomux::Syscall; 9] =
    [EpollPwait, Ppoll, Pselect6, IoUringEnter, Read, Recvfrom, Write, Sendto, Sendmsg];
