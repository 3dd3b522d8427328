//! `iomux load --procs P`: the load as P child processes of this same
//! binary (one process may hold only RLIMIT_NOFILE descriptors), each with
//! its share of the connections and its own connection numbers, writing
//! its result into a private folder; the parent shows one progress line
//! for all of them and merges their results (and interval logs) exactly.

use super::hdrlog::Log;
use super::merge::{self, Part, Setup};
use super::result::{ChildResult, LoadResult};
use super::watch::{Display, Snapshot};
use super::LoadArgs;
use crate::CliResult;
use anyhow::{bail, Context as _};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Lines of a failed child's stderr kept for the report.
const STDERR_TAIL: usize = 10;

/// One child process, as its output readers share it.
struct Proc {
    index: usize,
    args: LoadArgs,
    /// Its stderr's last lines, for the report when it fails.
    stderr: Mutex<Vec<String>>,
    /// Its last progress line.
    progress: Mutex<Snapshot>,
}

impl Proc {
    /// Which connections, for messages.
    fn describe(&self) -> String {
        let a = &self.args;
        format!("process {} (--conns {} from #{}, --idle {})", self.index, a.conns, a.first_conn, a.idle)
    }
}

/// Removes the hooks once the children are done. signal-hook keeps its
/// handler installed, so a signal during the short merge that follows is
/// ignored rather than ending the process.
struct Unhook(Vec<signal_hook::SigId>);

impl Drop for Unhook {
    fn drop(&mut self) {
        for hook in self.0.drain(..) {
            signal_hook::low_level::unregister(hook);
        }
    }
}

/// A running child, as the waiting loop holds it.
struct Running {
    child: Child,
    status: Option<ExitStatus>,
    /// Its result file.
    json: PathBuf,
}

/// Runs the children and merges their results. Also returns what went
/// wrong with children that left no result (the run then fails).
pub fn run(args: &LoadArgs) -> CliResult<(LoadResult, Vec<String>)> {
    let n = usize::from(args.procs);
    let dir = crate::os::PrivateDir::new("iomux-load", "the processes' results")?;
    // SIGINT/SIGTERM stop the children and end the run here, so that the
    // result folder is removed, instead of ending this process at once.
    let interrupted = Arc::new(AtomicBool::new(false));
    let mut hooks = Vec::new();
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let hook = signal_hook::flag::register(signal, interrupted.clone())
            .with_context(|| format!("handling signal {signal} while --procs children run"))?;
        hooks.push(hook);
    }
    let _unhook = Unhook(hooks);
    let exe = std::env::current_exe().context("finding this program to start --procs children")?;
    let whole = args.share();
    let (mut procs, mut running) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for index in 0..n {
        let mut child_args = args.with_share(whole.part(n, index))?;
        child_args.procs = 1;
        child_args.json = Some(dir.path().join(format!("proc-{index}.json")));
        child_args.hdr_log = args.hdr_log.as_ref().map(|_| dir.path().join(format!("proc-{index}.hlog")));
        child_args.report_progress = true;
        (child_args.shard, child_args.shard_count) = (None, None);
        let spawned = Command::new(&exe)
            .arg("load")
            .args(child_args.to_cli())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                stop_all(&mut running);
                return Err(e).with_context(|| format!("starting --procs child {index} ({})", exe.display()));
            }
        };
        let json = dir.path().join(format!("proc-{index}.json"));
        running.push(Running { child, status: None, json });
        procs.push(Proc {
            index,
            args: child_args,
            stderr: Mutex::new(Vec::new()),
            progress: Mutex::new(Snapshot::default()),
        });
    }
    let seconds = args.duration.map(|d| d + args.warmup).or(match (args.requests, args.per_conn) {
        (None, None) => Some(10.0 + args.warmup),
        _ => None,
    });
    let messages = args.requests.unwrap_or(0) + args.per_conn.unwrap_or(0) * args.conns as u64;
    let display = Display::new((args.conns + args.idle) as u64, seconds, messages);
    let mut outputs: Vec<_> = running.iter_mut().map(|r| (r.child.stdout.take(), r.child.stderr.take())).collect();
    let waited = std::thread::scope(|scope| {
        for (p, (stdout, stderr)) in procs.iter().zip(outputs.iter_mut()) {
            let display = &display;
            if let Some(out) = stdout.take() {
                scope.spawn(move || read_stdout(p, out, display));
            }
            if let Some(err) = stderr.take() {
                scope.spawn(move || read_stderr(p, err, display));
            }
        }
        watch(&mut running, &procs, &display, &interrupted)
    });
    display.finish();
    waited?;

    // Merge what the children left.
    let mut parts = Vec::new();
    let mut failed = Vec::new();
    let mut summaries = Vec::new();
    let mut merged_children = Vec::new();
    for (p, r) in procs.iter().zip(&running) {
        let status = r.status.map_or("no exit status".to_string(), |s| s.to_string());
        match LoadResult::read(&r.json) {
            Ok(r) => {
                summaries.push(ChildResult::Done(Box::new(r.summary())));
                parts.push(Part { label: format!("process {}", p.index), result: r });
                merged_children.push(p);
            }
            Err(e) => {
                let tail = p.stderr.lock().unwrap_or_else(|e| e.into_inner()).join("\n  ");
                let why = if tail.is_empty() { crate::one_line(e) } else { tail };
                failed.push(format!("{} exited with {status} and no result:\n  {why}", p.describe()));
                summaries.push(ChildResult::Failed { process: p.index, failed: why, exit: status });
            }
        }
    }
    if parts.is_empty() {
        bail!("every --procs child failed:\n{}", failed.join("\n"));
    }
    let mut merged = merge::merge(&parts, Setup::Span)?;
    merged.procs = summaries;
    if let Some(path) = &args.hdr_log {
        let mut log = Log::default();
        // Every child whose result was merged, errors or not: the log adds
        // up to the JSON.
        for p in merged_children {
            if let Some(child_log) = &p.args.hdr_log {
                log.absorb(Log::read(child_log).with_context(|| p.describe())?);
            }
        }
        log.write(path)?;
    }
    Ok((merged, failed))
}

/// Waits for every child, showing their summed progress; when one dies
/// without a result (it could not start its load), stops the others: the
/// run has failed and they would only keep the machine busy.
fn watch(running: &mut [Running], procs: &[Proc], display: &Display, interrupted: &AtomicBool) -> CliResult<()> {
    loop {
        if interrupted.load(Ordering::Relaxed) {
            display.println("iomux load: interrupted; stopping every process");
            stop_all(running);
            bail!("interrupted by a signal");
        }
        let mut alive = 0;
        let mut broken = None;
        for (i, r) in running.iter_mut().enumerate().filter(|(_, r)| r.status.is_none()) {
            match r.child.try_wait() {
                Ok(Some(status)) => {
                    r.status = Some(status);
                    if !status.success() && !r.json.exists() {
                        broken = Some(i);
                    }
                }
                Ok(None) => alive += 1,
                Err(e) => {
                    stop_all(running);
                    return Err(e).with_context(|| format!("waiting for --procs child {i}"));
                }
            }
        }
        let mut sum = Snapshot::default();
        for p in procs.iter() {
            sum.add(&p.progress.lock().unwrap_or_else(|e| e.into_inner()));
        }
        display.show(&sum);
        if alive == 0 {
            return Ok(());
        }
        if let Some(i) = broken {
            display.println(&format!("iomux load: process {i} failed; stopping the others"));
            stop_all(running);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGTERM to every child still running, then reap them.
fn stop_all(running: &mut [Running]) {
    for (i, r) in running.iter_mut().enumerate().filter(|(_, r)| r.status.is_none()) {
        if let Err(e) = crate::os::terminate(r.child.id()) {
            eprintln!("iomux load: stopping process {i}: {e}");
        }
    }
    for r in running.iter_mut().filter(|r| r.status.is_none()) {
        r.status = r.child.wait().ok();
    }
}

/// A child's stdout: progress lines, and anything else passed on.
fn read_stdout(p: &Proc, out: impl Read, display: &Display) {
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        match Snapshot::from_wire(&line) {
            Some(s) => *p.progress.lock().unwrap_or_else(|e| e.into_inner()) = s,
            None => display.println(&format!("[process {}] {line}", p.index)),
        }
    }
}

/// A child's stderr: passed on as it comes, the last lines kept.
fn read_stderr(p: &Proc, err: impl Read, display: &Display) {
    for line in BufReader::new(err).lines() {
        let Ok(line) = line else { break };
        display.println(&format!("[process {}] {line}", p.index));
        let mut tail = p.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if tail.len() == STDERR_TAIL {
            tail.remove(0);
        }
        tail.push(line);
    }
}
