//! E5 `peers`: iomux's servers beside echo servers written the idiomatic
//! way on other runtimes (tokio, monoio, compio) and a plain C epoll
//! server, each on one thread pinned to one CPU, under the same loads:
//! echoes/s, server CPU per echo, latency, syscalls, memory.

use super::child::Tracer;
use super::measure::median;
use super::peer_cell::{self, Failure, Load, Run, Server, Syscalls};
use super::table::{thousands, Table};
use super::{plot, Check, Outcome, Settings};
use crate::progress::Progress;
use crate::CliResult;
use iomux::Backend;
use iomux_peers::Peer;
use serde_json::{json, Map, Value};

pub const NAME: &str = "peers";

/// iomux's servers by default: level- and edge-triggered epoll, io_uring.
const IOMUX_BACKENDS: [Backend; 3] = [Backend::Epoll, Backend::EpollEt, Backend::Uring];

/// Open loop: messages per second in all, a rate every server sustains.
pub const OPEN_RATE: f64 = 100_000.0;

/// Open loop: the load's schedule grid (`iomux load --tick-us`), wrk2's
/// 1 ms resolution. With the load's default 100 us it woke ten times as
/// often and used 90-95% of its CPU at OPEN_RATE (8.8-9.5 us per echo),
/// so the load, not the server, set the pace; at 1 ms it uses about half.
pub const OPEN_TICK_US: u32 = 1000;

/// A side using at least this share of one CPU over the window is
/// saturated: it, not the other, sets the pace.
pub const SATURATED: f64 = 0.90;

/// Open loop: the share of [`OPEN_RATE`] the echoes/s must reach in every
/// repetition for the row to count as run at that rate.
pub const SUSTAINED: f64 = 0.99;

/// Seconds of load per cell: quick settings keep all 128 cells (8
/// servers x 4 scenarios x (3 repetitions + the perf run)) near 3 minutes.
const QUICK_SECONDS: f64 = 1.25;
const FULL_SECONDS: f64 = 5.0;
const REPS: usize = 3;

/// Quick settings: the perf run of a cell is this short at most (a ratio
/// of two counts, syscalls over echoes, settles sooner than a time).
const QUICK_PERF_SECONDS: f64 = 0.5;

/// A closed loop of N connections, or an open loop of N connections at
/// [`OPEN_RATE`] in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub conns: usize,
    pub open: bool,
}

impl Scenario {
    pub fn name(&self) -> String {
        format!("{}-{}", if self.open { "open" } else { "closed" }, self.conns)
    }

    fn describe(&self) -> String {
        if self.open {
            format!("{} connections, open loop at {} msgs/s in all", thousands(self.conns as f64), thousands(OPEN_RATE))
        } else {
            format!("{} connections, closed loop", thousands(self.conns as f64))
        }
    }
}

const DEFAULT_SCENARIOS: [Scenario; 4] = [
    Scenario { conns: 100, open: false },
    Scenario { conns: 1000, open: false },
    Scenario { conns: 10_000, open: false },
    Scenario { conns: 1000, open: true },
];

fn default_servers() -> Vec<Server> {
    IOMUX_BACKENDS.iter().map(|&b| Server::Iomux(b)).chain(Peer::ALL.map(Server::Peer)).collect()
}

fn peer_names() -> String {
    Peer::ALL.map(Peer::name).join(", ")
}

/// `iomux-BACKEND` or a peer's name.
fn parse_server(s: &str) -> Result<Server, String> {
    if let Some(backend) = s.strip_prefix("iomux-") {
        return crate::parse_backend(backend).map(Server::Iomux);
    }
    s.parse::<Peer>().map(Server::Peer).map_err(|_| {
        format!("unknown server '{s}': iomux-BACKEND (e.g. iomux-epoll, iomux-uring) or one of {}", peer_names())
    })
}

/// `closed-N` or `open-N`.
fn parse_scenario(s: &str) -> Result<Scenario, String> {
    let bad = || format!("'{s}' is not a scenario: closed-N or open-N, N connections (e.g. closed-100, open-1000)");
    let (kind, n) = s.split_once('-').ok_or_else(bad)?;
    let conns: usize = n.parse().map_err(|_| bad())?;
    if conns == 0 {
        return Err(format!("{s}: a scenario needs at least one connection"));
    }
    match kind {
        "closed" => Ok(Scenario { conns, open: false }),
        "open" => Ok(Scenario { conns, open: true }),
        _ => Err(bad()),
    }
}

// The help texts are built from the lists and constants they describe,
// so that they cannot drift from them.
#[derive(clap::Args, Debug, Default)]
pub struct Args {
    #[arg(long, value_delimiter = ',', value_parser = parse_server, help = servers_help())]
    pub servers: Option<Vec<Server>>,
    #[arg(long, value_delimiter = ',', value_parser = parse_scenario, help = scenarios_help())]
    pub scenarios: Option<Vec<Scenario>>,
    #[arg(long, help = format!("Repetitions; each runs every cell once, servers in another order [default: {REPS}]"))]
    pub reps: Option<usize>,
    #[arg(long, help = seconds_help())]
    pub seconds: Option<f64>,
}

fn servers_help() -> String {
    let default: Vec<String> = default_servers().iter().map(Server::name).collect();
    format!("Servers, comma-separated: iomux-BACKEND, or a peer ({}) [default: {}]", peer_names(), default.join(","))
}

fn scenarios_help() -> String {
    let default: Vec<String> = DEFAULT_SCENARIOS.iter().map(Scenario::name).collect();
    format!(
        "Scenarios, comma-separated: closed-N (N connections, closed loop) or open-N (N connections, {} msgs/s \
         in all) [default: {}]",
        thousands(OPEN_RATE),
        default.join(",")
    )
}

fn seconds_help() -> String {
    format!("Seconds of load per cell, after connecting [default: {QUICK_SECONDS}; --full: {FULL_SECONDS}]")
}

/// Everything checked before the first cell runs.
struct Plan {
    servers: Vec<Server>,
    scenarios: Vec<Scenario>,
    reps: usize,
    seconds: f64,
    /// Seconds of the perf run of each cell.
    perf_seconds: f64,
}

fn plan(args: &Args, settings: &Settings) -> CliResult<Plan> {
    let servers = args.servers.clone().unwrap_or_else(default_servers);
    let scenarios = args.scenarios.clone().unwrap_or_else(|| DEFAULT_SCENARIOS.to_vec());
    for (list, what) in [
        (servers.iter().map(Server::name).collect::<Vec<_>>(), "--servers"),
        (scenarios.iter().map(Scenario::name).collect(), "--scenarios"),
    ] {
        if let Some(twice) = list.iter().enumerate().find(|(i, n)| list[..*i].contains(n)).map(|(_, n)| n) {
            return Err(format!("{what} names {twice} twice").into());
        }
        if list.is_empty() {
            return Err(format!("{what} is empty").into());
        }
    }
    let reps = args.reps.unwrap_or(REPS);
    if reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let seconds = args.seconds.unwrap_or(if settings.full { FULL_SECONDS } else { QUICK_SECONDS });
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
        return Err(format!("--seconds must be more than 0 and at most 3600, not {seconds}").into());
    }
    let most = scenarios.iter().map(|s| s.conns).max().unwrap_or(0);
    if servers.contains(&Server::Iomux(Backend::Select)) && most > 1000 {
        return Err(format!("iomux-select cannot hold {most} connections (FD_SETSIZE is 1024)").into());
    }
    super::cell::require_loopback("E5", most)?;
    let perf_seconds = if settings.full { seconds } else { seconds.min(QUICK_PERF_SECONDS) };
    Ok(Plan { servers, scenarios, reps, seconds, perf_seconds })
}

/// Checks what `args` ask for (flags, and the kernel's limits for the most
/// connections) without running anything: `iomux bench` does so before
/// its first experiment, so that a machine that cannot run E5 is told at
/// once rather than after the others.
pub fn check(args: &Args, settings: &Settings) -> CliResult<()> {
    plan(args, settings).map(|_| ())
}

/// The servers' order in pass `rep`: row `rep` of a Williams design. Row
/// r is 0, 1, n-1, 2, n-2, 3, ... each plus r (mod n); for an odd n the
/// next n rows are those reversed. So in the first `reps` passes each
/// server runs first at most ceil(reps / n) times, and over n passes (2n
/// for an odd n) each runs directly after every other equally often: no
/// server always runs first, or always follows the same one, into a warm
/// or a cold machine.
pub fn order(n: usize, rep: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let period = if n.is_multiple_of(2) { n } else { 2 * n };
    let r = rep % period;
    let base = (0..n).map(|j| if j % 2 == 1 { j.div_ceil(2) } else { (n - j / 2) % n });
    let mut row: Vec<usize> = base.map(|b| (b + r) % n).collect();
    if r >= n {
        row.reverse();
    }
    row
}

/// Median, min and max of the finite values (NaN when there are none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Stat {
        let v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Stat { median: f64::NAN, min: f64::NAN, max: f64::NAN };
        }
        Stat {
            median: median(&v),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Which side's CPU ran out, from each one's share of one CPU.
pub fn bottleneck(server_util: f64, load_util: f64) -> &'static str {
    match (server_util >= SATURATED, load_util >= SATURATED) {
        (true, true) => "both",
        (true, false) => "server",
        (false, true) => "load",
        (false, false) => "neither",
    }
}

/// One server in one scenario, over its repetitions.
pub struct Row {
    pub server: Server,
    pub scenario: Scenario,
    pub runs: Vec<Result<Run, String>>,
    /// The run under perf, when perf counted the syscalls.
    pub traced: Option<Result<Run, String>>,
}

impl Row {
    fn ok(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter_map(|r| r.as_ref().ok())
    }

    pub fn stat(&self, figure: impl Fn(&Run) -> f64) -> Stat {
        Stat::of(self.ok().map(figure))
    }

    pub fn cpu(&self) -> f64 {
        self.stat(|r| r.cpu_us_per_echo).median
    }

    /// From the perf run alone: none without it.
    fn syscalls(&self) -> (Stat, Option<&'static str>) {
        match &self.traced {
            Some(Ok(run)) => (Stat::of(run.syscalls_per_echo), run.syscalls_source),
            _ => (Stat::of(None), None),
        }
    }

    /// Open loop: why the row was not run at [`OPEN_RATE`], if it was not:
    /// in some repetition the echoes/s fell below [`SUSTAINED`] of it, or
    /// the load was saturated (then it, not the server, set the pace).
    pub fn rate_problem(&self) -> Option<String> {
        if !self.scenario.open {
            return None;
        }
        let mut why = Vec::new();
        for (i, run) in self.runs.iter().enumerate() {
            let Ok(run) = run else { continue };
            if run.echoes_per_sec.is_nan() || run.echoes_per_sec < SUSTAINED * OPEN_RATE {
                why.push(format!("rep {}: {:.1} echoes/s", i + 1, run.echoes_per_sec));
            }
            if run.load_util >= SATURATED {
                why.push(format!("rep {}: the load used {:.1}% of a CPU", i + 1, run.load_util * 100.0));
            }
        }
        (!why.is_empty()).then(|| format!("rate not sustained ({})", why.join("; ")))
    }

    fn bottleneck(&self) -> Option<&'static str> {
        let (s, l) = (self.stat(|r| r.server_util).median, self.stat(|r| r.load_util).median);
        (s.is_finite() && l.is_finite()).then(|| bottleneck(s, l))
    }

    /// The failures, if any: every run's, or how many failed and the first.
    pub fn error(&self) -> Option<String> {
        let failed: Vec<&String> = self.runs.iter().chain(&self.traced).filter_map(|r| r.as_ref().err()).collect();
        let first = failed.first()?;
        let all = self.runs.len() + usize::from(self.traced.is_some());
        Some(if failed.len() == all {
            (*first).clone()
        } else {
            format!("{} of {all} runs failed: {first}", failed.len())
        })
    }
}

pub fn run(args: &Args, settings: &Settings) -> CliResult<Outcome> {
    let tracer = settings.tracer;
    let plan = plan(args, settings)?;
    let perf = tracer == Some(Tracer::Perf);
    let scratch = crate::os::PrivateDir::new("iomux-lab-peers", "load results")
        .map_err(|e| format!("creating a folder for the load results: {e}"))?;
    let cells = plan.servers.len() * plan.scenarios.len();
    let progress = Progress::new(NAME, (cells * (plan.reps + usize::from(perf))) as u64);
    let mut rows: Vec<Row> = plan
        .scenarios
        .iter()
        .flat_map(|&scenario| {
            plan.servers.iter().map(move |&server| Row { server, scenario, runs: Vec::new(), traced: None })
        })
        .collect();
    // A server that cannot start is not tried again: its every cell
    // carries the reason.
    let mut cannot_start: Vec<(usize, String)> = Vec::new();
    // Once perf cannot attach to a server it is not tried again (each try
    // would wait for it to give up): where and why.
    let mut perf_dropped: Option<String> = None;
    let load = |s: &Scenario, count: Syscalls| Load {
        conns: s.conns,
        rate: s.open.then_some(OPEN_RATE),
        tick_us: if s.open { OPEN_TICK_US } else { crate::load::DEFAULT_TICK_US },
        seconds: if count == Syscalls::Perf { plan.perf_seconds } else { plan.seconds },
    };
    let passes: Vec<(String, Syscalls)> = (0..plan.reps)
        .map(|r| (format!("rep {}/{}", r + 1, plan.reps), Syscalls::Not))
        .chain(perf.then(|| ("syscalls (perf)".to_string(), Syscalls::Perf)))
        .collect();
    for (pass, (label, count)) in passes.iter().enumerate() {
        for (si, scenario) in plan.scenarios.iter().enumerate() {
            for server_index in order(plan.servers.len(), pass) {
                let server = &plan.servers[server_index];
                let row = &mut rows[si * plan.servers.len() + server_index];
                progress.step(&format!("{label}: {} {}", scenario.name(), server.name()));
                if *count == Syscalls::Perf && perf_dropped.is_some() {
                    progress.inc(1);
                    continue;
                }
                let tag = format!("{}-pass{pass}", scenario.name());
                // None: perf could not attach, which is no failure of the server's.
                let result = match cannot_start.iter().find(|(i, _)| *i == server_index) {
                    Some((_, why)) => Some(Err(why.clone())),
                    None => match peer_cell::run(server, load(scenario, *count), *count, &scratch.0, &tag) {
                        Ok(run) => Some(Ok(run)),
                        Err(Failure::NoPerf(why)) => {
                            progress.println(&format!(
                                "{NAME}: perf stat could not attach to {} ({why}); no syscall counts from here on",
                                server.name()
                            ));
                            perf_dropped = Some(format!("{} in {}: {why}", server.name(), scenario.name()));
                            None
                        }
                        Err(f) => {
                            if let Failure::NoServer(why) = &f {
                                cannot_start.push((server_index, why.clone()));
                            }
                            progress.println(&format!("{NAME}: {} {}: {f}", scenario.name(), server.name()));
                            Some(Err(f.to_string()))
                        }
                    },
                };
                match (count, result) {
                    (Syscalls::Perf, traced) => row.traced = traced,
                    (Syscalls::Not, Some(result)) => row.runs.push(result),
                    // perf is attached in the perf pass alone.
                    (Syscalls::Not, None) => {}
                }
                progress.inc(1);
            }
        }
    }
    progress.finish();
    let (checks, noise) = settings.judge(checks(&rows, &plan.scenarios));
    let syscalls = SyscallsBy { perf, dropped: perf_dropped.as_deref() };
    let md = markdown(&rows, &plan, settings, syscalls, &checks, noise.as_ref());
    println!("{md}");
    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": {
            "servers": plan.servers.iter().map(Server::name).collect::<Vec<_>>(),
            "scenarios": plan.scenarios.iter().map(Scenario::name).collect::<Vec<_>>(),
            "reps": plan.reps, "seconds": plan.seconds, "perf_seconds": perf.then_some(plan.perf_seconds), "open_rate": OPEN_RATE, "msg_size": 100,
            "load_backend": super::cell::LOAD_BACKEND.name(), "load_threads": 1,
            "saturated_at": SATURATED, "sustained_at": SUSTAINED,
            "syscalls_by": perf.then_some(peer_cell::PERF_SOURCE), "perf_dropped": perf_dropped,
            "pinned": pinning().map(|(server, load)| json!({ "server_cpu": server, "load_cpu": load })),
            "warmup_s": 0.0,
        },
        "rows": rows.iter().map(row_json).collect::<Vec<_>>(),
        "noise": noise,
        "checks": checks,
    });
    let svg = svg(&rows, &plan)?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files })
}

/// The best (lowest) median CPU per echo among `rows` of one scenario
/// that `pick` keeps, with the server's name.
fn best_cpu<'a>(rows: impl Iterator<Item = &'a Row>, pick: impl Fn(&Server) -> bool) -> Option<(f64, String)> {
    rows.filter(|r| pick(&r.server))
        .map(|r| (r.cpu(), r.server.name()))
        .filter(|(c, _)| c.is_finite())
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

fn in_scenario<'a>(rows: &'a [Row], s: &'a Scenario) -> impl Iterator<Item = &'a Row> + Clone {
    rows.iter().filter(move |r| r.scenario == *s)
}

fn find<'a>(rows: &'a [Row], s: &Scenario, server: &Server) -> Option<&'a Row> {
    rows.iter().find(|r| r.scenario == *s && r.server == *server)
}

/// `check`, or, if any of the open-loop `rows` it draws on was not run
/// at the rate, the same claim not measured, saying which and why: its
/// figures would be of another load than the one claimed.
fn unless_unsustained<'a>(check: Check, rows: impl IntoIterator<Item = &'a Row>) -> Check {
    let short: Vec<String> = rows.into_iter().filter(|r| r.rate_problem().is_some()).map(|r| r.server.name()).collect();
    if short.is_empty() {
        return check;
    }
    Check {
        detail: format!(
            "not measured: rate not sustained for {} (echoes/s under {:.0}% of {} or the load saturated)",
            short.join(", "),
            SUSTAINED * 100.0,
            thousands(OPEN_RATE)
        ),
        ..Check::not_measured(&check.claim, check.threshold)
    }
}

/// The done-when points, from this run's medians.
pub fn checks(rows: &[Row], scenarios: &[Scenario]) -> Vec<Check> {
    let mut checks = Vec::new();
    let us = |x: f64| format!("{x:.3} us");
    for s in scenarios {
        let claim = format!("E5 {}: iomux best CPU/echo / best peer's", s.name());
        let rs = in_scenario(rows, s);
        let check = match (best_cpu(rs.clone(), Server::is_iomux), best_cpu(rs.clone(), |v| !v.is_iomux())) {
            (Some((i, iname)), Some((p, pname))) => {
                Check::at_most(&claim, i / p, 1.0, format!("{iname} {} vs {pname} {}", us(i), us(p)))
            }
            _ => Check::not_measured(&claim, 1.0),
        };
        // Best of all: every row of the scenario is a candidate.
        checks.push(unless_unsustained(check, rs));
    }
    let closed_100 = Scenario { conns: 100, open: false };
    let claim = "E5 closed-100: iomux best echoes/s / tokio's";
    let best_rate = in_scenario(rows, &closed_100)
        .filter(|r| r.server.is_iomux())
        .map(|r| (r.stat(|x| x.echoes_per_sec).median, r.server.name()))
        .filter(|(v, _)| v.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let tokio = find(rows, &closed_100, &Server::Peer(Peer::Tokio)).map(|r| r.stat(|x| x.echoes_per_sec).median);
    checks.push(match (best_rate, tokio.filter(|t| t.is_finite())) {
        (Some((i, name)), Some(t)) => {
            Check::new(claim, i / t, 1.1, format!("{name} {} vs tokio {} echoes/s", thousands(i), thousands(t)))
        }
        _ => Check::not_measured(claim, 1.1),
    });
    let epoll = Server::Iomux(Backend::Epoll);
    for s in scenarios {
        let claim = format!("E5 {}: iomux-epoll CPU/echo / c-epoll's", s.name());
        let (mine, c) = (find(rows, s, &epoll), find(rows, s, &Server::Peer(Peer::CEpoll)));
        let check = match (mine.map(Row::cpu).filter(|c| c.is_finite()), c.map(Row::cpu).filter(|c| c.is_finite())) {
            (Some(m), Some(c)) => Check::at_most(&claim, m / c, 1.0, format!("{} vs {}", us(m), us(c))),
            _ => Check::not_measured(&claim, 1.0),
        };
        checks.push(unless_unsustained(check, mine.into_iter().chain(c)));
    }
    for s in [closed_100, Scenario { conns: 1000, open: true }] {
        let claim = format!("E5 {}: load CPU/echo / iomux-epoll server's", s.name());
        let row = find(rows, &s, &epoll);
        let load = row.map(|r| r.stat(|x| x.load_cpu_us_per_echo).median).filter(|c| c.is_finite());
        let server = row.map(Row::cpu).filter(|c| c.is_finite());
        let check = match (load, server) {
            (Some(l), Some(sv)) => Check::at_most(&claim, l / sv, 0.8, format!("load {} vs server {}", us(l), us(sv))),
            _ => Check::not_measured(&claim, 0.8),
        };
        checks.push(unless_unsustained(check, row));
    }
    checks
}

/// `median (min–max)`, with `f` formatting each.
pub fn spread(s: Stat, f: impl Fn(f64) -> String) -> String {
    if !s.median.is_finite() {
        return "-".into();
    }
    if s.min == s.max {
        return f(s.median);
    }
    format!("{} ({}–{})", f(s.median), f(s.min), f(s.max))
}

/// How the run counted syscalls: with perf or not, and where perf was
/// dropped if it could not attach.
#[derive(Clone, Copy)]
struct SyscallsBy<'a> {
    perf: bool,
    dropped: Option<&'a str>,
}

/// The server's CPU and the load's, when the machine has two to pin to.
fn pinning() -> Option<(usize, usize)> {
    match super::cell::cpus() {
        (Some(server), Some(load)) => Some((server, load)),
        _ => None,
    }
}

fn markdown(
    rows: &[Row],
    plan: &Plan,
    settings: &Settings,
    syscalls: SyscallsBy,
    checks: &[Check],
    noise: Option<&super::noise::Noise>,
) -> String {
    let placement = match pinning() {
        Some((server, load)) => format!(
            "Every server runs on one thread pinned to CPU {server} (`iomux serve --backend B --cpu {server}`, \
             `iomux peer --server NAME --cpu {server}`), the load (`iomux load`, backend {}, one thread) on CPU \
             {load}, and so do the lab's sampling thread and perf during a cell.",
            super::cell::LOAD_BACKEND
        ),
        None => format!(
            "This machine has one CPU, so nothing is pinned: every server runs on one thread, and it shares \
             the CPU with the load (`iomux load`, backend {}, one thread) and the lab's sampling.",
            super::cell::LOAD_BACKEND
        ),
    };
    let syscalls_note = if syscalls.perf {
        let mut note = format!(
            "`perf stat -e raw_syscalls:sys_enter -p PID` over the window, in one more run of each cell ({} s of \
             load; perf slows every syscall, so that run's times are not used)",
            plan.perf_seconds
        );
        if let Some(why) = syscalls.dropped {
            note += &format!(
                "; perf could not attach to {why}, and was not tried again, so the cells from there on have none"
            );
        }
        note
    } else {
        "not measured, so the column is empty for every server: perf is not available here, and no count \
         of the servers' own is comparable (iomux's covers its whole run, connecting and closing included, \
         and would read high against a window's echoes; the peers keep none)"
            .to_string()
    };
    let mut md = format!(
        "## E5 peers: iomux beside other runtimes' echo servers, one thread on one CPU\n\n\
         Machine: {}. {placement} 100-byte messages. Every server's listening socket has TCP_NODELAY, which \
         the connections it accepts inherit (`iomux serve` and `iomux peer` both set it). Each cell starts a \
         fresh server; the load connects (not measured), then sends for {} s with no warm-up. The window runs \
         from the load's start of measuring to the answer to its last message (a closed loop's last round is \
         answered after it stops sending): echoes/s and both sides' CPU are taken over it. Without a warm-up, \
         a connection's first-round costs (the first read faulting in its buffer) fall in the window; the \
         load's `--warmup` would not remove them cleanly, as it counts in the window the echoes of messages \
         sent during the warm-up (one per connection in a closed loop), part of whose server work precedes \
         it. CPU is user + system time of the whole process, read from outside the same way for every server \
         (its CPU clock, every 2 ms). Read from another process that clock can lag by up to one scheduler \
         tick (1/CONFIG_HZ: 1 to 10 ms, by the kernel's configuration) of a thread running at that moment, so \
         a server's CPU over a window is off by at most one tick at each edge. The load's CPU is its own \
         report (its JSON's `cpu_s`: its process's user + system time from its start of measuring to its \
         last answer, the same window), sampled like the server's only where the report lacks it. Medians of \
         {} repetitions, (min–max) where they differ; each repetition runs the servers in another order (rows \
         of a Williams design: none always first, none always after the same one). Syscalls per echo: {}. RSS: \
         the server's VmRSS at the end of the window. Bottleneck: the side(s) using at least {:.0}% of one CPU \
         over the window. Open loop: the load sends on a {} us grid (`--tick-us`: the messages due within one \
         tick go out together, latency counted from their due time); a row is marked \"rate not sustained\" when, in some repetition, its \
         echoes/s fell below {:.0}% of {} or the load was saturated (the load, not the server, then set the \
         pace); the E5 checks that draw on it are then not measured. The last column is iomux's best CPU per \
         echo in the scenario over this server's (below 1: iomux spends less).\n\n",
        settings.machine.summary(),
        plan.seconds,
        plan.reps,
        syscalls_note,
        SATURATED * 100.0,
        OPEN_TICK_US,
        SUSTAINED * 100.0,
        thousands(OPEN_RATE),
    );
    for s in &plan.scenarios {
        md += &format!("**{}**: {}\n\n", s.name(), s.describe());
        let best = best_cpu(in_scenario(rows, s), Server::is_iomux);
        let mut t = Table::new([
            "server",
            "echoes/s",
            "server CPU us/echo",
            "load CPU us/echo",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "syscalls/echo",
            "RSS KiB",
            "bottleneck",
            "iomux best / this, CPU",
        ]);
        let mut errors = Vec::new();
        for r in in_scenario(rows, s) {
            if let Some(e) = r.error() {
                errors.push(format!("Not measured: {}: {e}", r.server.name()));
            }
            let short = r.rate_problem();
            if let Some(why) = &short {
                errors.push(format!("{}: {why}", r.server.name()));
            }
            let cpu = r.stat(|x| x.cpu_us_per_echo);
            let latency = |f: fn(&Run) -> f64| spread(r.stat(f), |v| format!("{v:.0}"));
            let mut rate = spread(r.stat(|x| x.echoes_per_sec), thousands);
            if short.is_some() {
                rate += ", rate not sustained";
            }
            t.row([
                r.server.name(),
                rate,
                spread(cpu, |v| format!("{v:.3}")),
                spread(r.stat(|x| x.load_cpu_us_per_echo), |v| format!("{v:.3}")),
                latency(|x| x.p50_us),
                latency(|x| x.p99_us),
                latency(|x| x.p999_us),
                spread(r.syscalls().0, |v| format!("{v:.3}")),
                spread(r.stat(|x| x.rss_bytes.unwrap_or(f64::NAN)), |v| thousands(v / 1024.0)),
                r.bottleneck().unwrap_or("-").into(),
                match best {
                    Some((b, _)) if cpu.median.is_finite() => format!("{:.3}", b / cpu.median),
                    _ => "-".into(),
                },
            ]);
        }
        md += &t.render();
        for e in errors {
            md += &format!("\n{e}  ");
        }
        md += "\n\n";
    }
    md += &super::render_checks(checks, noise);
    md
}

/// A figure's median, min and max as `name`, `name_min`, `name_max`.
fn put(map: &mut Map<String, Value>, name: &str, s: Stat) {
    map.insert(name.into(), json!(s.median));
    map.insert(format!("{name}_min"), json!(s.min));
    map.insert(format!("{name}_max"), json!(s.max));
}

fn row_json(r: &Row) -> Value {
    let mut m = Map::new();
    m.insert("server".into(), json!(r.server.name()));
    m.insert("scenario".into(), json!(r.scenario.name()));
    m.insert("conns".into(), json!(r.scenario.conns));
    m.insert("rate".into(), json!(r.scenario.open.then_some(OPEN_RATE)));
    put(&mut m, "echoes_per_sec", r.stat(|x| x.echoes_per_sec));
    put(&mut m, "cpu_us_per_echo", r.stat(|x| x.cpu_us_per_echo));
    put(&mut m, "load_cpu_us_per_echo", r.stat(|x| x.load_cpu_us_per_echo));
    put(&mut m, "p50_us", r.stat(|x| x.p50_us));
    put(&mut m, "p99_us", r.stat(|x| x.p99_us));
    put(&mut m, "p999_us", r.stat(|x| x.p999_us));
    let (syscalls, source) = r.syscalls();
    put(&mut m, "syscalls_per_echo", syscalls);
    m.insert("syscalls_source".into(), json!(source));
    put(&mut m, "rss_bytes", r.stat(|x| x.rss_bytes.unwrap_or(f64::NAN)));
    put(&mut m, "server_cpu_util", r.stat(|x| x.server_util));
    put(&mut m, "load_cpu_util", r.stat(|x| x.load_util));
    m.insert("bottleneck".into(), json!(r.bottleneck()));
    let short = r.rate_problem();
    m.insert("rate_sustained".into(), json!(r.scenario.open.then_some(short.is_none())));
    m.insert("rate_problem".into(), json!(short));
    m.insert("error".into(), json!(r.error()));
    let run = |x: &Result<Run, String>| match x {
        Ok(run) => serde_json::to_value(run).unwrap_or(Value::Null),
        Err(e) => json!({ "error": e }),
    };
    m.insert("runs".into(), Value::Array(r.runs.iter().map(run).collect()));
    m.insert("syscalls_run".into(), r.traced.as_ref().map_or(Value::Null, run));
    Value::Object(m)
}

fn svg(rows: &[Row], plan: &Plan) -> CliResult<String> {
    let groups: Vec<String> = plan.scenarios.iter().map(Scenario::name).collect();
    let series: Vec<plot::BarSeries> = plan
        .servers
        .iter()
        .map(|server| plot::BarSeries {
            name: server.name(),
            values: plan
                .scenarios
                .iter()
                .map(|s| {
                    let st = find(rows, s, server).map_or(Stat::of(None), |r| r.stat(|x| x.cpu_us_per_echo));
                    (st.median, st.min, st.max)
                })
                .collect(),
        })
        .collect();
    plot::grouped_bars(
        "E5: server CPU per echo (median of the repetitions, whiskers min to max)",
        &format!(
            "scenario: closed-N = N connections, closed loop; open-N = N connections at {} msgs/s",
            thousands(OPEN_RATE)
        ),
        "server CPU per echo (µs, user + system)",
        &groups,
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_server("iomux-epoll-et"), Ok(Server::Iomux(Backend::EpollEt)));
        assert_eq!(parse_server("monoio-legacy"), Ok(Server::Peer(Peer::MonoioLegacy)));
        assert!(parse_server("iomux-kqueue").is_err());
        assert!(parse_server("nginx").unwrap_err().contains("c-epoll"));
        assert_eq!(parse_scenario("closed-10000"), Ok(Scenario { conns: 10_000, open: false }));
        assert_eq!(parse_scenario("open-1000").map(|s| s.name()), Ok("open-1000".to_string()));
        for bad in ["closed", "open-0", "half-10", "closed-x"] {
            assert!(parse_scenario(bad).is_err(), "{bad}");
        }
        assert_eq!(default_servers().len(), 8);
        for p in Peer::ALL {
            assert_eq!(parse_server(p.name()), Ok(Server::Peer(p)));
        }
    }

    #[test]
    fn help_gives_the_defaults_in_force() {
        assert!(seconds_help().contains(&format!("[default: {QUICK_SECONDS}; --full: {FULL_SECONDS}]")));
        assert!(seconds_help().contains("1.25"), "{}", seconds_help());
        assert!(servers_help().contains("iomux-epoll,iomux-epoll-et,iomux-uring,tokio,"), "{}", servers_help());
        assert!(scenarios_help().contains("closed-100,closed-1000,closed-10000,open-1000"), "{}", scenarios_help());
    }

    /// How often server `b` runs directly after server `a`, over `passes`.
    fn follows(n: usize, passes: usize) -> Vec<Vec<usize>> {
        let mut after = vec![vec![0; n]; n];
        for p in 0..passes {
            for pair in order(n, p).windows(2) {
                after[pair[0]][pair[1]] += 1;
            }
        }
        after
    }

    #[test]
    fn each_pass_runs_every_server_once_in_a_balanced_order() {
        for n in 1..=9 {
            for reps in 1..=3 * n {
                let mut first = vec![0; n];
                for r in 0..reps {
                    let o = order(n, r);
                    let mut sorted = o.clone();
                    sorted.sort();
                    assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n {n}, pass {r}: {o:?}");
                    first[o[0]] += 1;
                }
                let most = first.iter().max().copied().unwrap_or(0);
                assert!(most <= reps.div_ceil(n), "n {n}, {reps} passes: first {first:?}");
            }
            // Carry-over balance: over a whole design each server runs
            // directly after every other equally often.
            let (period, times) = if n % 2 == 0 { (n, 1) } else { (2 * n, 2) };
            let after = follows(n, period);
            for a in 0..n {
                for b in 0..n {
                    assert_eq!(after[a][b], if a == b { 0 } else { times }, "n {n}: {b} after {a}: {after:?}");
                }
            }
        }
        // The default: 8 servers, 3 repetitions and the perf pass. No
        // server follows the same one twice, or is first twice.
        assert!(follows(8, 4).iter().flatten().all(|&k| k <= 1));
        assert_eq!(order(8, 0), vec![0, 1, 7, 2, 6, 3, 5, 4]);
        assert_eq!(order(1, 5), vec![0]);
        assert!(order(0, 0).is_empty());
    }

    #[test]
    fn stats_are_median_min_and_max_of_what_was_measured() {
        let s = Stat::of([3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!(s, Stat { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(Stat::of([4.0, 1.0]).median, 2.5);
        assert!(Stat::of([]).median.is_nan());
    }

    #[test]
    fn bottleneck_is_the_side_at_ninety_percent() {
        assert_eq!(bottleneck(0.95, 0.5), "server");
        assert_eq!(bottleneck(0.5, 0.9), "load");
        assert_eq!(bottleneck(0.99, 0.97), "both");
        assert_eq!(bottleneck(0.89, 0.2), "neither");
    }

    fn run(cpu: f64, load_cpu: f64, rate: f64) -> Result<Run, String> {
        Ok(Run {
            cpu_us_per_echo: cpu,
            load_cpu_us_per_echo: load_cpu,
            echoes_per_sec: rate,
            server_util: 1.0,
            load_util: 0.5,
            ..Run::default()
        })
    }

    fn row(server: Server, scenario: Scenario, runs: Vec<Result<Run, String>>) -> Row {
        Row { server, scenario, runs, traced: None }
    }

    #[test]
    fn checks_come_from_the_medians() {
        let c100 = Scenario { conns: 100, open: false };
        let o1000 = Scenario { conns: 1000, open: true };
        let rows = vec![
            row(
                Server::Iomux(Backend::Epoll),
                c100,
                vec![run(3.0, 2.0, 110.0), run(4.0, 2.0, 130.0), run(9.0, 2.0, 120.0)],
            ),
            row(Server::Iomux(Backend::Uring), c100, vec![run(2.0, 1.0, 100.0), Err("failed".into())]),
            row(Server::Peer(Peer::Tokio), c100, vec![run(5.0, 2.0, 100.0)]),
            row(Server::Peer(Peer::CEpoll), c100, vec![run(4.0, 2.0, 100.0)]),
            row(Server::Iomux(Backend::Epoll), o1000, vec![Err("no start".into())]),
            row(Server::Peer(Peer::CEpoll), o1000, vec![run(4.0, 2.0, OPEN_RATE)]),
        ];
        let checks = checks(&rows, &[c100, o1000]);
        let get = |claim: &str| checks.iter().find(|c| c.claim == claim).unwrap();
        // iomux's best in closed-100 is uring (2.0), the best peer c-epoll (4.0).
        assert_eq!(get("E5 closed-100: iomux best CPU/echo / best peer's").value, Some(0.5));
        // Median echoes/s of iomux-epoll: 120 against tokio's 100.
        let rate = get("E5 closed-100: iomux best echoes/s / tokio's");
        assert_eq!(rate.value, Some(1.2));
        assert_eq!(rate.met, Some(true));
        assert_eq!(get("E5 closed-100: iomux-epoll CPU/echo / c-epoll's").value, Some(1.0));
        assert_eq!(get("E5 closed-100: load CPU/echo / iomux-epoll server's").value, Some(0.5));
        assert_eq!(get("E5 open-1000: iomux best CPU/echo / best peer's").met, None);
        assert_eq!(get("E5 open-1000: load CPU/echo / iomux-epoll server's").met, None);
        assert_eq!(rows[1].error().unwrap(), "1 of 2 runs failed: failed");
        assert_eq!(rows[4].error().unwrap(), "no start");
        assert_eq!(rows[0].bottleneck(), Some("server"));
        // Closed loops have no rate to sustain; c-epoll kept the open one's.
        assert!(rows.iter().all(|r| r.rate_problem().is_none()));
    }

    #[test]
    fn an_open_loop_short_of_its_rate_is_not_measured() {
        let o1000 = Scenario { conns: 1000, open: true };
        let at = |rate: f64, load_util: f64| Ok(Run { load_util, ..run(2.0, 1.0, rate).unwrap() });
        let fine = row(Server::Iomux(Backend::Epoll), o1000, vec![at(OPEN_RATE, 0.5), at(0.995 * OPEN_RATE, 0.5)]);
        assert_eq!(fine.rate_problem(), None);
        let slow = row(Server::Peer(Peer::CEpoll), o1000, vec![at(OPEN_RATE, 0.5), at(98_000.0, 0.5)]);
        assert_eq!(slow.rate_problem().unwrap(), "rate not sustained (rep 2: 98000.0 echoes/s)");
        let loaded = row(Server::Peer(Peer::Tokio), o1000, vec![at(OPEN_RATE, 0.95)]);
        assert!(loaded.rate_problem().unwrap().contains("the load used 95.0% of a CPU"));
        let checks = checks(&[fine, slow, loaded], &[o1000]);
        let get = |claim: &str| checks.iter().find(|c| c.claim == claim).unwrap();
        for claim in
            ["E5 open-1000: iomux best CPU/echo / best peer's", "E5 open-1000: iomux-epoll CPU/echo / c-epoll's"]
        {
            let c = get(claim);
            assert_eq!((c.value, c.met), (None, None), "{c:?}");
            assert!(c.detail.contains("rate not sustained for c-epoll"), "{c:?}");
        }
        // iomux-epoll itself kept the rate: its load's share stands.
        assert_eq!(get("E5 open-1000: load CPU/echo / iomux-epoll server's").value, Some(0.5));
    }
}
