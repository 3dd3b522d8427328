//! `iomux serve --procs P`: a parent that runs P worker processes on one
//! address, as nginx's master does. One process may hold only its
//! RLIMIT_NOFILE of descriptors; P workers together hold P times that.
//!
//! The parent serves nothing itself. It reserves the address (a bound but
//! not listening SO_REUSEPORT socket, so the port stays this server's,
//! also while a worker restarts), starts each worker as `iomux serve
//! --worker N` with the same flags, prints one banner once all of them
//! listen, restarts a worker that dies, passes SIGINT/SIGTERM on as
//! SIGTERM, and merges the workers' stats files once all have stopped.

use super::ServeArgs;
use crate::stats::{summary, write_json, ServerStats};
use crate::CliResult;
use anyhow::{anyhow, Context as _};
use iomux::Backend;
use serde_json::{json, Value};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The exit status when a worker died unexpectedly (see `--procs`).
const WORKER_DIED: u8 = 3;
/// More deaths than this of one worker within [`CRASH_WINDOW`] is a crash
/// loop: restarting again would only burn CPU, so the server stops.
const CRASH_LIMIT: usize = 5;
const CRASH_WINDOW: Duration = Duration::from_secs(10);
/// How long the parent may miss a SIGCHLD (signals of one kind coalesce)
/// before it looks at its workers anyway.
const REAP_EVERY: Duration = Duration::from_millis(200);
/// What a worker's banner starts with (see `serve`).
const LISTENING: &str = "iomux serve: listening on ";

/// What the parent's main loop waits for.
enum Event {
    /// SIGINT, SIGTERM or SIGCHLD.
    Signal(i32),
    /// A worker process printed its banner.
    Listening { pid: u32 },
}

/// One worker process: a worker number runs several after restarts.
struct Incarnation {
    worker: u16,
    pid: u32,
    stats_file: PathBuf,
    /// How it ended (None: it could not be waited for).
    exit: Option<ExitStatus>,
}

/// Worker number `n`'s slot.
struct Worker {
    n: u16,
    running: Option<Running>,
    /// Processes started for this number so far.
    started: u32,
    /// When the current process printed its banner.
    listening: bool,
    /// Recent unexpected deaths, for the crash-loop guard.
    deaths: VecDeque<Instant>,
}

/// A worker process that has not been reaped yet (so its pid is still
/// its own: signalling it cannot reach another process).
struct Running {
    child: Child,
    /// Held and never written: the worker stops if it closes (the parent
    /// died), see `stop_when_orphaned`.
    _stdin: ChildStdin,
    /// The threads copying its stdout and stderr.
    pipes: Vec<JoinHandle<()>>,
    /// Its entry in `Supervisor::runs`.
    run: usize,
}

struct Supervisor<'a> {
    args: &'a ServeArgs,
    backend: Backend,
    /// The concrete address every worker listens on.
    addr: SocketAddr,
    exe: PathBuf,
    dir: crate::os::PrivateDir,
    events: Sender<Event>,
    workers: Vec<Worker>,
    runs: Vec<Incarnation>,
    /// SIGTERM went to the workers: an exit now is the end, not a death.
    stopping: bool,
    /// The parent printed its banner: every worker was listening.
    announced: bool,
    restarts: u64,
    /// A worker died while serving: the exit status is [`WORKER_DIED`].
    died: bool,
    /// Why the run failed otherwise (start-up, a failed stop).
    failed: Option<String>,
}

pub(super) fn run(args: &ServeArgs, backend: Backend) -> CliResult<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the iomux executable to start workers")?;
    // Three pipes per worker: 256 workers need more than the usual 1,024
    // descriptors. Best effort: with fewer, starting a worker fails clearly.
    let _ = crate::os::raise_nofile_limit();
    let (reservation, addr) = reserve(args.listen)?;
    let dir = crate::os::PrivateDir::new("iomux-serve", "the workers' stats")?;
    let (events, rx) = mpsc::channel();
    // Before any worker exists, so that no SIGCHLD is missed.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGCHLD])
        .context("cannot handle SIGINT/SIGTERM/SIGCHLD")?;
    let signal_handle = signals.handle();
    let to_main = events.clone();
    let signal_thread = spawn_thread("serve-signals", move || {
        for signal in signals.forever() {
            if to_main.send(Event::Signal(signal)).is_err() {
                break;
            }
        }
    })?;
    let mut sup = Supervisor {
        args,
        backend,
        addr,
        exe,
        dir,
        events,
        workers: (0..args.procs)
            .map(|n| Worker { n, running: None, started: 0, listening: false, deaths: VecDeque::new() })
            .collect(),
        runs: Vec::new(),
        stopping: false,
        announced: false,
        restarts: 0,
        died: false,
        failed: None,
    };
    for n in 0..args.procs {
        if let Err(e) = sup.start(n) {
            sup.fail(crate::one_line(e));
            break;
        }
    }
    sup.supervise(&rx);
    signal_handle.close();
    let _ = signal_thread.join();
    drop(reservation);
    sup.finish()
}

impl Supervisor<'_> {
    /// Until every worker has ended: reacts to signals, banners and deaths.
    fn supervise(&mut self, rx: &Receiver<Event>) {
        while self.workers.iter().any(|w| w.running.is_some()) {
            match rx.recv_timeout(REAP_EVERY) {
                Ok(event) => self.handle(event),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
            self.reap(rx);
            if !self.announced && !self.stopping && self.workers.iter().all(|w| w.listening) {
                self.announced = true;
                let args = self.args;
                let threads = args.threads;
                // Ignored: whoever started us may have stopped reading.
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "{LISTENING}{} (pid {}, backend {}, proto {}, {} procs x {threads} thread{})",
                    self.addr,
                    std::process::id(),
                    self.backend,
                    args.proto.name(),
                    args.procs,
                    if threads == 1 { "" } else { "s" }
                );
                let _ = out.flush();
            }
        }
    }

    /// Starts worker `n` (again, after a death).
    fn start(&mut self, n: u16) -> CliResult<()> {
        let worker = &mut self.workers[usize::from(n)];
        worker.started += 1;
        worker.listening = false;
        let stats_file = self.dir.path().join(format!("worker-{n}-{}.json", worker.started));
        let mut child = Command::new(&self.exe)
            .arg("serve")
            .args(self.args.worker_args(n, self.backend, self.addr, stats_file.clone()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own: a terminal's Ctrl-C reaches the parent
            // only, which passes on one SIGTERM (a second signal would end
            // the worker at once instead of letting it drain).
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start worker {n} ({})", self.exe.display()))?;
        let pid = child.id();
        let pipes = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(stdin), Some(stdout), Some(stderr)) => {
                copy_pipes(n, pid, stdout, stderr, &self.events).map(|pipes| (stdin, pipes)).map_err(Into::into)
            }
            _ => Err(anyhow!("its pipes are missing")),
        };
        let (stdin, pipes) = match pipes {
            Ok(p) => p,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context(format!("cannot watch worker {n} (pid {pid})")));
            }
        };
        self.runs.push(Incarnation { worker: n, pid, stats_file, exit: None });
        let run = self.runs.len() - 1;
        self.workers[usize::from(n)].running = Some(Running { child, _stdin: stdin, pipes: pipes.into(), run });
        Ok(())
    }

    fn listening(&mut self, pid: u32) {
        let worker = self.workers.iter_mut().find(|w| w.running.as_ref().is_some_and(|r| r.child.id() == pid));
        // None: a process that has died since; its successor will say so.
        if let Some(worker) = worker {
            worker.listening = true;
            if worker.started > 1 {
                eprintln!("iomux serve: worker {} restarted (pid {pid}), listening again", worker.n);
            }
        }
    }

    /// SIGTERM to every worker: each stops accepting and drains. A second
    /// call (a second SIGINT/SIGTERM) ends them at once, as their own
    /// second signal would.
    fn stop(&mut self) {
        self.stopping = true;
        for running in self.workers.iter().filter_map(|w| w.running.as_ref()) {
            // Fails only for a process that is gone, which reap will see.
            let _ = crate::os::terminate(running.child.id());
        }
    }

    /// Gives up: the reason is the run's error, and every worker stops.
    fn fail(&mut self, why: String) {
        self.failed.get_or_insert(why);
        self.stop();
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Signal(SIGCHLD) => {}
            Event::Signal(_) => self.stop(),
            Event::Listening { pid } => self.listening(pid),
        }
    }

    /// Waits for the workers that have ended, and acts on each.
    fn reap(&mut self, rx: &Receiver<Event>) {
        for i in 0..self.workers.len() {
            let Some(running) = &mut self.workers[i].running else { continue };
            let exit = match running.child.try_wait() {
                Ok(None) => continue,
                Ok(Some(status)) => Some(status),
                Err(e) => {
                    // Cannot happen for our own child; if it does, it must
                    // not be waited on forever either.
                    let pid = running.child.id();
                    let _ = running.child.kill();
                    self.failed.get_or_insert(format!("cannot wait for worker process {pid}: {e}"));
                    None
                }
            };
            // Its last words first, then what the parent says of it.
            let pipes = self.workers[i].running.as_mut().map(|r| std::mem::take(&mut r.pipes)).unwrap_or_default();
            for pipe in pipes {
                let _ = pipe.join();
            }
            // Its pipes are closed and read: a banner it printed just before
            // it died is in the channel now, and must count before `ended`
            // (while the worker is still found by its pid).
            while let Ok(event) = rx.try_recv() {
                self.handle(event);
            }
            let Some(running) = self.workers[i].running.take() else { continue };
            self.runs[running.run].exit = exit;
            if let Some(status) = exit {
                self.ended(i, self.runs[running.run].pid, status);
            }
        }
    }

    /// Worker slot `i`'s process `pid` ended with `status`.
    fn ended(&mut self, i: usize, pid: u32, status: ExitStatus) {
        let worker = &mut self.workers[i];
        let who = format!("worker {} (pid {pid})", worker.n);
        if self.stopping {
            // A SIGTERM that came before the worker handled signals ends
            // it by default: a stop too. After its banner it handles them,
            // and only a second one (the user's second signal) ends it so,
            // its figures lost: that is said, and the exit status says it.
            let stopped_early = !worker.listening && matches!(status.signal(), Some(SIGTERM | SIGINT));
            if !status.success() && !stopped_early {
                self.failed.get_or_insert(format!("{who} {} while stopping", describe(status)));
            }
            return;
        }
        if worker.started == 1 && !worker.listening {
            // Its own error (address, limits, backend) is on stderr already.
            self.fail(format!("{who} {} before it listened", describe(status)));
            return;
        }
        self.died = true;
        let now = Instant::now();
        worker.deaths.push_back(now);
        while worker.deaths.front().is_some_and(|&t| now.duration_since(t) > CRASH_WINDOW) {
            worker.deaths.pop_front();
        }
        if worker.deaths.len() > CRASH_LIMIT {
            eprintln!(
                "iomux serve: {who} {}; it died {} times within {} s, so it is not restarted: stopping",
                describe(status),
                worker.deaths.len(),
                CRASH_WINDOW.as_secs()
            );
            self.stop();
            return;
        }
        eprintln!("iomux serve: {who} {}; restarting", describe(status));
        let n = worker.n;
        match self.start(n) {
            Ok(()) => self.restarts += 1,
            Err(e) => self.fail(crate::one_line(e)),
        }
    }

    /// After every worker has ended: the merged figures, the summary, the
    /// exit status.
    fn finish(self) -> CliResult<ExitCode> {
        if !self.announced {
            // Never served: there are no figures to speak of.
            return Err(anyhow::Error::msg(
                self.failed.unwrap_or_else(|| "stopped before every worker listened".into()),
            ));
        }
        let mut workers = Vec::new();
        let mut lost = Vec::new();
        let mut failed = self.failed;
        let mut runs: Vec<&Incarnation> = self.runs.iter().collect();
        runs.sort_by_key(|run| run.worker); // stable: a worker's processes in order
        for run in runs {
            let exit = run.exit.map_or_else(|| "unknown".to_string(), describe);
            match read_stats(&run.stats_file) {
                Ok(stats) => workers.push(WorkerStats { worker: run.worker, pid: run.pid, stats }),
                Err(why) => {
                    if run.exit.is_some_and(|s| s.success()) {
                        failed.get_or_insert(format!("worker {} (pid {}) left no stats: {why}", run.worker, run.pid));
                    }
                    lost.push(json!({ "worker": run.worker, "pid": run.pid, "exit": exit }));
                }
            }
        }
        let args = self.args;
        let proto = args.proto.name();
        let mut merged =
            ServerStats { backend: self.backend.name().into(), proto: Some(proto.into()), ..Default::default() };
        workers.iter().for_each(|w| merged.merge(&w.stats));
        let restarts = match self.restarts {
            0 => String::new(),
            1 => ", 1 restart".to_string(),
            n => format!(", {n} restarts"),
        };
        eprintln!("iomux serve: stopped ({} procs{restarts}). {}", args.procs, summary(&merged));
        if let Some(path) = &args.stats_file {
            let stats = Supervised { stats: merged, procs: args.procs, restarts: self.restarts, workers, lost };
            write_json(path, &serde_json::to_value(&stats)?)?;
        }
        if self.died {
            // The death decides the status; anything else is said too.
            if let Some(why) = failed {
                eprintln!("iomux serve: {why}");
            }
            return Ok(ExitCode::from(WORKER_DIED));
        }
        match failed {
            Some(why) => Err(anyhow::Error::msg(why)),
            None => Ok(ExitCode::SUCCESS),
        }
    }
}

/// Threads that copy worker `n`'s stdout (its banner: an event; anything
/// else: to the parent's stdout) and stderr (each line marked with the
/// worker's number) until the worker closes them.
fn copy_pipes(
    n: u16,
    pid: u32,
    stdout: impl Read + Send + 'static,
    stderr: impl Read + Send + 'static,
    events: &Sender<Event>,
) -> std::io::Result<[JoinHandle<()>; 2]> {
    let events = events.clone();
    let out = spawn_thread(&format!("worker-{n}-stdout"), move || {
        for_each_line(stdout, |line| {
            if line.starts_with(LISTENING.as_bytes()) {
                let _ = events.send(Event::Listening { pid });
            } else {
                let _ = std::io::stdout().lock().write_all(line);
            }
        })
    })?;
    let err = spawn_thread(&format!("worker-{n}-stderr"), move || {
        for_each_line(stderr, |line| {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "[worker {n}] ");
            let _ = err.write_all(line);
        })
    })?;
    Ok([out, err])
}

/// Calls `f` with each line of `from` (newline included), until EOF or an
/// error; lines need not be UTF-8.
fn for_each_line(from: impl Read, mut f: impl FnMut(&[u8])) {
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    while let Ok(1..) = from.read_until(b'\n', &mut line) {
        f(&line);
        line.clear();
    }
}

/// A named thread with a small stack: the parent runs two per worker.
fn spawn_thread(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).stack_size(64 << 10).spawn(f)
}

/// Binds (without listening) a SO_REUSEPORT socket to `addr`: port 0
/// becomes a concrete port for every worker, and no program without
/// SO_REUSEPORT can take the port while this server runs, even between a
/// worker's death and its restart. A port some other socket holds, or
/// one another server listens on with SO_REUSEPORT, is refused here, as
/// "address in use", before any worker starts. Bound only, the socket
/// gets no connections.
fn reserve(addr: SocketAddr) -> CliResult<(OwnedFd, SocketAddr)> {
    use rustix::net::{bind, getsockname, socket_with, sockopt, AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd = socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
        .with_context(|| format!("cannot reserve {addr}: socket"))?;
    // As the workers' listeners have them: the kernel lets sockets share
    // a port only if they all set SO_REUSEPORT.
    sockopt::set_socket_reuseaddr(&fd, true).with_context(|| format!("cannot reserve {addr}: SO_REUSEADDR"))?;
    sockopt::set_socket_reuseport(&fd, true).with_context(|| format!("cannot reserve {addr}: SO_REUSEPORT"))?;
    bind(&fd, &addr).map_err(|e| iomux::Error::Bind { addr, source: e.into() })?;
    let local = getsockname(&fd)
        .ok()
        .and_then(|a| SocketAddr::try_from(a).ok())
        .with_context(|| format!("cannot read back the address {addr} was bound to"))?;
    // SO_REUSEPORT would let this server join another one that listens
    // with it (same user) and silently share its connections: refuse that.
    if let Some(other) = listener_on(local) {
        return Err(iomux::Error::Bind {
            addr: local,
            source: std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("another socket already listens on {other} (see ss -ltnp)"),
            ),
        }
        .into());
    }
    Ok((fd, local))
}

/// A socket already listening on `addr`'s port at an address that
/// overlaps it (the same, or a wildcard on either side), from
/// /proc/net/tcp and tcp6 (`st` 0A is LISTEN); its local address as the
/// kernel writes it.
fn listener_on(addr: SocketAddr) -> Option<String> {
    let port = format!("{:04X}", addr.port());
    let ours = match addr {
        // /proc/net/tcp writes an IPv4 address as the hex of its
        // in-memory (network order) u32 read as host (little-endian) order.
        SocketAddr::V4(a) => format!("{:08X}", u32::from_le_bytes(a.ip().octets())),
        SocketAddr::V6(_) => String::new(),
    };
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(&"0A")) = (fields.get(1), fields.get(3)) else { continue };
            let Some((ip, p)) = local.split_once(':') else { continue };
            let wildcard = |ip: &str| ip.bytes().all(|b| b == b'0');
            if p == port && (ip == ours || wildcard(ip) || ours.is_empty() || addr.ip().is_unspecified()) {
                return Some(local.to_string());
            }
        }
    }
    None
}

/// What `serve --procs --stats-file` writes: the workers' figures merged,
/// and each worker's.
#[derive(serde::Serialize)]
struct Supervised {
    #[serde(flatten)]
    stats: ServerStats,
    procs: u16,
    restarts: u64,
    workers: Vec<WorkerStats>,
    /// Worker processes killed before they wrote their figures (they were
    /// in their memory only): the sums above leave them out.
    lost: Vec<Value>,
}

#[derive(serde::Serialize)]
struct WorkerStats {
    worker: u16,
    pid: u32,
    #[serde(flatten)]
    stats: ServerStats,
}

fn read_stats(path: &Path) -> Result<ServerStats, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// How a process ended, in words: "exited with status 1", "was killed by
/// signal 9 (SIGKILL)".
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(signal) => {
            let name = signal_hook::low_level::signal_name(signal).map(|n| format!(" ({n})")).unwrap_or_default();
            let core = if status.core_dumped() { ", core dumped" } else { "" };
            format!("was killed by signal {signal}{name}{core}")
        }
        None => format!("ended ({status})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_described() {
        assert_eq!(describe(ExitStatus::from_raw(9)), "was killed by signal 9 (SIGKILL)");
        assert_eq!(describe(ExitStatus::from_raw(1 << 8)), "exited with status 1");
    }
}
