//! E6 `http`: `iomux serve --proto http` on each backend beside nginx
//! (one worker, `return 200`), on the same CPU, measured by clients
//! nobody here wrote: wrk (with and without pipelining) and h2load
//! `--h1`, on the other CPU. Requests/s, server CPU per request, both
//! sides' CPU shares (so a client-bound cell says so), latency, errors,
//! and iomux's syscalls per request.

use super::child::ServerChild;
use super::http_clients::{self, Client, Report, Tool, INSTALL};
use super::nginx::Nginx;
use super::peers::{order, spread, Stat};
use super::table::{thousands, Table};
use super::{plot, Check, Outcome, Settings};
use crate::progress::Progress;
use crate::CliResult;
use iomux::Backend;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

pub const NAME: &str = "http";

/// TechEmpower's plaintext test and the issue's: 100 connections, one
/// client thread.
const CONNS: u32 = 100;
const QUICK_SECONDS: u32 = 1;
const FULL_SECONDS: u32 = 10;
const QUICK_REPS: usize = 3;
const FULL_REPS: usize = 5;
const DEFAULT_DEPTHS: [u32; 2] = [1, 16];
/// A side using at least this share of its CPU sets the pace.
const SATURATED: f64 = 0.95;
/// iomux's goal against nginx, in requests/s and in CPU per request.
const GOAL: f64 = 1.2;
/// How far h2load's requests/s may be from wrk's.
const AGREEMENT: f64 = 0.10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Iomux(Backend),
    Nginx,
}

impl Server {
    pub fn name(&self) -> String {
        match self {
            Server::Iomux(b) => format!("iomux-{}", b.name()),
            Server::Nginx => "nginx".into(),
        }
    }
}

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// iomux backends, comma-separated [default: all six]
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend)]
    pub backends: Option<Vec<Backend>>,
    /// Pipelining depths, comma-separated: requests a client sends before
    /// reading the answers (1: none) [default: 1,16]
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=256))]
    pub depths: Option<Vec<u32>>,
    #[arg(long, help = format!("Repetitions, servers in another order each time [default: {QUICK_REPS}; --full: {FULL_REPS}]"))]
    pub reps: Option<usize>,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3600),
          help = format!("Seconds per client run (wrk counts whole seconds) [default: {QUICK_SECONDS}; --full: {FULL_SECONDS}]"))]
    pub seconds: Option<u32>,
}

/// Everything checked before the first cell runs.
struct Plan {
    servers: Vec<Server>,
    depths: Vec<u32>,
    clients: Vec<(Client, PathBuf)>,
    /// Tools not found, with why; the cells that need them are not run.
    missing: Vec<String>,
    reps: usize,
    seconds: u32,
}

fn plan(args: &Args, settings: &Settings) -> CliResult<Plan> {
    let backends = args.backends.clone().unwrap_or_else(|| Backend::ALL.to_vec());
    let depths = args.depths.clone().unwrap_or_else(|| DEFAULT_DEPTHS.to_vec());
    for (i, b) in backends.iter().enumerate() {
        if backends[..i].contains(b) {
            return Err(format!("--backends names {b} twice").into());
        }
    }
    for (i, d) in depths.iter().enumerate() {
        if depths[..i].contains(d) {
            return Err(format!("--depths names {d} twice").into());
        }
    }
    if backends.is_empty() || depths.is_empty() {
        return Err("--backends and --depths need at least one value each".into());
    }
    let reps = args.reps.unwrap_or(if settings.full { FULL_REPS } else { QUICK_REPS });
    if reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let seconds = args.seconds.unwrap_or(if settings.full { FULL_SECONDS } else { QUICK_SECONDS });
    let mut missing = Vec::new();
    let mut servers: Vec<Server> = backends.into_iter().map(Server::Iomux).collect();
    match Tool::Nginx.find() {
        Ok(_) => servers.push(Server::Nginx),
        Err(why) => missing.push(why),
    }
    let mut clients = Vec::new();
    for client in [Client::Wrk, Client::H2load] {
        match client.tool().find() {
            Ok(path) => clients.push((client, path)),
            Err(why) => missing.push(why),
        }
    }
    Ok(Plan { servers, depths, clients, missing, reps, seconds })
}

/// Checks the flags without running anything (`iomux bench` does so
/// before its first experiment).
pub fn check(args: &Args, settings: &Settings) -> CliResult<()> {
    plan(args, settings).map(|_| ())
}

/// One run of one cell.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub report: Report,
    /// User + system time of the server's processes over the client's run.
    pub server_cpu_us_per_request: f64,
    /// Shares of one CPU over the client's measured seconds.
    pub server_util: f64,
    pub client_util: f64,
    /// iomux only: the syscalls its loop made over its whole life (starting,
    /// the client's connects and closes included) per response it sent.
    pub syscalls_per_request: Option<f64>,
}

/// One (server, client, depth) over its repetitions.
struct Cell {
    server: Server,
    client: Client,
    depth: u32,
    runs: Vec<Result<Run, String>>,
}

impl Cell {
    fn stat(&self, f: impl Fn(&Run) -> f64) -> Stat {
        Stat::of(self.runs.iter().filter_map(|r| r.as_ref().ok()).map(f))
    }
    fn rate(&self) -> f64 {
        self.stat(|r| r.report.requests_per_sec).median
    }
    fn errors(&self) -> u64 {
        self.runs.iter().filter_map(|r| r.as_ref().ok()).map(|r| r.report.errors).sum()
    }
    fn failure(&self) -> Option<&String> {
        self.runs.iter().find_map(|r| r.as_ref().err())
    }
}

/// Whether `addr` answers `GET /plaintext` with TechEmpower's body.
pub fn answers_plaintext(addr: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    s.write_all(b"GET /plaintext HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    if text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with("\r\n\r\nHello, World!") {
        Ok(())
    } else {
        Err(format!("unexpected answer to GET /plaintext: {text:?}"))
    }
}

/// Sum of the processes' CPU time now.
fn cpu_of(pids: &[u32]) -> Duration {
    pids.iter().filter_map(|&p| crate::os::process_cpu(p).ok()).sum()
}

fn run_cell(
    server: Server,
    client: Client,
    program: &std::path::Path,
    depth: u32,
    plan: &Plan,
    script: &std::path::Path,
) -> Result<Run, String> {
    let (server_cpu, client_cpu) = super::cell::cpus();
    let measure = |addr: SocketAddr, pids: &[u32]| -> Result<(Report, Duration, Duration), String> {
        answers_plaintext(addr).map_err(|e| format!("{}: {e}", server.name()))?;
        let url = format!("http://{addr}/plaintext");
        let args = http_clients::args(client, &url, CONNS, depth, plan.seconds, Some(script));
        let before = cpu_of(pids);
        let (report, used) =
            http_clients::run(client, program, &args, client_cpu, plan.seconds).map_err(|e| e.to_string())?;
        Ok((report, cpu_of(pids).saturating_sub(before), used))
    };
    let (report, server_used, client_used, syscalls) = match server {
        Server::Iomux(backend) => {
            let child =
                ServerChild::start_with(backend, "http", server_cpu, None, 1, &[]).map_err(|e| e.to_string())?;
            let pid = child.pid;
            let measured = measure(child.addr, &[pid]);
            let stats = child.stop().map_err(|e| e.to_string())?.stats;
            let (report, s, c) = measured?;
            let responses = stats["http_responses"].as_f64().unwrap_or(f64::NAN);
            let syscalls = super::cell::f64_of(&stats["syscalls_total"]) / responses;
            (report, s, c, syscalls.is_finite().then_some(syscalls))
        }
        Server::Nginx => {
            let program = Tool::Nginx.find()?;
            let nginx = Nginx::start(&program, server_cpu).map_err(|e| e.to_string())?;
            let pids = nginx.pids();
            let measured = measure(nginx.addr, &pids);
            nginx.stop().map_err(|e| e.to_string())?;
            let (report, s, c) = measured?;
            (report, s, c, None)
        }
    };
    let per = |d: Duration| d.as_secs_f64() / report.seconds;
    Ok(Run {
        server_cpu_us_per_request: server_used.as_secs_f64() * 1e6 / report.requests.max(1) as f64,
        server_util: per(server_used),
        client_util: per(client_used),
        syscalls_per_request: syscalls,
        report,
    })
}

pub fn run(args: &Args, settings: &Settings) -> CliResult<Outcome> {
    let plan = plan(args, settings)?;
    if plan.clients.is_empty() {
        return skipped(&plan, settings);
    }
    for why in &plan.missing {
        eprintln!("{NAME}: {why}; install: {INSTALL}. Running without it.");
    }
    let scratch = crate::os::PrivateDir::new("iomux-lab-http", "the wrk script")
        .map_err(|e| format!("creating a folder for the wrk script: {e}"))?;
    let mut cells: Vec<Cell> = Vec::new();
    for &(client, _) in &plan.clients {
        for &depth in &plan.depths {
            for &server in &plan.servers {
                cells.push(Cell { server, client, depth, runs: Vec::new() });
            }
        }
    }
    let progress = Progress::new(NAME, (cells.len() * plan.reps) as u64);
    for rep in 0..plan.reps {
        for si in order(plan.servers.len(), rep) {
            let server = plan.servers[si];
            for (client, program) in &plan.clients {
                for &depth in &plan.depths {
                    progress.step(&format!(
                        "rep {}/{}: {} {} depth {depth}",
                        rep + 1,
                        plan.reps,
                        server.name(),
                        client.name()
                    ));
                    let lua = scratch.0.join(format!("pipeline-{depth}.lua"));
                    if depth > 1 && !lua.exists() {
                        std::fs::write(&lua, http_clients::wrk_pipeline_script(depth))
                            .map_err(|e| format!("writing {}: {e}", lua.display()))?;
                    }
                    let result = run_cell(server, *client, program, depth, &plan, &lua);
                    if let Err(e) = &result {
                        progress.println(&format!("{NAME}: {} {} depth {depth}: {e}", server.name(), client.name()));
                    }
                    if let Some(cell) =
                        cells.iter_mut().find(|c| c.server == server && c.client == *client && c.depth == depth)
                    {
                        cell.runs.push(result);
                    }
                    progress.inc(1);
                }
            }
        }
    }
    progress.finish();
    let (checks, noise) = settings.judge(checks(&cells, &plan));
    let md = markdown(&cells, &plan, settings, &checks, noise.as_ref());
    println!("{md}");
    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": params(&plan),
        "cells": cells.iter().map(cell_json).collect::<Vec<_>>(),
        "noise": noise,
        "checks": checks,
    });
    let svg = svg(&cells, &plan)?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files })
}

fn params(plan: &Plan) -> Value {
    let (server_cpu, client_cpu) = super::cell::cpus();
    json!({
        "servers": plan.servers.iter().map(Server::name).collect::<Vec<_>>(),
        "clients": plan.clients.iter().map(|(c, p)| json!({"client": c.name(), "path": p})).collect::<Vec<_>>(),
        "missing": plan.missing,
        "depths": plan.depths, "conns": CONNS, "client_threads": 1,
        "reps": plan.reps, "seconds": plan.seconds,
        "server_cpu": server_cpu, "client_cpu": client_cpu,
        "saturated_at": SATURATED,
    })
}

/// No client to measure with: say what is missing and how to install it,
/// and let the rest of the bench run.
fn skipped(plan: &Plan, settings: &Settings) -> CliResult<Outcome> {
    let why = format!("{}; install them with {INSTALL}", plan.missing.join("; "));
    eprintln!("{NAME}: skipped: {why}");
    let checks: Vec<Check> =
        claims(&plan.depths).into_iter().map(|(claim, t)| Check::not_measured(&claim, t)).collect();
    let (checks, noise) = settings.judge(checks);
    let md = format!(
        "## E6 http: iomux serve --proto http beside nginx, measured by wrk and h2load\n\nSkipped: {why}.\n\n{}",
        super::render_checks(&checks, noise.as_ref())
    );
    println!("{md}");
    let doc = json!({
        "experiment": NAME, "machine": settings.machine, "params": params(plan),
        "skipped": why, "cells": [], "noise": noise, "checks": checks,
    });
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, None)?;
    Ok(Outcome { files })
}

/// The claims E6 tests, with their thresholds, in order.
fn claims(depths: &[u32]) -> Vec<(String, f64)> {
    let mut c: Vec<(String, f64)> =
        depths.iter().map(|d| (format!("E6 wrk depth {d}: iomux best req/s / nginx's"), GOAL)).collect();
    c.push(("E6 h2load req/s / wrk's: worst abs(ratio - 1)".into(), AGREEMENT));
    c.push(("E6 errors reported by wrk and h2load".into(), 0.0));
    if depths.contains(&1) {
        c.push(("E6 wrk depth 1: nginx CPU/request / iomux best's".into(), GOAL));
    }
    c
}

fn find(cells: &[Cell], server: Server, client: Client, depth: u32) -> Option<&Cell> {
    cells.iter().find(|c| c.server == server && c.client == client && c.depth == depth)
}

/// "client-bound" text when a cell's client used its whole CPU.
fn bound(cell: &Cell) -> Option<String> {
    let client = cell.stat(|r| r.client_util).median;
    (client >= SATURATED).then(|| {
        format!("{} used {:.0}% of its CPU against {}", cell.client.name(), client * 100.0, cell.server.name())
    })
}

fn checks(cells: &[Cell], plan: &Plan) -> Vec<Check> {
    let mut out = Vec::new();
    let claims = claims(&plan.depths);
    let mut claim = claims.iter();
    for &depth in &plan.depths {
        let (name, goal) = claim.next().cloned().unwrap_or_default();
        let best = cells
            .iter()
            .filter(|c| c.client == Client::Wrk && c.depth == depth && matches!(c.server, Server::Iomux(_)))
            .filter(|c| c.rate().is_finite())
            .max_by(|a, b| a.rate().total_cmp(&b.rate()));
        let nginx = find(cells, Server::Nginx, Client::Wrk, depth).filter(|c| c.rate().is_finite());
        out.push(match (best, nginx) {
            (Some(i), Some(n)) => {
                let mut detail =
                    format!("{} {} vs nginx {} req/s", i.server.name(), thousands(i.rate()), thousands(n.rate()));
                let bounds: Vec<String> = [i, n].into_iter().filter_map(bound).collect();
                if !bounds.is_empty() {
                    detail += &format!(
                        "; client-bound ({}): the ratio measures the client, not the servers",
                        bounds.join(", ")
                    );
                }
                Check::new(&name, i.rate() / n.rate(), goal, detail)
            }
            _ => Check::not_measured(&name, goal),
        });
    }
    let (name, limit) = claim.next().cloned().unwrap_or_default();
    let mut worst: Option<(f64, String)> = None;
    for &server in &plan.servers {
        for &depth in &plan.depths {
            let (Some(w), Some(h)) =
                (find(cells, server, Client::Wrk, depth), find(cells, server, Client::H2load, depth))
            else {
                continue;
            };
            let ratio = h.rate() / w.rate();
            if !ratio.is_finite() {
                continue;
            }
            let dev = (ratio - 1.0).abs();
            if worst.as_ref().is_none_or(|(d, _)| dev > *d) {
                let mut what = format!(
                    "{} depth {depth}: h2load {} vs wrk {} req/s",
                    server.name(),
                    thousands(h.rate()),
                    thousands(w.rate())
                );
                let bounds: Vec<String> = [w, h].into_iter().filter_map(bound).collect();
                if !bounds.is_empty() {
                    what += &format!("; client-bound ({}): each client measured its own ceiling", bounds.join(", "));
                }
                worst = Some((dev, what));
            }
        }
    }
    out.push(match worst {
        Some((dev, what)) => Check::at_most(&name, dev, limit, format!("worst: {what}")),
        None => Check::not_measured(&name, limit),
    });
    let (name, zero) = claim.next().cloned().unwrap_or_default();
    // Every failed run, not every cell with one.
    let failed: Vec<String> = cells
        .iter()
        .flat_map(|c| c.runs.iter().filter_map(move |r| r.as_ref().err().map(|e| format!("{}: {e}", c.server.name()))))
        .collect();
    let errors: u64 = cells.iter().map(Cell::errors).sum();
    let mut detail: Vec<String> = cells
        .iter()
        .filter(|c| c.errors() > 0)
        .map(|c| format!("{} {} depth {}: {}", c.server.name(), c.client.name(), c.depth, c.errors()))
        .collect();
    if let Some(first) = failed.first() {
        detail.push(format!("{} runs failed, first: {first}", failed.len()));
    }
    let runs: usize = cells.iter().map(|c| c.runs.len()).sum();
    out.push(if runs == 0 {
        Check::not_measured(&name, zero)
    } else {
        let detail =
            if detail.is_empty() { format!("{runs} client runs, none with an error") } else { detail.join("; ") };
        Check::at_most(&name, (errors + failed.len() as u64) as f64, zero, detail)
    });
    if let Some((name, goal)) = claim.next().cloned() {
        let cpu = |c: &Cell| c.stat(|r| r.server_cpu_us_per_request).median;
        let best = cells
            .iter()
            .filter(|c| c.client == Client::Wrk && c.depth == 1 && matches!(c.server, Server::Iomux(_)))
            .filter(|c| cpu(c).is_finite())
            .min_by(|a, b| cpu(a).total_cmp(&cpu(b)));
        let nginx = find(cells, Server::Nginx, Client::Wrk, 1).filter(|c| cpu(c).is_finite());
        out.push(match (best, nginx) {
            (Some(i), Some(n)) => Check::new(
                &name,
                cpu(n) / cpu(i),
                goal,
                format!("nginx {:.3} us vs {} {:.3} us", cpu(n), i.server.name(), cpu(i)),
            ),
            _ => Check::not_measured(&name, goal),
        });
    }
    out
}

fn markdown(
    cells: &[Cell],
    plan: &Plan,
    settings: &Settings,
    checks: &[Check],
    noise: Option<&super::noise::Noise>,
) -> String {
    let (server_cpu, client_cpu) = super::cell::cpus();
    let placement = match (server_cpu, client_cpu) {
        (Some(s), Some(c)) => format!("Every server runs pinned to CPU {s}, the client to CPU {c}."),
        _ => "This machine has one CPU, so nothing is pinned.".to_string(),
    };
    let mut md = format!(
        "## E6 http: iomux serve --proto http beside nginx, measured by wrk and h2load\n\n\
         Machine: {}. {placement} Servers: `iomux serve --proto http --backend B` (one loop) and nginx \
         (`worker_processes 1`, `access_log off`, `keepalive_requests` unlimited, `location = /plaintext {{ \
         return 200 \"Hello, World!\"; }}`). Clients: `wrk -t1 -c{CONNS} -d{s}s --latency` (depth > 1: a \
         generated Lua script sends that many `GET /plaintext` per write) and `h2load --h1 -t1 -c{CONNS} -D {s}` \
         (`-m D`: D requests pipelined). Each client run gets a fresh server, checked to answer `GET /plaintext` \
         first. Requests/s are the client's own (requests over its measured seconds). Server CPU: user + system \
         time of the server's processes (nginx: master and worker) from just before the client starts to its \
         exit, over the requests; CPU shares are of one CPU over the client's measured seconds. A side at \
         {:.0}% or more of its CPU sets the pace: when the client is, the requests/s measure the client. \
         Syscalls/request (iomux only): the server's own counters over its life over its responses. Medians of \
         {} repetitions, (min–max) where they differ; the servers run in another order each repetition.\n\n",
        settings.machine.summary(),
        SATURATED * 100.0,
        plan.reps,
        s = plan.seconds,
    );
    if !plan.missing.is_empty() {
        md += &format!("Not run: {}; install with {INSTALL}.\n\n", plan.missing.join("; "));
    }
    for (client, _) in &plan.clients {
        for &depth in &plan.depths {
            md += &format!("**{} depth {depth}**\n\n", client.name());
            let nginx = find(cells, Server::Nginx, *client, depth).map(Cell::rate).filter(|r| r.is_finite());
            let mut t = Table::new([
                "server",
                "requests/s",
                "/ nginx",
                "server CPU us/req",
                "server CPU",
                "client CPU",
                if *client == Client::Wrk { "p50 us" } else { "mean us" },
                if *client == Client::Wrk { "p99 us" } else { "-" },
                "errors",
                "syscalls/req",
            ]);
            let mut failures = Vec::new();
            for &server in &plan.servers {
                let Some(c) = find(cells, server, *client, depth) else { continue };
                if let Some(e) = c.failure() {
                    failures.push(format!("{}: {e}", server.name()));
                }
                let pct = |v: f64| format!("{:.0}%", v * 100.0);
                let us = |v: f64| format!("{v:.0}");
                let (lat1, lat2) = if *client == Client::Wrk {
                    (
                        spread(c.stat(|r| r.report.p50_us.unwrap_or(f64::NAN)), us),
                        spread(c.stat(|r| r.report.p99_us.unwrap_or(f64::NAN)), us),
                    )
                } else {
                    (spread(c.stat(|r| r.report.mean_us.unwrap_or(f64::NAN)), us), "-".into())
                };
                t.row([
                    server.name(),
                    spread(c.stat(|r| r.report.requests_per_sec), thousands),
                    nginx.map_or("-".into(), |n| format!("{:.2}", c.rate() / n)),
                    spread(c.stat(|r| r.server_cpu_us_per_request), |v| format!("{v:.3}")),
                    spread(c.stat(|r| r.server_util), pct),
                    spread(c.stat(|r| r.client_util), pct),
                    lat1,
                    lat2,
                    c.errors().to_string(),
                    spread(c.stat(|r| r.syscalls_per_request.unwrap_or(f64::NAN)), |v| format!("{v:.3}")),
                ]);
            }
            md += &t.render();
            for f in failures {
                md += &format!("\nNot measured: {f}  ");
            }
            md += "\n\n";
        }
    }
    md += &super::render_checks(checks, noise);
    md
}

fn cell_json(c: &Cell) -> Value {
    let put = |s: Stat| json!({"median": s.median, "min": s.min, "max": s.max});
    json!({
        "server": c.server.name(),
        "client": c.client.name(),
        "depth": c.depth,
        "requests_per_sec": put(c.stat(|r| r.report.requests_per_sec)),
        "server_cpu_us_per_request": put(c.stat(|r| r.server_cpu_us_per_request)),
        "server_cpu_util": put(c.stat(|r| r.server_util)),
        "client_cpu_util": put(c.stat(|r| r.client_util)),
        "errors": c.errors(),
        "runs": c.runs.iter().map(|r| match r {
            Ok(run) => serde_json::to_value(run).unwrap_or(Value::Null),
            Err(e) => json!({"error": e}),
        }).collect::<Vec<_>>(),
    })
}

fn svg(cells: &[Cell], plan: &Plan) -> CliResult<String> {
    let mut groups = Vec::new();
    for (client, _) in &plan.clients {
        for &depth in &plan.depths {
            groups.push((format!("{} depth {depth}", client.name()), *client, depth));
        }
    }
    let series: Vec<plot::BarSeries> = plan
        .servers
        .iter()
        .map(|&server| plot::BarSeries {
            name: server.name(),
            values: groups
                .iter()
                .map(|(_, client, depth)| {
                    let s = find(cells, server, *client, *depth)
                        .map_or(Stat::of(None), |c| c.stat(|r| r.report.requests_per_sec));
                    (s.median, s.min, s.max)
                })
                .collect(),
        })
        .collect();
    let names: Vec<String> = groups.into_iter().map(|(n, _, _)| n).collect();
    plot::grouped_bars(
        "E6: HTTP GET /plaintext requests/s, 100 connections (median, whiskers min to max)",
        "client and pipelining depth (requests per write)",
        "requests/s",
        &names,
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(server: Server, client: Client, depth: u32, rate: f64, client_util: f64) -> Cell {
        let report = Report { requests: rate as u64, seconds: 1.0, requests_per_sec: rate, ..Report::default() };
        let r = Run {
            report,
            server_cpu_us_per_request: 1e6 / rate,
            server_util: 1.0,
            client_util,
            syscalls_per_request: None,
        };
        Cell { server, client, depth, runs: vec![Ok(r)] }
    }

    fn plan(servers: Vec<Server>) -> Plan {
        Plan {
            servers,
            depths: vec![1, 16],
            clients: vec![(Client::Wrk, "wrk".into()), (Client::H2load, "h2load".into())],
            missing: vec![],
            reps: 1,
            seconds: 1,
        }
    }

    #[test]
    fn a_client_bound_ratio_says_so() {
        let (i, n) = (Server::Iomux(Backend::Uring), Server::Nginx);
        let cells = vec![
            run(i, Client::Wrk, 1, 220_000.0, 0.99),
            run(n, Client::Wrk, 1, 212_000.0, 0.97),
            run(i, Client::Wrk, 16, 2_000_000.0, 0.99),
            run(n, Client::Wrk, 16, 320_000.0, 0.75),
            run(i, Client::H2load, 1, 210_000.0, 0.99),
            run(n, Client::H2load, 1, 210_000.0, 0.9),
            run(i, Client::H2load, 16, 1_400_000.0, 0.99),
            run(n, Client::H2load, 16, 321_000.0, 0.7),
        ];
        let c = checks(&cells, &plan(vec![i, n]));
        assert_eq!(c.len(), 5);
        assert_eq!(c[0].met, Some(false));
        assert!(c[0].detail.contains("client-bound") && c[0].detail.contains("wrk used 99%"), "{}", c[0].detail);
        assert_eq!(c[1].met, Some(true));
        assert!((c[1].value.unwrap() - 6.25).abs() < 1e-9);
        // The worst disagreement is iomux at depth 16, where both clients ran out of CPU.
        assert_eq!(c[2].met, Some(false));
        assert!(c[2].detail.contains("iomux-uring depth 16") && c[2].detail.contains("own ceiling"), "{}", c[2].detail);
        assert_eq!((c[3].value, c[3].met), (Some(0.0), Some(true)));
        assert!((c[4].value.unwrap() - 220_000.0 / 212_000.0).abs() < 1e-9);
    }

    #[test]
    fn errors_and_failures_count() {
        let i = Server::Iomux(Backend::Epoll);
        let mut bad = run(i, Client::Wrk, 1, 1000.0, 0.5);
        if let Ok(r) = &mut bad.runs[0] {
            r.report.errors = 3;
        }
        bad.runs.push(Err("server died".into()));
        let c = checks(&[bad], &plan(vec![i]));
        let errors = c.iter().find(|c| c.claim.contains("errors")).unwrap();
        assert_eq!((errors.value, errors.met), (Some(4.0), Some(false)));
        assert!(errors.detail.contains("server died"), "{}", errors.detail);
    }
}
