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
use serde_json::{json, Map, Value};

pub const NAME: &str = "peers";

/// The servers `iomux peer --server` runs.
pub const PEERS: [&str; 5] = ["tokio", "monoio-uring", "monoio-legacy", "compio", "c-epoll"];

/// iomux's servers by default: level- and edge-triggered epoll, io_uring.
const IOMUX_BACKENDS: [Backend; 3] = [Backend::Epoll, Backend::EpollEt, Backend::Uring];

/// Open loop: messages per second in all, a rate every server sustains.
pub const OPEN_RATE: f64 = 100_000.0;

/// A side using at least this share of one CPU over the window is
/// saturated: it, not the other, sets the pace.
pub const SATURATED: f64 = 0.90;

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
    IOMUX_BACKENDS.iter().map(|&b| Server::Iomux(b)).chain(PEERS.iter().map(|&p| Server::Peer(p))).collect()
}

/// `iomux-BACKEND` or a peer's name.
fn parse_server(s: &str) -> Result<Server, String> {
    if let Some(backend) = s.strip_prefix("iomux-") {
        return crate::parse_backend(backend).map(Server::Iomux);
    }
    PEERS.iter().find(|&&p| p == s).map(|&p| Server::Peer(p)).ok_or_else(|| {
        format!("unknown server '{s}': iomux-BACKEND (e.g. iomux-epoll, iomux-uring) or one of {}", PEERS.join(", "))
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

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Servers, comma-separated: iomux-BACKEND, or a peer (tokio,
    /// monoio-uring, monoio-legacy, compio, c-epoll) [default: iomux-epoll,
    /// iomux-epoll-et, iomux-uring and the five peers]
    #[arg(long, value_delimiter = ',', value_parser = parse_server)]
    pub servers: Option<Vec<Server>>,
    /// Scenarios, comma-separated: closed-N (N connections, closed loop)
    /// or open-N (N connections, 100,000 msgs/s in all) [default:
    /// closed-100, closed-1000, closed-10000, open-1000]
    #[arg(long, value_delimiter = ',', value_parser = parse_scenario)]
    pub scenarios: Option<Vec<Scenario>>,
    /// Repetitions; each runs every cell once, servers in rotated order [default: 3]
    #[arg(long)]
    pub reps: Option<usize>,
    /// Seconds of load per cell, after connecting [default: 1.5; --full: 5]
    #[arg(long)]
    pub seconds: Option<f64>,
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

/// The servers' order in repetition `rep`: rotated by one each time, so
/// that each runs first once in `n` repetitions and no server always
/// follows the same one into a warm or a cold machine.
pub fn rotation(n: usize, rep: usize) -> Vec<usize> {
    (0..n).map(|i| (i + rep) % n.max(1)).collect()
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

    fn syscalls(&self) -> (Stat, Option<&'static str>) {
        match &self.traced {
            Some(Ok(run)) => (Stat::of(run.syscalls_per_echo), run.syscalls_source),
            Some(Err(_)) => (Stat::of(None), None),
            None => (self.stat(|r| r.syscalls_per_echo.unwrap_or(f64::NAN)), self.ok().find_map(|r| r.syscalls_source)),
        }
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

pub fn run(args: &Args, settings: &Settings, tracer: Option<Tracer>) -> CliResult<Outcome> {
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
            plan.servers.iter().map(move |server| Row {
                server: server.clone(),
                scenario,
                runs: Vec::new(),
                traced: None,
            })
        })
        .collect();
    // A server that cannot start (a peer missing from this build) is
    // not tried again: its every cell carries the reason.
    let mut cannot_start: Vec<(usize, String)> = Vec::new();
    let load = |s: &Scenario, count: Syscalls| Load {
        conns: s.conns,
        rate: s.open.then_some(OPEN_RATE),
        seconds: if count == Syscalls::Perf { plan.perf_seconds } else { plan.seconds },
    };
    // Without perf, iomux's own count stands in (peers keep none).
    let timed = if perf { Syscalls::Not } else { Syscalls::OwnCount };
    let passes: Vec<(String, Syscalls)> = (0..plan.reps)
        .map(|r| (format!("rep {}/{}", r + 1, plan.reps), timed))
        .chain(perf.then(|| ("syscalls (perf)".to_string(), Syscalls::Perf)))
        .collect();
    for (pass, (label, count)) in passes.iter().enumerate() {
        for (si, scenario) in plan.scenarios.iter().enumerate() {
            for server_index in rotation(plan.servers.len(), pass) {
                let server = &plan.servers[server_index];
                let row = &mut rows[si * plan.servers.len() + server_index];
                progress.step(&format!("{label}: {} {}", scenario.name(), server.name()));
                let result = match cannot_start.iter().find(|(i, _)| *i == server_index) {
                    Some((_, why)) => Err(why.clone()),
                    None => peer_cell::run(server, load(scenario, *count), *count, &scratch.0).map_err(|f| {
                        if let Failure::NoServer(why) = &f {
                            cannot_start.push((server_index, why.clone()));
                        }
                        progress.println(&format!("{NAME}: {} {}: {f}", scenario.name(), server.name()));
                        f.to_string()
                    }),
                };
                match count {
                    Syscalls::Perf => row.traced = Some(result),
                    _ => row.runs.push(result),
                }
                progress.inc(1);
            }
        }
    }
    progress.finish();
    let checks = checks(&rows, &plan.scenarios);
    let md = markdown(&rows, &plan, settings, perf, &checks);
    println!("{md}");
    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": {
            "servers": plan.servers.iter().map(Server::name).collect::<Vec<_>>(),
            "scenarios": plan.scenarios.iter().map(Scenario::name).collect::<Vec<_>>(),
            "reps": plan.reps, "seconds": plan.seconds, "perf_seconds": perf.then_some(plan.perf_seconds), "open_rate": OPEN_RATE, "msg_size": 100,
            "load_backend": super::cell::LOAD_BACKEND.name(), "load_threads": 1,
            "saturated_at": SATURATED, "syscalls_by": if perf { peer_cell::PERF_SOURCE } else { peer_cell::OWN_SOURCE },
        },
        "rows": rows.iter().map(row_json).collect::<Vec<_>>(),
        "checks": checks,
    });
    let svg = svg(&rows, &plan)?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files, checks })
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

/// The done-when points, from this run's medians.
pub fn checks(rows: &[Row], scenarios: &[Scenario]) -> Vec<Check> {
    let mut checks = Vec::new();
    let us = |x: f64| format!("{x:.3} us");
    for s in scenarios {
        let claim = format!("E5 {}: iomux best CPU/echo / best peer's", s.name());
        let rs = in_scenario(rows, s);
        checks.push(match (best_cpu(rs.clone(), Server::is_iomux), best_cpu(rs, |v| !v.is_iomux())) {
            (Some((i, iname)), Some((p, pname))) => {
                Check::at_most(&claim, i / p, 1.0, format!("{iname} {} vs {pname} {}", us(i), us(p)))
            }
            _ => Check::not_measured(&claim, 1.0),
        });
    }
    let closed_100 = Scenario { conns: 100, open: false };
    let claim = "E5 closed-100: iomux best echoes/s / tokio's";
    let best_rate = in_scenario(rows, &closed_100)
        .filter(|r| r.server.is_iomux())
        .map(|r| (r.stat(|x| x.echoes_per_sec).median, r.server.name()))
        .filter(|(v, _)| v.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let tokio = find(rows, &closed_100, &Server::Peer("tokio")).map(|r| r.stat(|x| x.echoes_per_sec).median);
    checks.push(match (best_rate, tokio.filter(|t| t.is_finite())) {
        (Some((i, name)), Some(t)) => {
            Check::new(claim, i / t, 1.1, format!("{name} {} vs tokio {} echoes/s", thousands(i), thousands(t)))
        }
        _ => Check::not_measured(claim, 1.1),
    });
    let epoll = Server::Iomux(Backend::Epoll);
    for s in scenarios {
        let claim = format!("E5 {}: iomux-epoll CPU/echo / c-epoll's", s.name());
        let mine = find(rows, s, &epoll).map(Row::cpu).filter(|c| c.is_finite());
        let c = find(rows, s, &Server::Peer("c-epoll")).map(Row::cpu).filter(|c| c.is_finite());
        checks.push(match (mine, c) {
            (Some(m), Some(c)) => Check::at_most(&claim, m / c, 1.0, format!("{} vs {}", us(m), us(c))),
            _ => Check::not_measured(&claim, 1.0),
        });
    }
    for s in [closed_100, Scenario { conns: 1000, open: true }] {
        let claim = format!("E5 {}: load CPU/echo / iomux-epoll server's", s.name());
        let row = find(rows, &s, &epoll);
        let load = row.map(|r| r.stat(|x| x.load_cpu_us_per_echo).median).filter(|c| c.is_finite());
        let server = row.map(Row::cpu).filter(|c| c.is_finite());
        checks.push(match (load, server) {
            (Some(l), Some(sv)) => Check::at_most(&claim, l / sv, 0.8, format!("load {} vs server {}", us(l), us(sv))),
            _ => Check::not_measured(&claim, 0.8),
        });
    }
    checks
}

/// `median (min–max)`, with `f` formatting each.
fn spread(s: Stat, f: impl Fn(f64) -> String) -> String {
    if !s.median.is_finite() {
        return "-".into();
    }
    if s.min == s.max {
        return f(s.median);
    }
    format!("{} ({}–{})", f(s.median), f(s.min), f(s.max))
}

fn markdown(rows: &[Row], plan: &Plan, settings: &Settings, perf: bool, checks: &[Check]) -> String {
    let perf_note = format!(
        "`perf stat -e raw_syscalls:sys_enter -p PID` over the window, in one more run of each cell ({} s of \
         load; perf slows every syscall, so that run's times are not used)",
        plan.perf_seconds
    );
    let mut md = format!(
        "## E5 peers: iomux beside other runtimes' echo servers, one thread on one CPU\n\n\
         Machine: {}. Every server runs on one thread pinned to CPU 0 (`iomux serve --backend B --cpu 0`, \
         `iomux peer --server NAME --cpu 0`), the load (`iomux load`, backend {}, one thread) on CPU 1; 100-byte \
         messages. Each cell starts a fresh server; the load connects (not measured), then sends for {} s. The \
         window runs from the load's start of measuring to the answer to its last message (a closed loop's last \
         round is answered after it stops sending): echoes/s and both sides' CPU are taken over it. CPU is \
         user + system time of the whole process, read from outside the same way for every server (its CPU \
         clock, every 2 ms); {}. Medians of {} repetitions, servers in rotated order each time, (min–max) \
         where they differ. Syscalls per echo: {}. RSS: the server's VmRSS at the end of the window. \
         Bottleneck: the side(s) using at least {:.0}% of one CPU over the window. The last column is iomux's \
         best CPU per echo in the scenario over this server's (below 1: iomux spends less).\n\n",
        settings.machine.summary(),
        super::cell::LOAD_BACKEND,
        plan.seconds,
        "the load's CPU is its own report where it makes one, else sampled like the server's",
        plan.reps,
        if perf {
            &perf_note
        } else {
            "perf is not available here, so only iomux's own count (its data-path calls over the server's whole \
             run, divided by the echoes); none for the peers"
        },
        SATURATED * 100.0,
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
                errors.push(format!("{}: {e}", r.server.name()));
            }
            let cpu = r.stat(|x| x.cpu_us_per_echo);
            let latency = |f: fn(&Run) -> f64| spread(r.stat(f), |v| format!("{v:.0}"));
            t.row([
                r.server.name(),
                spread(r.stat(|x| x.echoes_per_sec), thousands),
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
            md += &format!("\nNot measured: {e}  ");
        }
        md += "\n\n";
    }
    md += &super::render_checks(checks);
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
        assert_eq!(parse_server("monoio-legacy"), Ok(Server::Peer("monoio-legacy")));
        assert!(parse_server("iomux-kqueue").is_err());
        assert!(parse_server("nginx").unwrap_err().contains("c-epoll"));
        assert_eq!(parse_scenario("closed-10000"), Ok(Scenario { conns: 10_000, open: false }));
        assert_eq!(parse_scenario("open-1000").map(|s| s.name()), Ok("open-1000".to_string()));
        for bad in ["closed", "open-0", "half-10", "closed-x"] {
            assert!(parse_scenario(bad).is_err(), "{bad}");
        }
        assert_eq!(default_servers().len(), 8);
    }

    #[test]
    fn each_repetition_runs_every_server_once_in_another_order() {
        let n = 8;
        let orders: Vec<Vec<usize>> = (0..3).map(|r| rotation(n, r)).collect();
        for o in &orders {
            let mut sorted = o.clone();
            sorted.sort();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        }
        assert_eq!(orders[0][0], 0);
        assert_eq!(orders[1][0], 1);
        assert_eq!(orders[2][0], 2);
        assert_ne!(orders[0], orders[1]);
        assert_eq!(rotation(1, 5), vec![0]);
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
            row(Server::Peer("tokio"), c100, vec![run(5.0, 2.0, 100.0)]),
            row(Server::Peer("c-epoll"), c100, vec![run(4.0, 2.0, 100.0)]),
            row(Server::Iomux(Backend::Epoll), o1000, vec![Err("no start".into())]),
            row(Server::Peer("c-epoll"), o1000, vec![run(4.0, 2.0, 100.0)]),
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
    }
}
