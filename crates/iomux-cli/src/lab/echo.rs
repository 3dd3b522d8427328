//! E4 `echo`: many connections, each echoing K messages of 100 B; total
//! syscalls per echo (the "epoll vs io_uring" article, seed 004).

use super::cell::{self, f64_of};
use super::child::Tracer;
use super::plot;
use super::table::{thousands, Table};
use super::{Check, Outcome, Settings};
use crate::progress::Progress;
use crate::CliResult;
use iomux::Backend;
use serde_json::{json, Value};

pub const NAME: &str = "echo";
/// The article's finding E4 tests (0.29 against 2.11 syscalls per echo).
pub const IO_URING_FRACTION: &str = "io_uring needs a fraction of epoll's syscalls per echo";

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Connections in all [default: 2000; --full: 1,000,000, the article's].
    /// More than one process may hold runs the server and the load as
    /// several processes each.
    #[arg(long)]
    pub conns: Option<usize>,
    /// Processes each side (server, load) when the connections need
    /// several [default: as few as the descriptor limit allows]
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub procs: usize,
    /// Load threads the connections are spread over.
    #[arg(long, default_value_t = 2)]
    pub threads: u16,
    /// Messages each connection sends and gets back [default: 100, the article's]
    #[arg(long)]
    pub messages: Option<u64>,
    /// Backends, comma-separated [default: epoll, epoll-et, uring,
    /// uring-sqpoll, poll, select; --full: epoll, uring-sqpoll, the
    /// article's two servers]
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend)]
    pub backends: Option<Vec<Backend>>,
}

/// The article's size.
const FULL_CONNS: usize = 1_000_000;
/// The article's two servers.
const FULL_BACKENDS: [Backend; 2] = [Backend::Epoll, Backend::UringSqpoll];

const DEFAULT_BACKENDS: [Backend; 6] =
    [Backend::Epoll, Backend::EpollEt, Backend::Uring, Backend::UringSqpoll, Backend::Poll, Backend::Select];

struct Row {
    backend: Backend,
    conns: usize,
    echoes: u64,
    seconds: f64,
    echoes_per_sec: f64,
    syscalls_per_echo: f64,
    syscalls_total: u64,
    p50_us: f64,
    p99_us: f64,
    rss_bytes_per_conn: f64,
    /// CPU per echo of the server (its whole run) and of the load (while
    /// measuring): the load must stay the cheaper side.
    server_cpu_us_per_echo: f64,
    load_cpu_us_per_echo: f64,
    syscalls: Value,
    note: Option<String>,
}

/// How a tracer's count compares with the library's own.
struct CrossCheck {
    tracer: Tracer,
    backend: Backend,
    traced: u64,
    counted: u64,
}

pub fn run(args: &Args, settings: &Settings) -> CliResult<Outcome> {
    let tracer = settings.tracer;
    let hard = settings.machine.nofile_hard as usize;
    // One server process holds every connection plus a few fds of its own.
    let server_max = hard.saturating_sub(crate::limits::FDS_OVERHEAD as usize);
    let conns = match args.conns {
        Some(0) => return Err("--conns must be at least 1".into()),
        Some(c) => c,
        None if settings.full => FULL_CONNS,
        None => 2000.min(server_max),
    };
    let messages = match args.messages {
        Some(0) => return Err("--messages must be at least 1".into()),
        Some(m) => m,
        None => 100,
    };
    // One process each side, one source address: beyond either limit the
    // run needs several processes and the load's own choice of sources.
    let one_source = crate::limits::ports_per_source(crate::load::sources::port_range()) as usize;
    if conns > server_max.min(one_source) || args.procs > 1 {
        let backends = args.backends.clone().unwrap_or_else(|| FULL_BACKENDS.to_vec());
        if let Some(b) = backends.iter().find(|b| **b == Backend::Select) {
            return Err(format!("{b} cannot hold {conns} connections (FD_SETSIZE is 1024)").into());
        }
        return super::echo_large::report(&backends, conns, messages, args.procs, settings, tracer);
    }
    cell::require_loopback("E4", conns)?;
    let backends = args.backends.clone().unwrap_or_else(|| DEFAULT_BACKENDS.to_vec());
    let reps = if settings.full { 1 } else { 3 };
    let progress = Progress::new(NAME, backends.len() as u64);
    let mut rows = Vec::new();
    let mut cross: Option<CrossCheck> = None;
    for &backend in &backends {
        // select can watch only fd numbers below FD_SETSIZE.
        let limit = if backend == Backend::Select { 1000 } else { conns };
        let n = conns.min(limit);
        progress.step(&format!("{backend}: {n} connections x {messages} messages"));
        // Runs per backend; the one with the median syscalls per echo is
        // kept whole (how often the server finds a batch varies run to run).
        let mut runs = Vec::new();
        for rep in 0..reps {
            let trace = if rep == 0 && cross.is_none() && backend == Backend::Epoll { tracer } else { None };
            let c = cell::run(backend, "echo", trace, |a| {
                a.conns = n;
                a.threads = args.threads.max(1);
                a.per_conn = Some(messages);
            })?;
            c.require_no_errors(&format!("E4 {backend}"))?;
            let s = &c.server.stats;
            let echoes = c.load["echoes"].as_u64().unwrap_or(0);
            let total = s["syscalls_total"].as_u64().unwrap_or(0);
            if let (Some(t), Some(traced)) = (trace, c.server.traced) {
                cross = Some(CrossCheck { tracer: t, backend, traced, counted: total });
            }
            runs.push(Row {
                backend,
                conns: n,
                echoes,
                seconds: f64_of(&c.load["seconds"]),
                echoes_per_sec: f64_of(&c.load["echoes_per_sec"]),
                syscalls_per_echo: total as f64 / echoes.max(1) as f64,
                syscalls_total: total,
                p50_us: f64_of(&c.load["latency"]["p50_us"]),
                p99_us: f64_of(&c.load["latency"]["p99_us"]),
                rss_bytes_per_conn: c.rss_peak.saturating_sub(c.rss_before) as f64 / n as f64,
                server_cpu_us_per_echo: cell::server_cpu_s(s) * 1e6 / echoes.max(1) as f64,
                load_cpu_us_per_echo: f64_of(&c.load["cpu_us_per_echo"]),
                syscalls: s["syscalls"].clone(),
                note: (n < conns).then(|| {
                    format!("select: capped at {n} connections, its fd numbers must stay below FD_SETSIZE (1024)")
                }),
            });
        }
        runs.sort_by(|a, b| a.syscalls_per_echo.total_cmp(&b.syscalls_per_echo));
        let middle = runs.len() / 2;
        rows.push(runs.swap_remove(middle));
        progress.inc(1);
    }
    progress.finish();

    let per_echo = |b: Backend| rows.iter().find(|r| r.backend == b).map(|r| r.syscalls_per_echo);
    let claim = "uring syscalls per echo / epoll's";
    let checks = vec![match (per_echo(Backend::Uring), per_echo(Backend::Epoll)) {
        (Some(u), Some(e)) => Check::at_most(claim, u / e, 0.1, "at most a tenth".into()),
        _ => Check::not_measured(claim, 0.1),
    }
    .documents(IO_URING_FRACTION)];
    let (checks, noise) = settings.judge(checks);

    let mut t = Table::new([
        "backend",
        "conns",
        "echoes",
        "seconds",
        "echoes/s",
        "syscalls",
        "syscalls/echo",
        "p50 us",
        "p99 us",
        "RSS B/conn",
    ]);
    let mut notes = Vec::new();
    for r in &rows {
        let mut name = r.backend.name().to_string();
        if let Some(n) = &r.note {
            notes.push(n.clone());
            name += &format!(" [{}]", notes.len());
        }
        t.row([
            name,
            thousands(r.conns as f64),
            thousands(r.echoes as f64),
            format!("{:.3}", r.seconds),
            thousands(r.echoes_per_sec),
            thousands(r.syscalls_total as f64),
            format!("{:.3}", r.syscalls_per_echo),
            format!("{:.0}", r.p50_us),
            format!("{:.0}", r.p99_us),
            format!("{:.0}", r.rss_bytes_per_conn),
        ]);
    }
    let mut kinds = Table::new(["backend", "server syscalls by kind"]);
    for r in &rows {
        kinds.row([r.backend.name().to_string(), super::table::kinds(&r.syscalls)]);
    }
    let mut published =
        Table::new(["published (1,000,000 conns x 100 echoes)", "total syscalls", "per echo", "wall time"]);
    published.row(["epoll", "211,000,000", "2.11", "632,008 ms"]);
    published.row(["io_uring (batching + SQPOLL)", "28,640,000 (98% io_uring_enter)", "0.29", "626,473 ms"]);
    let mut md = format!(
        "## E4 echo: {} connections x {messages} messages of 100 B, server syscalls per echo\n\n\
         Machine: {}. Server and load on separate CPUs; the load (io_uring client, {} threads) opens every \
         connection, then each sends {messages} messages, one at a time. Syscalls are the server's own count \
         (all kinds, start to exit); each row is the run with the median syscalls per echo of {reps} runs \
         (a full run: one); RSS per connection is the server's peak RSS (VmHWM) over its RSS before the load, per connection.\n\n",
        thousands(conns as f64),
        settings.machine.summary(),
        args.threads.max(1),
    );
    md += &format!(
        "The article used 1,000,000 connections from 50 client threads against a server on another machine; \
         this run holds {} in one server process (at most {} fit in one here: RLIMIT_NOFILE hard limit {hard}). \
         `--full` runs the article's size, the server and the load as several processes each.\n\n",
        thousands(conns as f64),
        thousands(server_max as f64),
    );
    md += &t.render();
    for (i, n) in notes.iter().enumerate() {
        md += &format!("\n[{}] {n}  ", i + 1);
    }
    md += "\n\n";
    md += &kinds.render();
    md += "\nPublished (the article: 50 client threads x 20,000 connections, a separate i5-12500H server, 1 Gbit LAN, strace -c):\n\n";
    md += &published.render();
    let cross_json = match &cross {
        Some(x) => {
            let ratio = x.counted as f64 / x.traced as f64;
            md += &format!(
                "\nCross-check ({}), {} server: the tracer counted {} syscalls for the whole process, the library \
                 {} ({:.1}%); the rest are the process's own start-up and exit (threads, memory maps, signal \
                 set-up, writing the stats).\n",
                x.tracer.name(),
                x.backend,
                thousands(x.traced as f64),
                thousands(x.counted as f64),
                100.0 * ratio
            );
            json!({"tool": x.tracer.name(), "backend": x.backend.name(), "traced": x.traced,
                   "library": x.counted, "library_share": ratio})
        }
        None => {
            md += "\nCross-check: neither `perf` nor `strace` works here, so the library's count stands alone.\n";
            Value::Null
        }
    };
    md += "\n";
    md += &super::render_checks(&checks, noise.as_ref());
    println!("{md}");

    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": {"conns": conns, "threads": args.threads.max(1), "messages_per_conn": messages, "msg_size": 100,
                   "load_backend": cell::LOAD_BACKEND.name()},
        "published": [
            {"backend": "epoll", "syscalls": 211_000_000u64, "syscalls_per_echo": 2.11, "wall_ms": 632_008},
            {"backend": "io_uring (batching + SQPOLL)", "syscalls": 28_640_000u64, "syscalls_per_echo": 0.29,
             "wall_ms": 626_473}
        ],
        "cross_check": cross_json,
        "rows": rows.iter().map(|r| {
            let mut v = json!({
                "backend": r.backend.name(), "conns": r.conns, "echoes": r.echoes, "seconds": r.seconds,
                "echoes_per_sec": r.echoes_per_sec, "syscalls_per_echo": r.syscalls_per_echo,
                "syscalls_total": r.syscalls_total, "p50_us": r.p50_us, "p99_us": r.p99_us,
                "rss_bytes_per_conn": r.rss_bytes_per_conn, "syscalls": r.syscalls,
                "server_cpu_us_per_echo": r.server_cpu_us_per_echo, "load_cpu_us_per_echo": r.load_cpu_us_per_echo,
            });
            if let Some(n) = &r.note {
                v["note"] = json!(n);
            }
            v
        }).collect::<Vec<_>>(),
        "noise": noise,
        "checks": checks,
    });
    let mut per_echo_bars: Vec<(String, f64)> =
        rows.iter().map(|r| (r.backend.name().to_string(), r.syscalls_per_echo)).collect();
    per_echo_bars.push(("paper epoll".into(), 2.11));
    per_echo_bars.push(("paper uring".into(), 0.29));
    let svg = plot::bar_panels(&[
        plot::Panel { title: "E4: server syscalls per echo", y_label: "syscalls per echo", bars: per_echo_bars },
        plot::Panel {
            title: "E4: echoes per second",
            y_label: "echoes per second",
            bars: rows.iter().map(|r| (r.backend.name().to_string(), r.echoes_per_sec)).collect(),
        },
    ])?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files })
}
