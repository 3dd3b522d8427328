//! E7 `resp`: `iomux serve --proto resp` on each backend beside
//! redis-server (no persistence, one I/O thread), each pinned to one CPU,
//! measured by redis-benchmark on the other: SET, GET and INCR, 50
//! connections, without and with pipelining; open (each server on a CPU
//! of its own) and server-bound (every server in the same 50% CPU quota,
//! so the one client thread has headroom and requests/s measure the
//! server). Requests/s, server CPU per request, syscalls per request
//! (iomux), latency and errors.
//!
//! A third server runs beside them: the C floor (`iomux peer --server
//! c-resp-floor`, crates/peers/c/resp_floor.c), which answers each
//! request with a canned reply and does nothing else. Server-bound, what
//! it reaches over redis-server is the most any server on epoll reaches
//! on this kernel and machine with this client. At -P 1, iomux-epoll over
//! it is iomux's own part; at -P 16 the table shows both (see
//! [`GOAL_OF_FLOOR`]).

mod cells;
use cells::*;

mod view;

use crate::lab::experiments::serving::{self, request_metrics, servers};
use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{QuickFull, SharedFlags, Standard};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::harness::{by_name, by_names, no_repeats};
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::anchors::redis::{self, RedisServer};
use crate::lab::rig::child::ServerChild;
use crate::lab::rig::quota::{self, CpuQuota, Scenario, BOUND_SHARE};
use crate::lab::Settings;
use crate::CliResult;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// redis-benchmark's default and the issue's.
const CONNS: u32 = 50;
/// Requests per run at depth 1; a run at depth D sends D times as many,
/// so that each lasts about as long (many of the quota's periods).
const REQUESTS: QuickFull<u64> = QuickFull { quick: 30_000, full: 100_000 };
const DEFAULT_DEPTHS: [u32; 2] = [1, 16];
/// A side using at least this share of its CPU sets the pace.
const SATURATED: f64 = 0.95;
/// iomux's goals against redis-server, server-bound: requests/s at depth
/// 1, and pipelined.
const GOAL_UNPIPELINED: f64 = 1.2;
const GOAL_PIPELINED: f64 = 1.5;
/// iomux's own part at -P 1, server-bound: iomux-epoll within 5% of the
/// C floor's requests/s (the floor, on the same epoll, spends only what
/// the kernel does, which is most of a request's cost without pipelining).
/// At -P 16 a read carries 16 requests that share the kernel's work, and
/// parsing and the keyspace, which the floor skips, weigh: the floor spent
/// 0.371 us of CPU a request and iomux-epoll 0.417 (GET, 4 rounds, AMD
/// EPYC), and within 5% would leave a real server about 20 ns a request
/// for both. There the floor is not a goal's measure; redis-benchmark's one thread
/// also ran at 95% of its CPU against it (1.39-1.46 times redis's
/// requests/s), so it shows what this client allows.
const GOAL_OF_FLOOR: f64 = 0.95;
/// The depth at which iomux-epoll is judged against the floor.
const GOAL_OF_FLOOR_DEPTH: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Test {
    Set,
    Get,
    Incr,
}

crate::lab::harness::display_as_value!(Test);

impl Test {
    const ALL: [Test; 3] = [Test::Set, Test::Get, Test::Incr];
}

servers!(Server {
    Redis => "redis",
    /// The C floor: canned replies, nothing else.
    Floor => "floor",
});

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    #[command(flatten)]
    pub shared: SharedFlags<Standard>,
    /// redis-benchmark tests, comma-separated [default: get,set; --full: set,get,incr]
    #[arg(long, value_delimiter = ',')]
    pub tests: Option<Vec<Test>>,
    /// Pipelining depths (redis-benchmark -P), comma-separated [default: 1,16]
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub depths: Option<Vec<u32>>,
    /// Scenarios, comma-separated: open (each server on a CPU of its own)
    /// and bound (every server in the same 50% CPU quota; needs root and
    /// a cgroup CPU controller) [default: bound, the claims' (open where
    /// no quota can be made); --full: open,bound]
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Option<Vec<Scenario>>,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1000..=100_000_000),
          help = format!("Requests per run at -P 1 (at -P D, D times as many) \
                          {REQUESTS}"))]
    pub requests: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(with = "by_names")]
    servers: Vec<Server>,
    tests: Vec<Test>,
    depths: Vec<u32>,
    scenarios: Vec<Scenario>,
    /// redis-server and redis-benchmark, when found.
    programs: Option<(PathBuf, PathBuf)>,
    /// Why some cells are not run (a program missing, no quota).
    missing: Vec<String>,
    /// What was run instead of what was asked, said in the report.
    #[serde(default)]
    notes: Vec<String>,
    conns: u32,
    requests: u64,
    #[serde(flatten)]
    rounds: Rounds,
    pinned: Option<(usize, usize)>,
    bound_share: f64,
    saturated_at: f64,
}

impl Params {
    fn requests_at(&self, depth: u32) -> u64 {
        self.requests * u64::from(depth)
    }
}

/// One cell: a server, a test, a pipelining depth, a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    #[serde(with = "by_name")]
    server: Server,
    test: Test,
    depth: u32,
    scenario: Scenario,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -P {} {}", self.server, self.test, self.depth, self.scenario)
    }
}

/// One run of one cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub report: redis::Report,
    pub requests: u64,
    /// User + system time of the server over the client's run, per request.
    pub server_cpu_us_per_request: f64,
    /// Shares of one CPU over the client's run.
    pub server_util: f64,
    pub client_util: f64,
    /// iomux only: its syscalls over its life per reply it sent.
    pub syscalls_per_request: Option<f64>,
    /// Error replies the server sent (redis: INFO's total_error_replies).
    pub errors: u64,
    /// Server-bound: periods in which the quota held the server back.
    pub throttled_periods: Option<u64>,
}

serving::request_run!(Run);

fn every_cell(p: &Params, pick: impl Fn(&Arm) -> bool) -> Vec<Arm> {
    let mut arms = Vec::new();
    for &scenario in &p.scenarios {
        for &test in &p.tests {
            for &depth in &p.depths {
                for &server in &p.servers {
                    let arm = Arm { server, test, depth, scenario };
                    if pick(&arm) {
                        arms.push(arm);
                    }
                }
            }
        }
    }
    arms
}

/// The best iomux backend's requests/s in one round.
fn best_iomux(r: &RoundView<Arm, Run>) -> Option<f64> {
    r.samples().iter().filter(|(a, _)| a.server.is_iomux()).map(|(_, r)| r.report.requests_per_sec).reduce(f64::max)
}

/// One arm's requests/s in one round.
fn rate(r: &RoundView<Arm, Run>, arm: &Arm) -> Option<f64> {
    r.get(arm).map(|run| run.report.requests_per_sec)
}

/// redis-server's requests/s in one round.
fn redis_rate(r: &RoundView<Arm, Run>) -> Option<f64> {
    r.samples().iter().find(|(a, _)| a.server == Server::Redis).map(|(_, r)| r.report.requests_per_sec)
}

fn goal(depth: u32) -> f64 {
    if depth > 1 {
        GOAL_PIPELINED
    } else {
        GOAL_UNPIPELINED
    }
}

/// The quick default is server-bound only: where no quota can be made,
/// the open scenario runs instead, so that something is measured.
fn open_if_none(scenarios: &mut Vec<Scenario>) -> Vec<String> {
    if !scenarios.is_empty() {
        return Vec::new();
    }
    scenarios.push(Scenario::Open);
    vec!["The open scenario runs instead of the server-bound one: its -P 1 figures measure the client as much as \
          the servers, and the claims, which are server-bound, are not decided."
        .into()]
}

pub struct Resp;

impl Experiment for Resp {
    experiment_types!(Args, Params, Arm, Run, rounds: params.rounds);

    const ENTRY: Entry = Entry::new("resp", "E7", "iomux serve --proto resp beside redis-server, by redis-benchmark")
        .smoke("--backends epoll,uring --tests get --requests 2000 --reps 1 --budget 0")
        .needs(&["redis-server", "redis-benchmark"]);
    const PUBLISHED: &'static str = "nothing: the documents served no RESP. iomux's goals, server-bound (every \
                                     server in the same 50% CPU quota): 1.2 times redis-server's requests/s at -P 1 \
                                     and 1.5 times at -P 16, for GET and for SET. The C floor (canned replies, \
                                     nothing else) shows how far over redis-server this machine and client let any \
                                     epoll server go, beside iomux's figures, and at -P 1 iomux's own part is \
                                     judged against it: iomux-epoll at least 0.95 of the floor's requests/s.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let backends = args.shared.backends.chosen(settings.full)?;
        // Quick settings: what the claims read (GET and SET, server-bound).
        let tests = args.tests.clone().unwrap_or_else(|| {
            if settings.full {
                Test::ALL.to_vec()
            } else {
                vec![Test::Get, Test::Set]
            }
        });
        let depths = args.depths.clone().unwrap_or_else(|| DEFAULT_DEPTHS.to_vec());
        let scenarios = args.scenarios.clone().unwrap_or_else(|| {
            if settings.full {
                vec![Scenario::Open, Scenario::Bound]
            } else {
                vec![Scenario::Bound]
            }
        });
        no_repeats("--tests", &tests)?;
        no_repeats("--depths", &depths)?;
        no_repeats("--scenarios", &scenarios)?;
        let mut missing = Vec::new();
        let programs = match redis::programs() {
            Ok(found) => Some(found),
            Err(why) => {
                missing.push(format!("{why}; install it with {}", crate::lab::rig::anchors::clients::INSTALL));
                None
            }
        };
        let mut scenarios = quota::runnable(scenarios, args.scenarios.is_some(), &mut missing)?;
        let notes = open_if_none(&mut scenarios);
        let mut servers: Vec<Server> = backends.into_iter().map(Server::Iomux).collect();
        servers.push(Server::Redis);
        servers.push(Server::Floor);
        Ok(Params {
            servers,
            tests,
            depths,
            scenarios,
            programs,
            missing,
            notes,
            conns: CONNS,
            requests: args.requests.unwrap_or(REQUESTS.pick(settings)),
            rounds: args.shared.rounds.rounds(settings)?,
            pinned: crate::lab::rig::cell::pinned(),
            bound_share: BOUND_SHARE,
            saturated_at: SATURATED,
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Run>> {
        let mut claims = Vec::new();
        if p.scenarios.contains(&Scenario::Bound) {
            for test in [Test::Get, Test::Set].into_iter().filter(|t| p.tests.contains(t)) {
                for &depth in &p.depths {
                    let arms = every_cell(p, |a| a.scenario == Scenario::Bound && a.test == test && a.depth == depth);
                    // The goal's rounds need iomux and redis, not the floor.
                    let goal_arms: Vec<Arm> = arms.iter().copied().filter(|a| a.server != Server::Floor).collect();
                    let against_redis = Spec::iomux(
                        format!("E7 bound {} -P {depth}: iomux best req/s / redis's", test.to_string().to_uppercase()),
                        Needed::AtLeast(goal(depth)),
                        goal_arms,
                        move |r| Some(best_iomux(r)? / redis_rate(r)?),
                    );
                    // Where the floor runs, it says what this machine allows
                    // against redis (it has measured below the goals here), and
                    // iomux's own part is judged against the floor below.
                    // (Without iomux-epoll, -P 1 would then have no goal of iomux's.)
                    let epoll_judged =
                        depth != GOAL_OF_FLOOR_DEPTH || p.servers.contains(&Server::Iomux(Backend::Epoll));
                    let has_floor = p.servers.contains(&Server::Floor) && epoll_judged;
                    claims.push(if has_floor { against_redis.machine() } else { against_redis });
                    if !has_floor {
                        continue;
                    }
                    let name = test.to_string().to_uppercase();
                    let floor = Arm { server: Server::Floor, test, depth, scenario: Scenario::Bound };
                    let redis = Arm { server: Server::Redis, ..floor };
                    claims.push(
                        Spec::iomux(
                            format!("E7 bound {name} -P {depth}: a server of recv and send alone (the C floor), req/s / redis's"),
                            Needed::AtLeast(goal(depth)),
                            vec![floor, redis],
                            move |r: &RoundView<Arm, Run>| Some(rate(r, &floor)? / rate(r, &redis)?),
                        )
                        .machine(),
                    );
                    // iomux's own part: on the floor's mechanism (epoll, level-
                    // triggered, recv and send), one run against one run.
                    let epoll = Arm { server: Server::Iomux(Backend::Epoll), ..floor };
                    if p.servers.contains(&epoll.server) && depth == GOAL_OF_FLOOR_DEPTH {
                        claims.push(Spec::iomux(
                            format!("E7 bound {name} -P {depth}: iomux-epoll req/s / the C floor's"),
                            Needed::AtLeast(GOAL_OF_FLOOR),
                            vec![epoll, floor],
                            move |r: &RoundView<Arm, Run>| Some(rate(r, &epoll)? / rate(r, &floor)?),
                        ));
                    }
                }
            }
        }
        // The floor answers canned replies and counts none.
        let all = every_cell(p, |a| a.server != Server::Floor);
        claims.push(
            Spec::iomux("E7 error replies", Needed::AtMost(0.0), all, move |r: &RoundView<Arm, Run>| {
                Some(r.samples().iter().map(|(_, r)| r.errors as f64).sum())
            })
            .counted(),
        );
        claims
    }

    fn metrics() -> Vec<Metric<Run>> {
        request_metrics()
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Run>) -> Vec<Arm> {
        every_cell(p, |_| true)
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Run>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Run>> {
        for why in &p.missing {
            eprintln!("resp: {why}");
        }
        Ok(Box::new(move |a: &Arm| -> Measured<Run> { Ok(run_cell(p, a)) }))
    }

    fn reference(arm: &Arm) -> bool {
        !arm.server.is_iomux()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn open_runs_where_no_scenario_can() {
        let mut none = Vec::new();
        let notes = crate::lab::experiments::resp::open_if_none(&mut none);
        assert_eq!((none, notes.len()), (vec![Scenario::Open], 1));
        let mut bound = vec![Scenario::Bound];
        assert!(crate::lab::experiments::resp::open_if_none(&mut bound).is_empty());
        assert_eq!(bound, vec![Scenario::Bound]);
    }

    use super::*;
    use crate::lab::harness::claim::{Claim, Source, Verdict};
    use crate::lab::harness::trial::judged_quiet;

    fn run(rate: f64, errors: u64) -> Run {
        Run {
            report: redis::Report { requests_per_sec: rate, ..Default::default() },
            requests: 1000,
            server_cpu_us_per_request: 1e6 / rate,
            server_util: 0.5,
            client_util: 0.6,
            syscalls_per_request: None,
            errors,
            throttled_periods: Some(10),
        }
    }

    fn judged(value: impl Fn(&Arm) -> Measured<Run>) -> Vec<Claim> {
        let p = Params {
            servers: vec![Server::Iomux(Backend::Epoll), Server::Iomux(Backend::Uring), Server::Redis, Server::Floor],
            tests: Test::ALL.to_vec(),
            depths: vec![1, 16],
            scenarios: vec![Scenario::Open, Scenario::Bound],
            programs: None,
            missing: vec![],
            notes: vec![],
            conns: CONNS,
            requests: 1000,
            rounds: Rounds::fixed(6, 0.0),
            pinned: None,
            bound_share: BOUND_SHARE,
            saturated_at: SATURATED,
        };
        judged_quiet(&Resp::claims(&p), &every_cell(&p, |_| true), value)
    }

    #[test]
    fn claims_take_the_best_iomux_against_redis_in_the_quota() {
        let claims = judged(|a| {
            Ok(Ok(match (a.server, a.depth, a.scenario) {
                (_, _, Scenario::Open) => run(1.0, 0),
                (Server::Floor, 1, _) => run(48_000.0, 0),
                (Server::Floor, _, _) => run(500_000.0, 0),
                (Server::Redis, 1, _) => run(40_000.0, 0),
                (Server::Redis, _, _) => run(300_000.0, 0),
                (Server::Iomux(Backend::Uring), 1, _) => run(50_000.0, 0),
                (Server::Iomux(_), 1, _) => run(44_000.0, 0),
                (Server::Iomux(_), _, _) => run(480_000.0, u64::from(a.test == Test::Incr)),
            }))
        });
        let median = |q: &str| claims.iter().find(|c| c.quantity == q).and_then(|c| c.estimate).map(|e| e.median);
        assert_eq!(median("E7 bound GET -P 1: iomux best req/s / redis's"), Some(1.25));
        assert_eq!(median("E7 bound SET -P 16: iomux best req/s / redis's"), Some(1.6));
        // The floor is neither iomux nor redis, and has claims of its own at
        // each depth: what the machine allows, and iomux-epoll against it.
        let source = |q: &str| claims.iter().find(|c| c.quantity == q).map(|c| c.source);
        for (depth, floor_over_redis) in [(1, 1.2), (16, 500.0 / 300.0)] {
            let floor =
                format!("E7 bound GET -P {depth}: a server of recv and send alone (the C floor), req/s / redis's");
            let near = |v: Option<f64>| v.map(|v: f64| (v * 1e6).round() / 1e6);
            assert_eq!(near(median(&floor)), near(Some(floor_over_redis)), "{floor}");
            assert_eq!(source(&floor), Some(Source::Machine));
            let redis = format!("E7 bound SET -P {depth}: iomux best req/s / redis's");
            assert_eq!(source(&redis), Some(Source::Machine), "{redis}: the floor shows what the machine allows");
        }
        // iomux-epoll against the floor: a goal at -P 1, not judged at -P 16.
        let of_floor = "E7 bound SET -P 1: iomux-epoll req/s / the C floor's";
        assert_eq!(median(of_floor).map(|v| (v * 1e6).round()), Some((44.0f64 / 48.0 * 1e6).round()));
        assert_eq!(source(of_floor), Some(Source::Iomux));
        assert_eq!(source("E7 bound SET -P 16: iomux-epoll req/s / the C floor's"), None);
        // INCR has no goal, but its errors count.
        assert_eq!(claims.len(), 11, "{claims:?}");
        // INCR -P 16 in the quota: one error reply from each iomux backend.
        assert_eq!(median("E7 error replies"), Some(2.0));
    }

    #[test]
    fn a_floor_that_cannot_run_leaves_the_goals_decided() {
        let claims = judged(|a| {
            Ok(match a.server {
                Server::Floor => Err("no floor here".into()),
                Server::Redis => Ok(run(40_000.0, 0)),
                Server::Iomux(_) => Ok(run(60_000.0, 0)),
            })
        });
        for c in &claims {
            let on_floor = c.quantity.contains("floor");
            assert_eq!(c.verdict == Verdict::NotMeasurable, on_floor, "{c:?}");
            assert_eq!(c.estimate.is_some(), !on_floor, "{c:?}");
        }
    }

    #[test]
    fn cells_are_named_and_parse_back() {
        let arm =
            Arm { server: Server::Iomux(Backend::EpollEt), test: Test::Incr, depth: 16, scenario: Scenario::Bound };
        assert_eq!(arm.to_string(), "iomux-epoll-et incr -P 16 bound");
        let json = serde_json::to_string(&arm).unwrap();
        assert_eq!(serde_json::from_str::<Arm>(&json).unwrap(), arm);
        assert_eq!("redis".parse::<Server>(), Ok(Server::Redis));
        assert_eq!("floor".parse::<Server>(), Ok(Server::Floor));
        assert!("nginx".parse::<Server>().is_err());
    }
}
