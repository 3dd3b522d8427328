//! E4 at the article's size: more connections than one process may hold,
//! so the server (`iomux serve --procs`) and the load (`iomux load
//! --procs`) each run as several processes, the load as a child process
//! of its own so that none of its descriptors count against the lab's.
//! Kernel memory is sampled while the connections are held.

use super::cell::{cpus, f64_of, server_cpu_s, LOAD_BACKEND};
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
    /// The workers' summed RSS when every one was listening.
    pub server_rss_start: u64,
    pub memory_before: Reading,
    pub memory_peak: Reading,
}

/// Runs `conns` connections x `messages` echoes against `backend` with
/// `procs` processes each side (0: as few as the descriptor limit allows).
pub fn run(backend: Backend, conns: usize, messages: u64, procs: usize, tracer: Option<Tracer>) -> CliResult<LargeRun> {
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
    let memory_before = sampler.before;
    let memory_peak = sampler.finish();
    let result = server.stop()?;
    let status = status.map_err(|e| format!("cannot start iomux load: {e}"))?;
    let text = std::fs::read_to_string(&json_path);
    if !status.success() {
        let said = text.ok().and_then(|t| serde_json::from_str::<Value>(&t).ok());
        let errors = said.map_or(Value::Null, |v| v["errors"].clone());
        return Err(format!("E4 {backend}: iomux load --procs {procs} exited with {status}; errors: {errors}").into());
    }
    let text = text.map_err(|e| format!("reading {}: {e}", json_path.display()))?;
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
            // Each load loop's own lifetime, the longest: from its first
            // connect to its last echo, the article's wall time.
            "wall_s": self.load["client"]["wall_s"],
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
            "server_cpu_s": server_cpu_s(&self.server),
            "server_syscalls": self.server["syscalls"],
        })
    }
}

/// The article's figures: (server, wall ms, syscalls, per echo).
const PUBLISHED: [(&str, u64, u64, f64); 2] =
    [("epoll", 632_008, 211_000_000, 2.11), ("io_uring (batching + SQPOLL)", 626_473, 28_640_000, 0.29)];

/// Runs every backend at full size and writes echo.json / .md / .svg.
pub fn report(
    backends: &[Backend],
    conns: usize,
    messages: u64,
    procs: usize,
    settings: &super::Settings,
    tracer: Option<Tracer>,
) -> CliResult<super::Outcome> {
    use super::table::{kinds, thousands, Table};
    let progress = crate::progress::Progress::new(super::echo::NAME, backends.len() as u64);
    let mut rows: Vec<(Backend, Value)> = Vec::new();
    // A failure keeps what the runs before it measured: written, then returned.
    let mut failure: Option<String> = None;
    for (i, &backend) in backends.iter().enumerate() {
        progress.step(&format!("{backend}: {conns} connections x {messages} messages, several processes"));
        // The tracer cross-checks the first server only: perf over ~50
        // processes costs little, but once is the point.
        let run = match run(backend, conns, messages, procs, if i == 0 { tracer } else { None }) {
            Ok(run) => run,
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        };
        let figures = run.figures(conns);
        let errors = figures["errors"].as_u64().unwrap_or(1);
        let echoes = figures["echoes"].as_u64().unwrap_or(0);
        if errors > 0 || echoes != conns as u64 * messages {
            failure = Some(format!(
                "E4 {backend} at {conns} connections: {echoes} of {} echoes, {errors} errors: {}",
                conns as u64 * messages,
                run.load["errors"]
            ));
            break;
        }
        rows.push((backend, figures));
        progress.inc(1);
    }
    progress.finish();
    if rows.is_empty() {
        return Err(failure.unwrap_or_else(|| "no backend to run".into()).into());
    }
    let f = |v: &Value, k: &str| f64_of(&v[k]);
    let mut t = Table::new([
        "server",
        "procs each side",
        "connected",
        "set-up s",
        "wall ms",
        "echo phase ms",
        "echoes/s",
        "server syscalls",
        "per echo",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "server RSS B/conn",
        "kernel slab B/conn",
        "kernel TCP B/conn",
        "machine peak used",
    ]);
    for (b, v) in &rows {
        t.row([
            b.name().to_string(),
            v["procs_each_side"].to_string(),
            thousands(f(v, "connected")),
            format!("{:.1}", f(v, "setup_s")),
            thousands(f(v, "wall_s") * 1000.0),
            thousands(f(v, "echo_s") * 1000.0),
            thousands(f(v, "echoes_per_sec")),
            thousands(f(v, "syscalls_total")),
            format!("{:.3}", f(v, "syscalls_per_echo")),
            format!("{:.0}", f(v, "p50_us")),
            format!("{:.0}", f(v, "p99_us")),
            format!("{:.0}", f(v, "p999_us")),
            format!("{:.0}", f(v, "server_user_bytes_per_conn")),
            format!("{:.0}", f(v, "kernel_slab_bytes_per_conn")),
            format!("{:.0}", f(v, "kernel_tcp_bytes_per_conn")),
            format!("{:.2} GiB", f(v, "machine_used_peak_bytes") / f64::from(1u32 << 30)),
        ]);
    }
    let mut published = Table::new(["published (1,000,000 x 100)", "wall ms", "syscalls", "per echo"]);
    for (name, ms, n, per) in PUBLISHED {
        published.row([name.to_string(), thousands(ms as f64), thousands(n as f64), format!("{per:.2}")]);
    }
    let mut by_kind = Table::new(["server", "server syscalls by kind"]);
    for (b, v) in &rows {
        by_kind.row([b.name().to_string(), kinds(&v["server_syscalls"])]);
    }
    let mut md = format!(
        "## E4 echo at full size: {} connections x {messages} messages of 100 B\n\n\
         Machine: {}. One process may hold {} descriptors here, so the server is `iomux serve --procs` \
         (workers sharing the port through SO_REUSEPORT, all on CPU 0) and the load `iomux load --procs` \
         ({} client, on CPU 1, spreading its connections over source addresses in 127.0.0.0/8). \
         Wall time runs from the first connect to the last echo (the longest load loop's life), as the \
         article's; set-up from the first connect to the last connection established; the echo phase from \
         the first load loop to start echoing (each starts once its own connections are up) to the last \
         echo, and echoes/s over it. Server RSS per connection \
         is the workers' summed peak RSS less their RSS once listening; kernel memory per connection is the \
         peak of /proc/meminfo Slab and of /proc/net/sockstat TCP mem during the run less before it, over \
         both ends of each connection (server and load share this machine).\n\n",
        thousands(conns as f64),
        settings.machine.summary(),
        thousands(settings.machine.nofile_hard as f64),
        LOAD_BACKEND.name(),
    );
    md += &t.render();
    md += "\n";
    md += &by_kind.render();
    md += "\nPublished (the article: 50 client threads x 20,000 connections, a separate i5-12500H server, strace -c):\n\n";
    md += &published.render();
    let first = rows.first().map(|(b, v)| (*b, v["traced_syscalls"].as_u64(), v["syscalls_total"].as_u64()));
    let cross = match (tracer, first) {
        (Some(t), Some((b, Some(traced), Some(counted)))) => {
            md += &format!(
                "\nCross-check ({}), {b} server, every process: the tracer counted {} syscalls, the library {} \
                 ({:.1}%); the rest are the processes' own start-up, supervision and exit.\n",
                t.name(),
                thousands(traced as f64),
                thousands(counted as f64),
                100.0 * counted as f64 / traced.max(1) as f64
            );
            json!({"tool": t.name(), "backend": b.name(), "traced": traced, "library": counted})
        }
        _ => {
            md += "\nCross-check: no tracer ran (perf or strace absent), so the library's count stands alone.\n";
            Value::Null
        }
    };
    let per_echo = |b: Backend| rows.iter().find(|(x, _)| *x == b).map(|(_, v)| f(v, "syscalls_per_echo"));
    let claim = "io_uring (SQPOLL) syscalls per echo / epoll's";
    let checks = vec![match (per_echo(Backend::UringSqpoll).or(per_echo(Backend::Uring)), per_echo(Backend::Epoll)) {
        (Some(u), Some(e)) => super::Check::at_most(claim, u / e, 0.1, "at most a tenth".into()),
        _ => super::Check::not_measured(claim, 0.1),
    }
    .documents(super::echo::IO_URING_FRACTION)];
    let (checks, noise) = settings.judge(checks);
    md += "\n";
    md += &super::render_checks(&checks, noise.as_ref());
    println!("{md}");
    let doc = json!({
        "experiment": super::echo::NAME,
        "machine": settings.machine,
        "params": {"conns": conns, "messages_per_conn": messages, "msg_size": 100, "full_size": true,
                   "load_backend": LOAD_BACKEND.name()},
        "published": PUBLISHED.iter().map(|(name, ms, n, per)| json!({"backend": name, "wall_ms": ms,
                     "syscalls": n, "syscalls_per_echo": per})).collect::<Vec<_>>(),
        "cross_check": cross,
        "rows": rows.iter().map(|(b, v)| {
            let mut v = v.clone();
            v["backend"] = json!(b.name());
            v["conns"] = json!(conns);
            v
        }).collect::<Vec<_>>(),
        "noise": noise,
        "checks": checks,
    });
    let mut bars: Vec<(String, f64)> =
        rows.iter().map(|(b, v)| (b.name().to_string(), f(v, "syscalls_per_echo"))).collect();
    bars.push(("paper epoll".into(), 2.11));
    bars.push(("paper uring".into(), 0.29));
    let mut walls: Vec<(String, f64)> = rows.iter().map(|(b, v)| (b.name().to_string(), f(v, "wall_s"))).collect();
    walls.push(("paper epoll".into(), 632.008));
    walls.push(("paper uring".into(), 626.473));
    let svg = super::plot::bar_panels(&[
        super::plot::Panel { title: "E4 full size: server syscalls per echo", y_label: "syscalls per echo", bars },
        super::plot::Panel { title: "E4 full size: wall time", y_label: "wall time (s)", bars: walls },
    ])?;
    let files = super::output::write_experiment(&settings.out_dir, super::echo::NAME, &doc, &md, Some(&svg))?;
    if let Some(why) = failure {
        return Err(format!("{why} (the backends before it were written to {})", settings.out_dir.display()).into());
    }
    Ok(super::Outcome { files })
}
