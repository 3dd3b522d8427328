//! The server side of an experiment: `iomux serve` (or a peer's server,
//! `iomux peer`) as a child process, pinned to its own CPU, stopped with
//! SIGTERM, its stats (iomux's own) read back.
//! Optionally run under `perf stat` (or `strace -c`) to cross-check the
//! library's own syscall count.

use crate::lab::rig::netns::{self, Net};
use crate::load::LoadArgs;
use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use iomux::Backend;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An external syscall counter to run the server under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracer {
    Perf,
    Strace,
}

impl Tracer {
    /// The first one that works on this machine, if any.
    pub fn detect() -> Option<Tracer> {
        let works = |cmd: &str, args: &[&str]| {
            Command::new(cmd).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
        };
        if works("perf", &["stat", "-e", "raw_syscalls:sys_enter", "-x", ",", "--", "true"]) {
            Some(Tracer::Perf)
        } else if works("strace", &["-c", "-f", "-o", "/dev/null", "--", "true"]) {
            Some(Tracer::Strace)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tracer::Perf => "perf stat -e raw_syscalls:sys_enter",
            Tracer::Strace => "strace -c -f",
        }
    }
}

/// How long a server may take to drain and exit after SIGTERM (a million
/// connections over many workers take a while to close).
const STOP_WITHIN_S: u64 = 300;

pub struct ServerChild {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
    /// The command, for messages.
    what: String,
    /// Where `iomux serve` writes its stats (a peer writes none).
    stats_path: Option<PathBuf>,
    trace: Option<(Tracer, PathBuf)>,
    /// Its stderr.
    said: PathBuf,
}

/// What the server reported when it stopped.
pub struct ServerResult {
    /// `iomux serve`'s stats; all zero for a peer.
    pub typed: crate::stats::ServerStats,
    /// Syscalls the external tracer counted for the whole process.
    pub traced: Option<u64>,
}

fn temp(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!("iomux-lab-{}-{}-{name}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

/// `iomux serve` of `backend` and `proto` on `listen`, writing its stats to `stats_path`.
fn serve_args(backend: Backend, proto: &str, listen: &str, stats_path: &std::path::Path) -> Vec<String> {
    let flags = ["--backend", backend.name(), "--proto", proto, "--listen", listen, "--stats-file"];
    std::iter::once("serve").chain(flags).map(String::from).chain([stats_path.display().to_string()]).collect()
}

impl ServerChild {
    /// `iomux serve` as `procs` worker processes on one port (`--procs`;
    /// 1: one process), pinned to `cpu`; the tracer, if any, counts them all.
    pub fn start_procs(
        backend: Backend,
        proto: &str,
        cpu: Option<usize>,
        tracer: Option<Tracer>,
        procs: usize,
    ) -> CliResult<ServerChild> {
        Self::start_with(backend, proto, cpu, tracer, procs, &[])
    }

    /// As [`ServerChild::start_procs`], with more `iomux serve` flags
    /// (`--uring-bundle on`, say).
    pub fn start_with(
        backend: Backend,
        proto: &str,
        cpu: Option<usize>,
        tracer: Option<Tracer>,
        procs: usize,
        serve_flags: &[String],
    ) -> CliResult<ServerChild> {
        let stats_path = temp("stats.json");
        let mut serve_args = serve_args(backend, proto, "127.0.0.1:0", &stats_path);
        if let Some(cpu) = cpu {
            serve_args.extend(["--cpu".into(), cpu.to_string()]);
        }
        if procs > 1 {
            serve_args.extend(["--procs".into(), procs.to_string()]);
        }
        serve_args.extend(serve_flags.iter().cloned());
        Self::spawn(format!("iomux serve --backend {backend}"), serve_args, Some(stats_path), tracer, None)
    }

    /// `iomux serve` inside the server namespace of `net`, listening on
    /// its address there, with more `serve_flags`.
    pub fn start_in(net: &Net, backend: Backend, proto: &str, serve_flags: &[String]) -> CliResult<ServerChild> {
        let stats_path = temp("stats.json");
        let mut serve_args = serve_args(backend, proto, &format!("{}:0", netns::SERVER_IP), &stats_path);
        serve_args.extend(serve_flags.iter().cloned());
        let what = format!("iomux serve --backend {backend} (in the server's network namespace)");
        Self::spawn(what, serve_args, Some(stats_path), None, Some(net))
    }

    /// Another runtime's echo server (`iomux peer --server NAME`), started
    /// and measured from outside exactly as `iomux serve` is; it writes no
    /// stats and dies by the SIGTERM that stops it.
    pub fn start_peer(name: &str, cpu: Option<usize>) -> CliResult<ServerChild> {
        Self::start_peer_with(name, cpu, &[])
    }

    /// As [`ServerChild::start_peer`], with more `iomux peer` flags
    /// (`--upstream` for the relay floor).
    pub fn start_peer_with(name: &str, cpu: Option<usize>, flags: &[String]) -> CliResult<ServerChild> {
        let mut args: Vec<String> =
            vec!["peer".into(), "--server".into(), name.into(), "--listen".into(), "127.0.0.1:0".into()];
        if let Some(cpu) = cpu {
            args.extend(["--cpu".into(), cpu.to_string()]);
        }
        args.extend(flags.iter().cloned());
        Self::spawn(format!("iomux peer --server {name}"), args, None, None, None)
    }

    /// Runs this program with `args` (under `tracer`) and reads its banner:
    /// a line with the address it listens on and `pid N`. On every failure
    /// after the spawn the child is killed and reaped and its files removed.
    fn spawn(
        what: String,
        args: Vec<String>,
        stats_path: Option<PathBuf>,
        tracer: Option<Tracer>,
        net: Option<&Net>,
    ) -> CliResult<ServerChild> {
        let exe = std::env::current_exe().context("cannot find the iomux executable")?;
        let trace = tracer.map(|t| (t, temp("trace.txt")));
        let mut cmd = match (&trace, net) {
            (None, Some(net)) => net.command(netns::Side::Server, exe.as_os_str()),
            (None, None) => Command::new(&exe),
            (Some((Tracer::Perf, out)), _) => {
                let mut c = Command::new("perf");
                c.args(["stat", "-e", "raw_syscalls:sys_enter", "-x", ",", "-o"]).arg(out).arg("--").arg(&exe);
                c
            }
            (Some((Tracer::Strace, out)), _) => {
                let mut c = Command::new("strace");
                c.args(["-c", "-f", "-o"]).arg(out).arg("--").arg(&exe);
                c
            }
        };
        // A file, not a pipe nobody reads; kept until the server stops, for
        // the message of a server that fails to start or fails mid-run.
        let said = temp("stderr.txt");
        let stderr = std::fs::File::create(&said).with_context(|| format!("creating {}", said.display()))?;
        let spawned = cmd.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_file(&said);
                return Err(e).with_context(|| format!("cannot start {what}"));
            }
        };
        // Owned from here on: an early return drops it, which kills and
        // reaps the child and removes its files.
        let mut server = ServerChild {
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            pid: 0,
            what: what.clone(),
            stats_path,
            trace,
            said,
        };
        let stdout = server.child.stdout.take().with_context(|| format!("no stdout from {what}"))?;
        let mut banner = String::new();
        BufReader::new(stdout).read_line(&mut banner).with_context(|| format!("reading the banner of {what}"))?;
        let addr = banner.split_whitespace().find_map(|w| w.parse::<SocketAddr>().ok());
        let pid = banner
            .split("pid ")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse::<u32>().ok());
        match (addr, pid) {
            (Some(addr), Some(pid)) => {
                server.addr = addr;
                server.pid = pid;
                Ok(server)
            }
            _ => {
                server.kill();
                let error = std::fs::read_to_string(&server.said).unwrap_or_default();
                let error = error.lines().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr");
                Err(anyhow!("{what} did not start (it printed {banner:?}; {error})"))
            }
        }
    }

    /// Kills and reaps the child if it is still running.
    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The last line the server wrote on stderr, for a failure's message.
    fn last_said(&self) -> String {
        let text = std::fs::read_to_string(&self.said).unwrap_or_default();
        text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr").trim().to_string()
    }

    /// Descriptors the server has open now.
    pub fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid)).map_or(0, |d| d.count())
    }

    /// Resident memory of the server now, in bytes.
    pub fn rss(&self) -> u64 {
        self.status_kib("VmRSS:") * 1024
    }

    /// The most resident memory the server has had since it started (its
    /// own image's high-water mark: unlike ru_maxrss, it does not include
    /// the parent's pages between fork and exec).
    pub fn peak_rss(&self) -> u64 {
        self.status_kib("VmHWM:") * 1024
    }

    /// Resident memory of the server's worker processes now (`--procs`),
    /// in bytes: what their summed peak RSS in the stats compares with.
    pub fn workers_rss(&self) -> u64 {
        children(self.pid).into_iter().map(|pid| status_kib(pid, "VmRSS:") * 1024).sum()
    }

    fn status_kib(&self, field: &str) -> u64 {
        status_kib(self.pid, field)
    }
    /// A load aimed at this server, pinned to `cpu`.
    pub fn load_args(&self, backend: Backend, cpu: Option<usize>) -> LoadArgs {
        load_args_to(self.addr, backend, cpu)
    }

    /// SIGTERM, wait, read the stats (and the tracer's count).
    pub fn stop(mut self) -> CliResult<ServerResult> {
        let what = self.what.clone();
        if let Err(e) = crate::os::terminate(self.pid) {
            // Gone already (under a tracer, reaped by it): its status says why.
            if !matches!(self.child.try_wait(), Ok(Some(_))) {
                return Err(e).with_context(|| format!("SIGTERM to {what}"));
            }
        }
        let within = crate::os::wait_within(&mut self.child, Duration::from_secs(STOP_WITHIN_S));
        let Some(status) = within.with_context(|| format!("waiting for {what}"))? else {
            self.kill();
            bail!("{what} did not stop within {STOP_WITHIN_S} s of SIGTERM");
        };
        let Some(stats_path) = self.stats_path.take() else {
            // A peer has no handler: SIGTERM's default action ends it.
            use std::os::unix::process::ExitStatusExt;
            if !(status.success() || status.signal() == Some(libc::SIGTERM)) {
                bail!("{what} exited with {status}: {}", self.last_said());
            }
            return Ok(ServerResult { typed: Default::default(), traced: self.traced() });
        };
        if !status.success() {
            let _ = std::fs::remove_file(&stats_path);
            bail!("{what} exited with {status}: {}", self.last_said());
        }
        let text = std::fs::read_to_string(&stats_path)
            .with_context(|| format!("reading server stats {}", stats_path.display()))?;
        let _ = std::fs::remove_file(&stats_path);
        let typed = serde_json::from_str(&text).with_context(|| format!("server stats {}", stats_path.display()))?;
        Ok(ServerResult { typed, traced: self.traced() })
    }

    /// The tracer's count, once the server has exited.
    fn traced(&self) -> Option<u64> {
        self.trace.as_ref().and_then(|(t, path)| {
            let text = std::fs::read_to_string(path).ok()?;
            let _ = std::fs::remove_file(path);
            parse_trace(*t, &text)
        })
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        self.kill();
        let trace = self.trace.as_ref().map(|(_, path)| path);
        for path in self.stats_path.iter().chain(trace).chain([&self.said]) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The processes `pid` started that are still alive (its main thread's
/// children: the servers and loads fork from it); none when it has gone.
pub fn children(pid: u32) -> Vec<u32> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    list.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// A `kB` field of /proc/PID/status, in KiB (0 when unreadable).
/// A `Field: N kB` line of /proc/PID/status in KiB (0 when unreadable).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    crate::os::kib_field(&status, field).unwrap_or(0)
}

/// The total syscall count in perf's CSV (`count,,event,...`) or strace's
/// summary (`... total` line).
fn parse_trace(tracer: Tracer, text: &str) -> Option<u64> {
    match tracer {
        Tracer::Perf => text
            .lines()
            .find(|l| l.contains("raw_syscalls:sys_enter"))
            .and_then(|l| l.split(',').next())
            .and_then(|n| n.trim().parse().ok()),
        Tracer::Strace => text
            .lines()
            .find(|l| l.trim_end().ends_with("total"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|n| n.parse().ok()),
    }
}

/// A load of 10 echo connections aimed at `addr`, pinned to `cpu`: the
/// flags every experiment starts from.
pub fn load_args_to(addr: SocketAddr, backend: Backend, cpu: Option<usize>) -> LoadArgs {
    LoadArgs {
        connect: addr,
        conns: 10,
        idle: 0,
        threads: 1,
        msg_size: 100,
        requests: None,
        duration: None,
        warmup: 0.0,
        backend,
        mode: crate::load::LoadMode::Echo,
        rate: None,
        tick_us: crate::load::DEFAULT_TICK_US,
        bind: None,
        connect_rate: None,
        per_conn: None,
        cpu,
        timeout: 30.0,
        keepalive: 0,
        reconnect: 0,
        json: None,
        procs: 1,
        shard: None,
        shard_count: None,
        hdr_log: None,
        first_conn: 0,
        first_idle: 0,
        report_progress: false,
        subscribers: 20,
        slow_subscribers: 0,
        publishers: 1,
        window: 16,
        channel: "iomux-load".into(),
        tls_ca: None,
        tls_name: "localhost".into(),
        tls_full_handshakes: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_totals_parse() {
        let perf = "# started on Sat\n\n4184461,,raw_syscalls:sys_enter,10000,100.00,,\n";
        assert_eq!(parse_trace(Tracer::Perf, perf), Some(4_184_461));
        let strace = "% time     seconds  usecs/call     calls    errors syscall\n\
                      ------ ----------- ----------- --------- --------- ----------------\n\
                       60.00    0.000060          60         1           epoll_wait\n\
                      ------ ----------- ----------- --------- --------- ----------------\n\
                      100.00    0.000100           5        20         2 total\n";
        assert_eq!(parse_trace(Tracer::Strace, strace), Some(20));
    }
}
