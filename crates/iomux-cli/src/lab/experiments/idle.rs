//! E2 `idle`: 10 active echo connections among Z idle ones; the time for
//! 40,000 round trips (the Chinese epoll article's "poll vs epoll" test).

use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{BackendDefaults, RoundDefaults, SharedFlags};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::harness::{by_name, by_names, envelope::Envelope};
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot::{self, Axes, Series};
use crate::lab::render::table::thousands;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::cell::{self, data_path};
use crate::lab::rig::child::ServerChild;
use crate::lab::rig::lan;
use crate::lab::rig::netns::Net;
use crate::lab::Settings;
use crate::CliResult;
use anyhow::bail;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::time::Duration;

const IDLE: [usize; 12] = [0, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240];
/// Quick settings stop at this Z: poll's 40,000 round trips among 10,240
/// idle fds took 30-40 s a run on a quiet 2-vCPU machine, and the claims
/// need six of them (over 3 minutes); at 2,560 they take about 3 s and
/// poll's growth is already 8 times its time at Z = 0.
const QUICK_MOST_IDLE: usize = 2560;
const ACTIVE: usize = 10;
const ROUND_TRIPS: u64 = 40_000;
/// A cell whose first run took longer is run once in the first rounds
/// (poll and select among thousands of idle fds).
const SLOW_S: f64 = 1.0;

/// The defaults of the flags experiments share.
#[derive(Clone, Debug, Default)]
pub struct Defaults;

impl RoundDefaults for Defaults {
    const REPS: (usize, usize) = (1, 3);
    const BUDGET_S: f64 = 45.0;
}

impl BackendDefaults for Defaults {
    const BACKENDS: (&'static [Backend], &'static [Backend]) = (Backend::ALL, Backend::ALL);
}

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Idle connection counts, comma-separated [default: the article's
    /// 0, 10, 20, ... 2560; --full: on to 10240]
    #[arg(long, value_delimiter = ',')]
    pub idle: Option<Vec<usize>>,
    #[command(flatten)]
    pub shared: SharedFlags<Defaults>,
    #[command(flatten)]
    pub network: lan::NetworkFlag,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    idle: Vec<usize>,
    #[serde(with = "by_names")]
    backends: Vec<Backend>,
    active: usize,
    round_trips: u64,
    msg_size: usize,
    #[serde(flatten)]
    rounds: Rounds,
    #[serde(with = "by_name")]
    load_backend: Backend,
    #[serde(flatten)]
    net: lan::Networks,
}

/// On the LAN, Z: 640, the largest of the documents' Z (0, 10, ..., 640,
/// 1280, ...) that select holds in one process (FD_SETSIZE 1,024), so that
/// E2 runs there on all six backends.
const LAN_Z: usize = 640;

/// One cell: a backend among Z idle connections.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    #[serde(with = "by_name")]
    backend: Backend,
    idle: usize,
    /// On the emulated LAN rather than loopback.
    #[serde(default)]
    lan: bool,
}

impl Arm {
    /// A loopback cell.
    fn at(backend: Backend, idle: usize) -> Arm {
        Arm { backend, idle, lan: false }
    }
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, Z = {}{}", self.backend, self.idle, if self.lan { ", lan" } else { "" })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
    server_cpu_s: f64,
    syscalls_per_request: f64,
}

pub struct Idle;

impl Idle {
    /// The cells every claim compares: each backend at the least and the
    /// most idle connections planned; None when the plan lacks them.
    fn ends(p: &Params, backend: Backend) -> Option<(Arm, Arm)> {
        let (z0, zn) = (*p.idle.iter().min()?, *p.idle.iter().max()?);
        (z0 < zn && p.backends.contains(&backend) && p.net.loopback())
            .then_some((Arm::at(backend, z0), Arm::at(backend, zn)))
    }
}

fn growth(p: &Params, backend: Backend, quantity: String, needed: Needed) -> Spec<Arm, Sample> {
    match Idle::ends(p, backend) {
        Some((a, b)) => Spec::iomux(quantity, needed, vec![a, b], move |r: &RoundView<Arm, Sample>| {
            Some(r.get(&b)?.seconds / r.get(&a)?.seconds)
        }),
        None => Spec::iomux(quantity, needed, vec![], |_| None),
    }
}

impl Experiment for Idle {
    experiment_types!(Args, Params, Arm, Sample, rounds: params.rounds);

    const ENTRY: Entry =
        Entry::new("idle", "E2", "seconds for 40,000 round trips by 10 active connections among Z idle ones")
            .smoke("--idle 0,100 --backends epoll,poll,uring --budget 20");
    const PUBLISHED: &'static str = "kernel 2.6.11, PIII 933 MHz, 100 Mbit LAN; a plot, no table: poll's time grows \
                                     linearly with the number of idle connections, epoll's stays flat; with none \
                                     idle, poll is slightly faster than epoll.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let mut idle = args
            .idle
            .clone()
            .unwrap_or_else(|| IDLE.iter().copied().filter(|&z| settings.full || z <= QUICK_MOST_IDLE).collect());
        idle.sort_unstable();
        idle.dedup();
        let backends = args.shared.backends.chosen(settings.full)?;
        let net = args.network.plan(settings.full)?;
        if let Some(&most) = idle.last().filter(|_| net.loopback()) {
            cell::require_loopback("E2", most + ACTIVE)?;
        }
        Ok(Params {
            net,
            idle,
            backends,
            active: ACTIVE,
            round_trips: ROUND_TRIPS,
            msg_size: 100,
            rounds: args.shared.rounds.rounds(settings)?,
            load_backend: cell::LOAD_BACKEND,
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        let (z0, zn) = (p.idle.first().copied().unwrap_or(0), p.idle.last().copied().unwrap_or(0));
        vec![
            growth(p, Backend::Epoll, format!("epoll: time at Z = {zn} / time at Z = {z0}"), Needed::Within(0.9, 1.1))
                .documents("epoll's time stays flat among idle connections"),
            growth(p, Backend::Poll, format!("poll: time at Z = {zn} / time at Z = {z0}"), Needed::AtLeast(5.0))
                .documents("poll's time grows with the number of idle connections"),
        ]
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![
            Metric { name: "seconds", unit: "s", higher_is_better: false, get: |s| s.seconds },
            Metric { name: "p99 latency", unit: "us", higher_is_better: false, get: |s| s.p99_us },
            Metric { name: "server CPU", unit: "s", higher_is_better: false, get: |s| s.server_cpu_s },
        ]
    }

    /// Every arm, but those whose runs took more than SLOW_S: not repeated.
    fn first_arms(p: &Params, _: usize, trial: &Trial<Arm, Sample>) -> Vec<Arm> {
        let loopback = p.net.loopback();
        let on_loopback = p
            .backends
            .iter()
            .filter(|_| loopback)
            .flat_map(|&backend| p.idle.iter().map(move |&idle| Arm::at(backend, idle)));
        let on_lan = p.backends.iter().filter(|_| p.net.lan()).map(|&backend| Arm { backend, idle: LAN_Z, lan: true });
        on_loopback.chain(on_lan).filter(|a| trial.kept(a).all(|s| s.seconds <= SLOW_S)).collect()
    }

    fn network_is_own(a: &Arm) -> bool {
        a.lan
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Sample>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        let mut lan = lan::OnDemand::new(&p.net.lan);
        Ok(Box::new(move |a: &Arm| match a.lan {
            false => run_once(a.backend, a.idle),
            true => lan.run(|net| lan_cell(net, a.backend)),
        }))
    }
}

impl Shown for Idle {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View {
            intro: vec![format!(
                "Server (iomux serve, echo) and load (iomux load, {} client) on separate CPUs. Each cell: median \
                 of its runs, ± half its 95% interval (cells over {SLOW_S} s run once in the first {} rounds; the \
                 cells the claims compare get more rounds).",
                p.load_backend, p.rounds.first_rounds
            )],
            ..View::default()
        };
        let mut seconds = TableView {
            caption: format!("Seconds for {} round trips:", thousands(p.round_trips as f64)),
            header: std::iter::once("idle Z".to_string()).chain(p.backends.iter().map(|b| b.to_string())).collect(),
            rows: Vec::new(),
        };
        for &idle in &p.idle {
            let mut row = vec![thousands(idle as f64)];
            for &backend in &p.backends {
                let arm = Arm::at(backend, idle);
                row.push(match env.note(&arm) {
                    Some(n) => format!("n/a {}", view.footnote(n)),
                    None => shown(env.estimate(&arm, |s| s.seconds)),
                });
            }
            seconds.rows.push(row);
        }
        let mut detail = TableView {
            caption: "Latency, server CPU (the whole server process, accepting the idle connections included) and \
                      data-path syscalls (waits, reads, writes) per request, medians:"
                .into(),
            header: ["backend", "idle Z", "runs", "p50 us", "p99 us", "server CPU s", "syscalls/request"]
                .map(String::from)
                .to_vec(),
            rows: Vec::new(),
        };
        for &backend in &p.backends {
            for &idle in &p.idle {
                let arm = Arm::at(backend, idle);
                let med = |f: fn(&Sample) -> f64| env.estimate(&arm, f).map(|e| e.median);
                let Some(runs) = env.estimate(&arm, |s| s.seconds).map(|e| e.n) else { continue };
                let fmt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
                detail.rows.push(vec![
                    backend.to_string(),
                    thousands(idle as f64),
                    runs.to_string(),
                    fmt(med(|s| s.p50_us), 1),
                    fmt(med(|s| s.p99_us), 1),
                    fmt(med(|s| s.server_cpu_s), 3),
                    fmt(med(|s| s.syscalls_per_request), 3),
                ]);
            }
        }
        // With --network lan alone, only the LAN's table has figures.
        if p.net.loopback() {
            view.tables = vec![seconds, detail];
        }
        view.intro.extend(lan::intro(&p.net.lan, "the load", &format!("at Z = {LAN_Z}, the epoll article's setting")));
        if matches!(p.net.lan, Some(Ok(_))) {
            let mut on_lan = TableView::new(
                format!("On the emulated 100 Mbit/s LAN, Z = {LAN_Z}:"),
                &["backend", "runs", "seconds", "p50 us", "p99 us", "server CPU s"],
                Vec::new(),
            );
            for &backend in &p.backends {
                let arm = Arm { backend, idle: LAN_Z, lan: true };
                let med = |f: fn(&Sample) -> f64, digits: usize| {
                    env.estimate(&arm, f).map_or("-".into(), |e| format!("{:.digits$}", e.median))
                };
                let seconds = match env.note(&arm) {
                    Some(n) => format!("n/a {}", view.footnote(n)),
                    None => shown(env.estimate(&arm, |s| s.seconds)),
                };
                let runs = env.kept(&arm).count().to_string();
                on_lan.rows.push(vec![
                    backend.to_string(),
                    runs,
                    seconds,
                    med(|s| s.p50_us, 1),
                    med(|s| s.p99_us, 1),
                    med(|s| s.server_cpu_s, 3),
                ]);
            }
            view.tables.push(on_lan);
        }
        let series: Vec<Series> = p
            .backends
            .iter()
            .map(|&backend| Series {
                name: backend.to_string(),
                points: p
                    .idle
                    .iter()
                    .map(|&idle| {
                        let e = env.estimate(&Arm::at(backend, idle), |s| s.seconds);
                        (idle as f64, e.map_or(f64::NAN, |e| e.median))
                    })
                    .collect(),
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
        if p.net.loopback() {
            view.svg = Some(plot::line_chart(&axes, &series)?);
        }
        Ok(view)
    }
}

/// One run of a cell, or why the cell cannot be measured.
fn run_once(backend: Backend, idle: usize) -> Measured<Sample> {
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
    let requests = c.result.echoes.max(1) as f64;
    let latency = |f: fn(&crate::load::result::Latency) -> f64| c.result.latency.as_ref().map_or(f64::NAN, f);
    let s = &c.server.typed;
    Ok(Ok(Sample {
        seconds: c.result.seconds,
        p50_us: latency(|l| l.p50_us),
        p99_us: latency(|l| l.p99_us),
        server_cpu_s: s.cpu_s(),
        syscalls_per_request: data_path(s) as f64 / requests,
    }))
}

/// One run on the LAN: the load (active and idle connections) in the
/// client's namespace, the server in the other.
fn lan_cell(net: &Net, backend: Backend) -> CliResult<Sample> {
    let server = ServerChild::start_in(net, backend, "echo", &lan::server_flags())?;
    let mut args = server.load_args(cell::LOAD_BACKEND, cell::cpus().1);
    (args.conns, args.idle, args.requests) = (ACTIVE, LAN_Z, Some(ROUND_TRIPS));
    let mut load = lan::load(net, &args)?;
    if load.wait(Duration::from_secs(300), |_| {})?.is_none() {
        bail!("E2 {backend} on the LAN: the load did not end within 300 s");
    }
    let result = load.result().map_err(anyhow::Error::msg)?;
    if result.errors.total > 0 {
        bail!("E2 {backend} on the LAN: the load counted errors: {:?}", result.errors);
    }
    let s = server.stop()?.typed;
    let latency = |f: fn(&crate::load::result::Latency) -> f64| result.latency.as_ref().map_or(f64::NAN, f);
    Ok(Sample {
        seconds: result.seconds,
        p50_us: latency(|l| l.p50_us),
        p99_us: latency(|l| l.p99_us),
        server_cpu_s: s.cpu_s(),
        syscalls_per_request: data_path(&s) as f64 / result.echoes.max(1) as f64,
    })
}

/// One kept take of (backend, Z) in `round`, for tests that add a cell
/// measured once to a [`fixture`].
#[cfg(test)]
pub fn fixture_take(
    backend: Backend,
    idle: usize,
    seconds: f64,
    round: usize,
) -> crate::lab::harness::trial::Take<Arm, Sample> {
    crate::lab::harness::trial::Take {
        arm: Arm::at(backend, idle),
        round,
        others: Some(0.0),
        cross_cpu_ns: None,
        apart: false,
        kept: true,
        took_s: None,
        value: Sample { seconds, p50_us: 80.0, p99_us: 200.0, server_cpu_s: seconds, syscalls_per_request: 2.1 },
    }
}

/// Makes every take of `round` in `env` `factor` times slower, as a
/// busy spell of the machine would.
#[cfg(test)]
pub fn slow_round(env: &mut Envelope<Params, Arm, Sample>, round: usize, factor: f64) {
    for t in env.takes.iter_mut().filter(|t| t.round == round) {
        t.value.seconds *= factor;
        t.value.server_cpu_s *= factor;
    }
}

/// An E2 result with `seconds` for each (backend, Z), `rounds` times (a
/// little spread, so intervals have width), made as `execute` makes one:
/// for tests of what reads results.
#[cfg(test)]
pub fn fixture(seconds: &[(Backend, usize, f64)], rounds: usize) -> Envelope<Params, Arm, Sample> {
    use crate::lab::harness::envelope::{NoiseSummary, SCHEMA};
    use crate::lab::harness::trial::Quiet;
    let params = Params {
        idle: vec![0, 100],
        backends: vec![Backend::Epoll, Backend::Poll],
        active: ACTIVE,
        round_trips: ROUND_TRIPS,
        msg_size: 100,
        rounds: Rounds::fixed(rounds, 0.0),
        load_backend: cell::LOAD_BACKEND,
        net: lan::NetworkFlag::default().plan(false).unwrap(),
    };
    let arms: Vec<Arm> = seconds.iter().map(|&(backend, idle, _)| Arm::at(backend, idle)).collect();
    let mut trial: Trial<Arm, Sample> = Trial::new(&Quiet, "fixture", std::time::Duration::ZERO);
    for round in 0..rounds {
        let spread = 1.0 + 0.002 * (round % 3) as f64;
        let mut measure = |a: &Arm| -> Measured<Sample> {
            let s = seconds.iter().find(|x| x.0 == a.backend && x.1 == a.idle).map_or(f64::NAN, |x| x.2) * spread;
            Ok(Ok(Sample { seconds: s, p50_us: 80.0, p99_us: 200.0, server_cpu_s: s, syscalls_per_request: 2.1 }))
        };
        trial.round(&arms, &mut measure).unwrap();
    }
    let claims = Idle::claims(&params).iter().map(|spec| trial.judge(spec)).collect();
    let (takes, unmeasurable) = trial.finish();
    let mut env = Envelope {
        experiment: "idle".into(),
        schema: SCHEMA,
        full: false,
        commit: String::new(),
        machine: crate::lab::rig::machine::Machine::default(),
        params,
        published: Idle::PUBLISHED.into(),
        claims,
        figures: Vec::new(),
        noise: NoiseSummary::of(rounds, &takes, None),
        takes,
        unmeasurable,
    };
    env.figures = crate::lab::harness::experiment::figures::<Idle>(&env);
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_the_lan_alone_no_claim_reads_a_loopback_cell() {
        let mut env = fixture(&[(Backend::Epoll, 0, 0.4), (Backend::Epoll, 100, 0.4)], 1);
        assert!(Idle::claims(&env.params).iter().all(|c| !c.arms.is_empty()), "loopback: the claims have cells");
        env.params.net = lan::Networks { networks: vec![lan::Network::Lan], lan: Some(Err("not here".into())) };
        assert!(Idle::claims(&env.params).iter().all(|c| c.arms.is_empty()));
        let lan_cell = Arm { backend: Backend::Epoll, idle: LAN_Z, lan: true };
        assert!(Idle::network_is_own(&lan_cell) && !Idle::network_is_own(&Arm::at(Backend::Epoll, 0)));
        let arms =
            Idle::first_arms(&env.params, 0, &Trial::new(&crate::lab::harness::trial::Quiet, "t", Duration::ZERO));
        assert!(arms.iter().all(|a| a.lan && a.idle == LAN_Z) && arms.len() == 2, "{arms:?}");
    }
}
