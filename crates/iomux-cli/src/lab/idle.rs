//! E2 `idle`: 10 active echo connections among Z idle ones; the time for
//! 40,000 round trips (the Chinese epoll article's "poll vs epoll" test).

use super::cell::{self, data_path_syscalls, f64_of};
use super::measure::median;
use super::plot::{self, Axes, Series};
use super::table::{thousands, Table};
use super::{Check, Outcome, Settings};
use crate::progress::Progress;
use crate::CliResult;
use iomux::Backend;
use serde_json::json;

pub const NAME: &str = "idle";
const IDLE: [usize; 12] = [0, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240];
const ACTIVE: usize = 10;
const ROUND_TRIPS: u64 = 40_000;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Idle connection counts, comma-separated [default: the article's
    /// 0, 10, 20, ... 10240]
    #[arg(long, value_delimiter = ',')]
    pub idle: Option<Vec<usize>>,
    /// Backends, comma-separated [default: all]
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend)]
    pub backends: Option<Vec<Backend>>,
}

struct Row {
    backend: Backend,
    idle: usize,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    server_cpu_s: f64,
    syscalls_per_request: f64,
    note: Option<String>,
}

pub fn run(args: &Args, settings: &Settings) -> CliResult<Outcome> {
    let idles = args.idle.clone().unwrap_or_else(|| IDLE.to_vec());
    let backends = args.backends.clone().unwrap_or_else(|| Backend::ALL.to_vec());
    // Cells that take under a second get this many runs (median); the
    // slow ones (poll and select among thousands of idle fds) one.
    let reps = 5;
    let progress = Progress::new(NAME, (idles.len() * backends.len()) as u64);
    let mut rows = Vec::new();
    for &backend in &backends {
        // Repetitions go round-robin over Z, so a slow spell of this shared
        // machine lands on different cells in different rounds and the
        // median per cell leaves it out.
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); idles.len()];
        let mut notes: Vec<Option<String>> = vec![None; idles.len()];
        for rep in 0..reps {
            for (i, &idle) in idles.iter().enumerate() {
                // One run is enough where a run takes over a second.
                if notes[i].is_some() || samples[i].first().is_some_and(|s| s.seconds > 1.0) {
                    continue;
                }
                progress.step(&format!("{backend}: {ACTIVE} active + {idle} idle (round {}/{reps})", rep + 1));
                match run_once(backend, idle)? {
                    Ok(sample) => samples[i].push(sample),
                    Err(note) => notes[i] = Some(note),
                }
            }
        }
        for (i, &idle) in idles.iter().enumerate() {
            rows.push(summarize(backend, idle, &samples[i], notes[i].take()));
            progress.inc(1);
        }
    }
    progress.finish();

    let time_of = |b: Backend, z: usize| {
        rows.iter().find(|r| r.backend == b && r.idle == z && r.note.is_none()).map(|r| r.seconds)
    };
    let mut checks = Vec::new();
    let (first, last) = (idles.iter().min().copied(), idles.iter().max().copied());
    if let (Some(z0), Some(zn)) = (first, last) {
        let ratio = |b| Some(time_of(b, zn)? / time_of(b, z0)?);
        let claim_epoll = format!("epoll: abs(time at Z = {zn} / time at Z = {z0} - 1)");
        checks.push(
            match ratio(Backend::Epoll) {
                Some(r) => Check::at_most(
                    &claim_epoll,
                    (r - 1.0).abs(),
                    0.10,
                    format!("ratio {r:.3}; flat is within 10% of 1"),
                ),
                None => Check::not_measured(&claim_epoll, 0.10),
            }
            .documents("epoll's time stays flat among idle connections"),
        );
        let claim_poll = format!("poll: time at Z = {zn} / time at Z = {z0}");
        checks.push(
            match ratio(Backend::Poll) {
                Some(r) => Check::new(&claim_poll, r, 5.0, format!("{r:.1}x from Z = {z0} to Z = {zn}")),
                None => Check::not_measured(&claim_poll, 5.0),
            }
            .documents("poll's time grows with the number of idle connections"),
        );
    }
    let (checks, noise) = settings.judge(checks);

    // ---- tables
    let mut t = Table::new(std::iter::once("idle Z".to_string()).chain(backends.iter().map(|b| b.name().to_string())));
    let mut notes = Vec::new();
    for &z in &idles {
        let mut line = vec![thousands(z as f64)];
        for &b in &backends {
            let r = rows.iter().find(|r| r.backend == b && r.idle == z);
            line.push(match r {
                Some(Row { note: Some(n), .. }) => {
                    if !notes.contains(n) {
                        notes.push(n.clone());
                    }
                    format!("n/a [{}]", notes.iter().position(|x| x == n).unwrap_or(0) + 1)
                }
                Some(r) => format!("{:.3}", r.seconds),
                None => "-".into(),
            });
        }
        t.row(line);
    }
    let mut detail = Table::new(["backend", "idle Z", "p50 us", "p99 us", "server CPU s", "syscalls/request"]);
    for r in rows.iter().filter(|r| r.note.is_none()) {
        detail.row([
            r.backend.name().to_string(),
            thousands(r.idle as f64),
            format!("{:.1}", r.p50_us),
            format!("{:.1}", r.p99_us),
            format!("{:.3}", r.server_cpu_s),
            format!("{:.3}", r.syscalls_per_request),
        ]);
    }
    let mut md = format!(
        "## E2 idle: seconds for {} round trips by {ACTIVE} active connections among Z idle ones\n\n\
         Machine: {}. Server (`iomux serve`, echo) and load (`iomux load`, io_uring client) on separate CPUs; \
         median of up to {} runs per cell (one when a run takes over a second). Published (kernel 2.6.11, PIII 933 MHz, 100 Mbit LAN; a plot, no table): \
         **poll's time grows linearly with Z, epoll's stays flat; at Z = 0 poll is slightly faster than epoll.**\n\n",
        thousands(ROUND_TRIPS as f64),
        settings.machine.summary(),
        reps,
    );
    md += &t.render();
    for (i, n) in notes.iter().enumerate() {
        md += &format!("\n[{}] {n}  ", i + 1);
    }
    md += "\n\nLatency, server CPU (whole server process, including accepting the idle connections) and \
           data-path syscalls (waits, reads, writes) per request:\n\n";
    md += &detail.render();
    md += "\n";
    md += &super::render_checks(&checks, noise.as_ref());
    println!("{md}");

    let json_rows: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut v = json!({"backend": r.backend.name(), "idle": r.idle});
            if let Some(n) = &r.note {
                v["note"] = json!(n);
                v["seconds"] = json!(null);
            } else {
                v["seconds"] = json!(r.seconds);
                v["p50_us"] = json!(r.p50_us);
                v["p99_us"] = json!(r.p99_us);
                v["server_cpu_s"] = json!(r.server_cpu_s);
                v["syscalls_per_request"] = json!(r.syscalls_per_request);
            }
            v
        })
        .collect();
    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": {"active": ACTIVE, "idle": idles, "round_trips": ROUND_TRIPS, "msg_size": 100,
                   "repetitions": reps, "load_backend": cell::LOAD_BACKEND.name()},
        "published": "poll's time grows linearly with the number of idle connections; epoll's stays flat; \
                      with none idle, poll is slightly faster than epoll (a plot; no figures)",
        "rows": json_rows,
        "noise": noise,
        "checks": checks,
    });
    let series: Vec<Series> = backends
        .iter()
        .map(|&b| Series {
            name: b.name().into(),
            points: idles.iter().map(|&z| (z as f64, time_of(b, z).unwrap_or(f64::NAN))).collect(),
            published: false,
        })
        .collect();
    let axes = Axes {
        title: "E2: seconds for 40,000 round trips vs idle connections",
        x_label: "idle connections (N)",
        y_label: "wall time (s)",
        x_log: false,
        y_log: false,
    };
    let svg = plot::line_chart(&axes, &series)?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files })
}

#[derive(Clone, Copy)]
struct Sample {
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    server_cpu_s: f64,
    syscalls_per_request: f64,
}

/// One run of a cell, or why the cell cannot be measured.
fn run_once(backend: Backend, idle: usize) -> CliResult<Result<Sample, String>> {
    // select: every fd number must be below FD_SETSIZE; the server uses a
    // handful of its own (std streams, listener, waker).
    if backend == Backend::Select && idle + ACTIVE + 8 > iomux::poller::FD_SETSIZE {
        return Ok(Err(format!(
            "select: {ACTIVE} + Z connections need fd numbers past FD_SETSIZE ({}); select cannot watch them",
            iomux::poller::FD_SETSIZE
        )));
    }
    let c = cell::run_with_idle(backend, "echo", None, idle, |a| {
        a.conns = ACTIVE;
        a.requests = Some(ROUND_TRIPS);
    })?;
    c.require_no_errors(&format!("E2 {backend} Z={idle}"))?;
    let requests = c.load["echoes"].as_u64().unwrap_or(0).max(1) as f64;
    let s = &c.server.stats;
    Ok(Ok(Sample {
        seconds: f64_of(&c.load["seconds"]),
        p50_us: f64_of(&c.load["latency"]["p50_us"]),
        p99_us: f64_of(&c.load["latency"]["p99_us"]),
        server_cpu_s: cell::server_cpu_s(s),
        syscalls_per_request: data_path_syscalls(s) as f64 / requests,
    }))
}

/// The cell's row: medians of its samples, or its note.
fn summarize(backend: Backend, idle: usize, samples: &[Sample], note: Option<String>) -> Row {
    let pick = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
    Row {
        backend,
        idle,
        seconds: pick(|s| s.seconds),
        p50_us: pick(|s| s.p50_us),
        p99_us: pick(|s| s.p99_us),
        server_cpu_s: pick(|s| s.server_cpu_s),
        syscalls_per_request: pick(|s| s.syscalls_per_request),
        note,
    }
}
