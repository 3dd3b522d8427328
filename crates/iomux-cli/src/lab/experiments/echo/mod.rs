//! E4 `echo`: many connections, each echoing K messages of 100 B; total
//! server syscalls per echo (the "epoll vs io_uring" article, seed 004).
//! Up to what one process holds, server and load run as one process each;
//! beyond it (the article's million) as several each (`echo_large`).

mod kernel_memory;
pub mod large;

use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{BackendDefaults, RoundDefaults, SharedFlags};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::harness::{by_name, by_names, envelope::Envelope};
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot;
use crate::lab::render::table::{kinds, thousands};
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::cell;
use crate::lab::Settings;
use crate::CliResult;
use anyhow::bail;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The defaults of the flags experiments share.
#[derive(Clone, Debug, Default)]
pub struct Defaults;

impl RoundDefaults for Defaults {
    const REPS: (usize, usize) = (1, 3);
    const BUDGET_S: f64 = 30.0;
    const BUDGET_NOTE: &'static str = "; but 0 at the full size of a million connections, --full without --conns";
    const REPS_NOTE: &'static str = "; at full size: 1";
}

impl BackendDefaults for Defaults {
    /// Quick: all six; full, and at full size: the article's two servers.
    const BACKENDS: (&'static [Backend], &'static [Backend]) = (&DEFAULT_BACKENDS, &FULL_BACKENDS);
    const BACKENDS_NOTE: &'static str = "; also past one process's connections, or with --procs above 1";
}

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
    #[command(flatten)]
    pub shared: SharedFlags<Defaults>,
}

/// The article's size.
const FULL_CONNS: usize = 1_000_000;
/// The article's two servers.
const FULL_BACKENDS: [Backend; 2] = [Backend::Epoll, Backend::UringSqpoll];
const DEFAULT_BACKENDS: [Backend; 6] =
    [Backend::Epoll, Backend::EpollEt, Backend::Uring, Backend::UringSqpoll, Backend::Poll, Backend::Select];
/// select can watch only fd numbers below FD_SETSIZE.
const SELECT_CONNS: usize = 1000;

/// One row of the article's table (1,000,000 connections x 100 echoes).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PublishedRow {
    pub server: String,
    pub wall_ms: u64,
    pub syscalls: u64,
    pub syscalls_per_echo: f64,
}

/// The article's figures, the only place they are written.
fn published_rows() -> Vec<PublishedRow> {
    vec![
        PublishedRow { server: "epoll".into(), wall_ms: 632_008, syscalls: 211_000_000, syscalls_per_echo: 2.11 },
        PublishedRow {
            server: "io_uring (batching + SQPOLL)".into(),
            wall_ms: 626_473,
            syscalls: 28_640_000,
            syscalls_per_echo: 0.29,
        },
    ]
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(with = "by_names")]
    backends: Vec<Backend>,
    conns: usize,
    messages: u64,
    msg_size: usize,
    threads: u16,
    /// Processes each side; 0: one process each, in the lab's own cells.
    procs: usize,
    #[serde(flatten)]
    rounds: Rounds,
    /// The most connections one server process holds here.
    server_max: usize,
    nofile_hard: u64,
    tracer: Option<String>,
    #[serde(with = "by_name")]
    load_backend: Backend,
    published: Vec<PublishedRow>,
}

impl Params {
    fn large(&self) -> bool {
        self.procs > 0
    }
}

/// A backend serving E4.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    #[serde(with = "by_name")]
    backend: Backend,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.backend.fmt(f)
    }
}

/// The kernel's memory for the connections (large runs only), per
/// connection, over both ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelMemory {
    pub slab_bytes_per_conn: f64,
    pub tcp_bytes_per_conn: f64,
    pub machine_used_peak_bytes: u64,
    pub tcp_sockets_peak: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub conns: usize,
    pub echoes: u64,
    /// The echo phase.
    pub seconds: f64,
    /// Large runs: the longest load loop's life, first connect to last echo.
    pub wall_s: Option<f64>,
    pub setup_s: f64,
    pub echoes_per_sec: f64,
    pub syscalls_total: u64,
    pub syscalls_per_echo: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub server_cpu_us_per_echo: f64,
    pub load_cpu_us_per_echo: Option<f64>,
    /// Server peak RSS less its RSS before the load, per connection.
    pub rss_bytes_per_conn: f64,
    pub kernel: Option<KernelMemory>,
    /// What the external tracer counted for the whole server, when it ran.
    pub traced: Option<u64>,
    pub syscalls: BTreeMap<String, u64>,
}

pub struct Echo;

/// One run of E4 at `p`'s size against `backend`.
fn run_once(p: &Params, backend: Backend, trace: Option<crate::lab::rig::child::Tracer>) -> CliResult<Sample> {
    if p.large() {
        return large::run(backend, p.conns, p.messages, p.procs, trace);
    }
    let n = if backend == Backend::Select { p.conns.min(SELECT_CONNS) } else { p.conns };
    let c = cell::run(backend, "echo", trace, |a| {
        a.conns = n;
        a.threads = p.threads.max(1);
        a.per_conn = Some(p.messages);
    })?;
    c.require_no_errors(&format!("E4 {backend}"))?;
    let rss_per_conn = c.rss_peak.saturating_sub(c.rss_before) as f64 / n as f64;
    Ok(Sample::of(n, &c.result, &c.server, rss_per_conn, None))
}

impl Sample {
    /// From the load's result and the server's: `n` connections, server
    /// memory per connection, the kernel's (large runs).
    pub fn of(
        n: usize,
        load: &crate::load::result::LoadResult,
        server: &crate::lab::rig::child::ServerResult,
        rss_bytes_per_conn: f64,
        kernel: Option<KernelMemory>,
    ) -> Sample {
        let s = &server.typed;
        let echoes = load.echoes.max(1) as f64;
        let latency = |f: fn(&crate::load::result::Latency) -> f64| load.latency.as_ref().map_or(f64::NAN, f);
        // A large run's load loops report their own lives: the longest is
        // the article's wall time, first connect to last echo.
        Sample {
            conns: n,
            echoes: load.echoes,
            seconds: load.seconds,
            wall_s: kernel.as_ref().map(|_| load.client.wall_s),
            setup_s: load.setup_s,
            echoes_per_sec: load.echoes_per_sec,
            syscalls_total: s.syscalls_total,
            syscalls_per_echo: s.syscalls_total as f64 / echoes,
            p50_us: latency(|l| l.p50_us),
            p99_us: latency(|l| l.p99_us),
            p999_us: latency(|l| l.p999_us),
            server_cpu_us_per_echo: s.cpu_s() * 1e6 / echoes,
            load_cpu_us_per_echo: load.cpu_us_per_echo,
            rss_bytes_per_conn,
            kernel,
            traced: server.traced,
            syscalls: s.syscalls.clone(),
        }
    }
}

impl Experiment for Echo {
    experiment_types!(Args, Params, Arm, Sample, rounds: params.rounds);

    const ENTRY: Entry =
        Entry::new("echo", "E4", "connections echoing 100-byte messages").smoke("--conns 400 --messages 10 --budget 5");
    const PUBLISHED: &'static str = "the article: 1,000,000 connections x 100 echoes from 50 client threads, a \
                                     separate i5-12500H server, 1 Gbit LAN, strace -c: epoll 2.11 syscalls per \
                                     echo, io_uring (batching + SQPOLL) 0.29.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let nofile_hard = settings.machine.nofile_hard;
        // One server process holds every connection plus a few fds of its own.
        let server_max = (nofile_hard as usize).saturating_sub(crate::limits::FDS_OVERHEAD as usize);
        let conns = match args.conns {
            Some(0) => bail!("--conns must be at least 1"),
            Some(c) => c,
            None if settings.full => FULL_CONNS,
            None => 2000.min(server_max),
        };
        let messages = match args.messages {
            Some(0) => bail!("--messages must be at least 1"),
            Some(m) => m,
            None => 100,
        };
        // One process each side, one source address: beyond either limit
        // the run needs several processes and the load's own sources.
        let one_source = crate::limits::ports_per_source(crate::load::sources::port_range()) as usize;
        let large = conns > server_max.min(one_source) || args.procs > 1;
        let backends = args.shared.backends.chosen(large || settings.full)?;
        if large {
            if let Some(b) = backends.iter().find(|b| **b == Backend::Select) {
                bail!("{b} cannot hold {conns} connections (FD_SETSIZE is 1024)");
            }
            large::require(conns, args.procs)?;
        } else {
            cell::require_loopback("E4", conns)?;
        }
        let procs = if large { large::procs_for(conns, args.procs) } else { 0 };
        Ok(Params {
            backends,
            conns,
            messages,
            msg_size: 100,
            threads: args.threads.max(1),
            procs,
            rounds: if large {
                // At full size one run takes minutes: one round, unless asked.
                Rounds::plan(
                    args.shared.rounds.reps,
                    (1, 1),
                    Some(args.shared.rounds.budget.unwrap_or(0.0)),
                    0.0,
                    settings,
                )?
            } else {
                args.shared.rounds.rounds(settings)?
            },
            server_max,
            nofile_hard,
            tracer: settings.tracer.map(|t| t.name().to_string()),
            load_backend: cell::LOAD_BACKEND,
            published: published_rows(),
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        // The article's io_uring server batched and ran SQPOLL: that one is
        // compared when the run has it, and it must need as small a
        // fraction of epoll's syscalls as the article's (0.29 / 2.11).
        let uring = if p.backends.contains(&Backend::UringSqpoll) { Backend::UringSqpoll } else { Backend::Uring };
        let (u, e) = (Arm { backend: uring }, Arm { backend: Backend::Epoll });
        let arms =
            if p.backends.contains(&uring) && p.backends.contains(&Backend::Epoll) { vec![u, e] } else { vec![] };
        let published =
            |server: &str| p.published.iter().find(|r| r.server.starts_with(server)).map(|r| r.syscalls_per_echo);
        let fraction = published("io_uring").zip(published("epoll")).map_or(f64::NAN, |(u, e)| u / e);
        vec![Spec::iomux(
            format!("{uring} syscalls per echo / epoll's"),
            Needed::AtMost(fraction),
            arms,
            move |r: &RoundView<Arm, Sample>| Some(r.get(&u)?.syscalls_per_echo / r.get(&e)?.syscalls_per_echo),
        )
        .documents("io_uring needs a fraction of epoll's syscalls per echo, as small as the article's (0.29 / 2.11)")]
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![
            Metric { name: "syscalls per echo", unit: "", higher_is_better: false, get: |s| s.syscalls_per_echo },
            Metric { name: "echoes/s", unit: "1/s", higher_is_better: true, get: |s| s.echoes_per_sec },
            Metric { name: "p99 latency", unit: "us", higher_is_better: false, get: |s| s.p99_us },
            Metric {
                name: "server CPU per echo",
                unit: "us",
                higher_is_better: false,
                get: |s| s.server_cpu_us_per_echo,
            },
        ]
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Sample>) -> Vec<Arm> {
        p.backends.iter().map(|&backend| Arm { backend }).collect()
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Sample>, s: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        // The tracer cross-checks the library's count once, on epoll's
        // first run.
        let mut cross_checked = false;
        Ok(Box::new(move |a: &Arm| -> Measured<Sample> {
            let trace = if !cross_checked && a.backend == Backend::Epoll { s.tracer } else { None };
            cross_checked |= trace.is_some();
            run_once(p, a.backend, trace).map(Ok)
        }))
    }
}

impl Shown for Echo {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        let mut rows = TableView {
            caption: "Medians of the kept runs ± half their 95% interval:".into(),
            header: [
                "backend",
                "conns",
                "runs",
                "echoes",
                "set-up s",
                "echo phase s",
                "wall s",
                "echoes/s",
                "syscalls",
                "syscalls/echo",
                "server CPU us/echo",
                "load CPU us/echo",
                "p50 us",
                "p99 us",
                "p99.9 us",
                "server RSS B/conn",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        let mut by_kind = TableView {
            caption: String::new(),
            header: vec!["backend".into(), "server syscalls by kind (one run)".into()],
            rows: Vec::new(),
        };
        let mut kernel = TableView {
            caption: "Kernel memory while the connections were held (both ends of each connection):".into(),
            header: ["backend", "kernel slab B/conn", "kernel TCP B/conn", "TCP sockets at peak", "machine peak used"]
                .map(String::from)
                .to_vec(),
            rows: Vec::new(),
        };
        for &backend in &p.backends {
            let arm = Arm { backend };
            let Some(last) =
                env.kept(&arm).last().or_else(|| env.takes.iter().rev().find(|t| t.arm == arm).map(|t| &t.value))
            else {
                continue;
            };
            let med = |f: fn(&Sample) -> f64, digits: usize| {
                env.estimate(&arm, f).map_or("-".into(), |e| format!("{:.digits$}", e.median))
            };
            let mut name = backend.to_string();
            if last.conns < p.conns {
                let why = format!(
                    "{backend}: capped at {} connections, its fd numbers must stay below FD_SETSIZE (1024)",
                    last.conns
                );
                name = format!("{name} {}", view.footnote(&why));
            }
            rows.rows.push(vec![
                name,
                thousands(last.conns as f64),
                env.kept(&arm).count().to_string(),
                thousands(last.echoes as f64),
                med(|s| s.setup_s, 2),
                med(|s| s.seconds, 3),
                med(|s| s.wall_s.unwrap_or(f64::NAN), 1),
                shown(env.estimate(&arm, |s| s.echoes_per_sec)),
                thousands(last.syscalls_total as f64),
                shown(env.estimate(&arm, |s| s.syscalls_per_echo)),
                med(|s| s.server_cpu_us_per_echo, 2),
                med(|s| s.load_cpu_us_per_echo.unwrap_or(f64::NAN), 2),
                med(|s| s.p50_us, 0),
                med(|s| s.p99_us, 0),
                med(|s| s.p999_us, 0),
                med(|s| s.rss_bytes_per_conn, 0),
            ]);
            by_kind.rows.push(vec![backend.to_string(), kinds(&last.syscalls)]);
            if let Some(k) = &last.kernel {
                kernel.rows.push(vec![
                    backend.to_string(),
                    format!("{:.0}", k.slab_bytes_per_conn),
                    format!("{:.0}", k.tcp_bytes_per_conn),
                    thousands(k.tcp_sockets_peak as f64),
                    format!("{:.2} GiB", k.machine_used_peak_bytes as f64 / f64::from(1u32 << 30)),
                ]);
            }
        }
        let figures = p.published.iter().map(|r| {
            let row =
                [thousands(r.wall_ms as f64), thousands(r.syscalls as f64), format!("{:.2}", r.syscalls_per_echo)];
            std::iter::once(r.server.clone()).chain(row).collect()
        });
        let published = TableView::new(
            "Published (the article: 50 client threads x 20,000 connections, a separate i5-12500H server, 1 Gbit LAN, \
             strace -c):",
            &["published (1,000,000 conns x 100 echoes)", "wall ms", "total syscalls", "per echo"],
            figures.collect(),
        );
        view.tables = vec![rows, by_kind];
        if !kernel.rows.is_empty() {
            view.tables.push(kernel);
        }
        view.tables.push(published);
        view.notes.push(cross_check(env));
        view.svg = Some(svg(env)?);
        Ok(view)
    }
}

fn intro(p: &Params) -> String {
    if p.large() {
        return format!(
            "{} connections x {} messages of {} B. One process may hold {} descriptors here, so the server is \
             `iomux serve --procs {}` (workers sharing the port through SO_REUSEPORT, all on CPU 0) and the load \
             `iomux load --procs {}` ({} client, on CPU 1, spreading its connections over source addresses in \
             127.0.0.0/8). Wall time runs from the first connect to the last echo (the longest load loop's life), \
             as the article's; set-up to the last connection established; echoes/s over the echo phase. Server \
             RSS per connection is the workers' summed peak RSS less their RSS once listening; kernel memory per \
             connection is the peak of /proc/meminfo Slab and of /proc/net/sockstat TCP mem during the run less \
             before it.",
            thousands(p.conns as f64),
            p.messages,
            p.msg_size,
            thousands(p.nofile_hard as f64),
            p.procs,
            p.procs,
            p.load_backend
        );
    }
    format!(
        "{} connections x {} messages of {} B. Server and load on separate CPUs; the load ({} client, {} threads) \
         opens every connection, then each sends its messages one at a time. Syscalls are the server's own count \
         (all kinds, start to exit); RSS per connection is the server's peak RSS (VmHWM) over its RSS before the \
         load. The article used 1,000,000 connections against a server on another machine; one process holds at \
         most {} here (RLIMIT_NOFILE hard limit {}); `--full` runs the article's size, the server and the load as \
         several processes each.",
        thousands(p.conns as f64),
        p.messages,
        p.msg_size,
        p.load_backend,
        p.threads,
        thousands(p.server_max as f64),
        p.nofile_hard
    )
}

/// How the tracer's count compares with the library's own.
fn cross_check(env: &Envelope<Params, Arm, Sample>) -> String {
    let traced = env.takes.iter().find_map(|t| Some((t.arm, t.value.traced?, t.value.syscalls_total)));
    match (&env.params.tracer, traced) {
        (Some(tool), Some((arm, traced, counted))) => format!(
            "Cross-check ({tool}), {arm} server: the tracer counted {} syscalls for the whole server, the library {} \
             ({:.1}%); the rest are the processes' own start-up and exit (threads, memory maps, signal set-up, \
             writing the stats).",
            thousands(traced as f64),
            thousands(counted as f64),
            100.0 * counted as f64 / traced.max(1) as f64
        ),
        _ => "Cross-check: neither `perf` nor `strace` ran, so the library's count stands alone.".into(),
    }
}

fn svg(env: &Envelope<Params, Arm, Sample>) -> CliResult<String> {
    let p = &env.params;
    let median =
        |backend: Backend, f: fn(&Sample) -> f64| env.estimate(&Arm { backend }, f).map_or(f64::NAN, |e| e.median);
    let mut per_echo: Vec<(String, f64)> =
        p.backends.iter().map(|&b| (b.to_string(), median(b, |s| s.syscalls_per_echo))).collect();
    for r in &p.published {
        let name = if r.server == "epoll" { "paper epoll" } else { "paper uring" };
        per_echo.push((name.into(), r.syscalls_per_echo));
    }
    let rate: Vec<(String, f64)> =
        p.backends.iter().map(|&b| (b.to_string(), median(b, |s| s.echoes_per_sec))).collect();
    plot::bar_panels(&[
        plot::Panel { title: "E4: server syscalls per echo", y_label: "syscalls per echo", bars: per_echo },
        plot::Panel { title: "E4: echoes per second", y_label: "echoes per second", bars: rate },
    ])
}
