//! E7 pub/sub: `iomux serve --proto resp` beside redis-server, driven by
//! `iomux load --mode pubsub` (redis-benchmark has no pub/sub), every
//! server pinned to the server CPU inside the same CPU quota (server-bound,
//! as E7's bound cells), the client on the other CPU. Two loads:
//! - fanout: one publisher (16 PUBLISHes unanswered) of 1 KiB messages to
//!   20 subscribers that read: messages delivered per second, server CPU
//!   per million messages; every push is checked byte for byte;
//! - slow: the same with one more subscriber that never reads: the 20 get
//!   everything, the slow one is dropped by the server's output limit
//!   (redis's `client-output-buffer-limit pubsub 32mb 8mb 60`, iomux's
//!   `--pubsub-limit`), the server's peak RSS.
//!
//! Beside them, under fanout only, the floor of a fan-out
//! (c/pubsub_floor.c: each read's publishes in one batch, one write of it
//! per subscriber, nothing else): what this machine allows.

use crate::lab::experiments::resp::Server;
use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{QuickFull, SharedFlags, Standard};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::harness::{by_names, no_repeats, ServerUnder};
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::anchors::clients::{missing_line, missing_told, Tool};
use crate::lab::rig::anchors::redis::RedisServer;
use crate::lab::rig::child::{status_kib, ServerChild};
use crate::lab::rig::quota::{CpuQuota, BOUND_SHARE};
use crate::lab::Settings;
use crate::load::pubsub::{Plan, PubsubResult};
use crate::CliResult;
use anyhow::bail;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// What the client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// 20 subscribers that read.
    Fanout,
    /// 20 that read and one that never does.
    Slow,
}

crate::lab::harness::display_as_value!(Load);

const SUBSCRIBERS: usize = 20;
const PAYLOAD: usize = 1024;
const WINDOW: usize = 16;
const SECONDS: QuickFull<f64> = QuickFull { quick: 1.0, full: 5.0 };
/// A slow cell's shortest run: see `rig`.
const SLOW_MIN_S: f64 = 2.0;
/// Issue 34's goal: messages delivered per second against redis-server's.
/// Judged as what this machine allows: the fan-out floor, which does
/// nothing but the kernel's part, reaches 1.3 times here; iomux is judged
/// against the floor.
const GOAL: f64 = 2.0;
/// The slow cell's bound on the server's peak RSS: the hard limit (32 MiB)
/// and as much again for everything else.
const RSS_BOUND_MIB: f64 = 64.0;
/// iomux-epoll against the floor: its own part.
const OF_FLOOR: f64 = 0.95;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    #[command(flatten)]
    pub shared: SharedFlags<Standard>,
    /// Loads, comma-separated: fanout, slow [default: both]
    #[arg(long, value_delimiter = ',')]
    pub loads: Option<Vec<Load>>,
    #[arg(long, help = format!("Seconds the publisher publishes per run {SECONDS}"))]
    pub seconds: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(with = "by_names")]
    servers: Vec<Server>,
    loads: Vec<Load>,
    redis: Option<PathBuf>,
    missing: Vec<String>,
    seconds: f64,
    #[serde(flatten)]
    rounds: Rounds,
    bound_share: f64,
}

/// One cell: a server under a load.
pub type Arm = ServerUnder<Server, Load>;

/// One run of one cell: what the subscribers received, and what it cost
/// the server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub client: PubsubResult,
    /// Server CPU (user + system) per million messages delivered.
    pub cpu_s_per_million: f64,
    /// The server's peak RSS over the run, in MiB.
    pub rss_peak_mib: f64,
    pub throttled_periods: Option<u64>,
}

impl Run {
    /// Every message reached every subscriber that reads, unaltered, and
    /// (slow) the one that does not read was dropped.
    fn clean(&self, load: Load) -> bool {
        let c = &self.client;
        c.errors == 0
            && c.delivered == c.expected
            && c.lost_subscribers == 0
            // The server's own count: a slow one dropped is no longer in it.
            && (load == Load::Fanout || c.still_subscribed == Some(c.subscribers))
    }
}

fn cell(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (server_cpu, client_cpu) = crate::lab::rig::cell::cpus();
    let quota = CpuQuota::new(BOUND_SHARE)?;
    let (addr, pid, stop): (_, _, Box<dyn FnOnce() -> Result<(), String>>) = match arm.server {
        Server::Iomux(b) => {
            let child = ServerChild::start_with(b, "resp", server_cpu, None, 1, &[]).map_err(crate::one_line)?;
            (child.addr, child.pid, Box::new(move || child.stop().map(drop).map_err(crate::one_line)))
        }
        Server::Floor => {
            let child = ServerChild::start_peer("c-pubsub-floor", server_cpu).map_err(crate::one_line)?;
            (child.addr, child.pid, Box::new(move || child.stop().map(drop).map_err(crate::one_line)))
        }
        Server::Redis => {
            let program = p.redis.as_ref().ok_or("redis-server not found")?;
            let server = RedisServer::start(program, server_cpu).map_err(crate::one_line)?;
            (server.addr, server.pid(), Box::new(move || server.stop().map_err(crate::one_line)))
        }
    };
    let measured = quota.add(pid).and_then(|()| {
        let plan = Plan {
            addr,
            backend: Backend::Epoll,
            threads: 1,
            subscribers: SUBSCRIBERS,
            slow: usize::from(arm.load == Load::Slow),
            publishers: 1,
            window: WINDOW,
            payload: PAYLOAD,
            channel: "e7".into(),
            // The slow one must fall past the 32 MiB limit: 2 s of 1 KiB
            // messages at least (the slowest slow cell of a quick lab,
            // iomux-uring's at 47,500 publishes/s, publishes about 93 MiB
            // to it in 2 s).
            duration: Duration::from_secs_f64(if arm.load == Load::Slow {
                p.seconds.max(SLOW_MIN_S)
            } else {
                p.seconds
            }),
            timeout: Duration::from_secs(10),
        };
        let before = crate::os::process_cpu(pid).map_err(|e| format!("the server's CPU time: {e}"))?;
        let sampler = PeakRss::start(pid);
        let client = std::thread::spawn(move || {
            if let Some(cpu) = client_cpu {
                crate::os::pin_to_cpu(cpu).map_err(|e| format!("pinning the client: {e}"))?;
            }
            crate::load::pubsub::run(plan)
        })
        .join()
        .map_err(|_| "the client panicked".to_string())??;
        let rss = sampler.stop();
        let used =
            crate::os::process_cpu(pid).map_err(|e| format!("the server's CPU time: {e}"))?.saturating_sub(before);
        Ok(Run {
            cpu_s_per_million: used.as_secs_f64() / (client.delivered.max(1) as f64 / 1e6),
            rss_peak_mib: rss as f64 / (1 << 20) as f64,
            throttled_periods: quota.throttled_periods(),
            client,
        })
    });
    let stopped = stop();
    let run = measured?;
    stopped?;
    Ok(run)
}

/// The largest RSS of a process, sampled every 20 ms on a thread of its own.
struct PeakRss {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl PeakRss {
    fn start(pid: u32) -> PeakRss {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            while !d.load(Ordering::SeqCst) {
                peak = peak.max(status_kib(pid, "VmRSS:") * 1024);
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        PeakRss { done, sampler }
    }

    fn stop(self) -> u64 {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        self.sampler.join().unwrap_or(0)
    }
}

/// Whether `server` runs under `load`: the floor keeps no subscriber that
/// does not read (a short write closes it), so fanout only.
fn runs_under(server: Server, load: Load) -> bool {
    server != Server::Floor || load == Load::Fanout
}

fn every_cell(p: &Params) -> Vec<Arm> {
    let cells =
        |load: Load| p.servers.iter().filter(move |&&s| runs_under(s, load)).map(move |&server| Arm { server, load });
    p.loads.iter().flat_map(|&load| cells(load)).collect()
}

pub struct Pubsub;

impl Experiment for Pubsub {
    experiment_types!(Args, Params, Arm, Run, rounds: params.rounds);

    const ENTRY: Entry =
        Entry::new("pubsub", "E7", "pub/sub in iomux serve --proto resp beside redis-server, in one CPU quota")
            .smoke("--backends epoll --reps 1 --seconds 0.3 --budget 0")
            .needs(&["redis-server"]);
    const PUBLISHED: &'static str = "nothing: the documents published nothing on pub/sub. Issue 34 asked for twice \
                                     redis-server's messages delivered per second (1 KiB to 20 subscribers, same \
                                     CPU quota); the fan-out floor shows what this machine allows, and iomux is \
                                     judged against it.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let backends = args.shared.backends.chosen(settings.full)?;
        let loads = args.loads.clone().unwrap_or_else(|| vec![Load::Fanout, Load::Slow]);
        no_repeats("--loads", &loads)?;
        let seconds = args.seconds.unwrap_or(SECONDS.pick(settings));
        if !(0.1..=600.0).contains(&seconds) {
            bail!("--seconds must be between 0.1 and 600");
        }
        let mut missing = Vec::new();
        let redis = Tool::RedisServer.find().map_err(|why| missing.push(why)).ok();
        if let Err(why) = crate::lab::rig::quota::available() {
            missing.push(format!("{why}: every cell runs in a CPU quota (root and a cgroup CPU controller)"));
        }
        let mut servers: Vec<Server> = backends.into_iter().map(Server::Iomux).collect();
        servers.extend([Server::Redis, Server::Floor]);
        Ok(Params {
            servers,
            loads,
            redis,
            missing,
            seconds,
            rounds: args.shared.rounds.rounds(settings)?,
            bound_share: BOUND_SHARE,
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Run>> {
        let mut claims = Vec::new();
        let iomux = |load: Load| -> Vec<Arm> {
            p.servers.iter().filter(|s| s.is_iomux()).map(|&server| Arm { server, load }).collect()
        };
        if p.loads.contains(&Load::Fanout) {
            let mine = iomux(Load::Fanout);
            let redis = Arm { server: Server::Redis, load: Load::Fanout };
            let mut arms = mine.clone();
            arms.push(redis);
            claims.push(
                Spec::iomux(
                    "E7 pub/sub bound: iomux best messages delivered/s / redis's (1 KiB, 20 subscribers)",
                    Needed::AtLeast(GOAL),
                    arms,
                    move |r: &RoundView<Arm, Run>| {
                        let best = mine
                            .iter()
                            .map(|a| r.get(a).map(|x| x.client.delivered_per_sec))
                            .collect::<Option<Vec<_>>>()?;
                        Some(best.into_iter().fold(0.0, f64::max) / r.get(&redis)?.client.delivered_per_sec)
                    },
                )
                .machine(),
            );
            let floor = Arm { server: Server::Floor, load: Load::Fanout };
            let rate = |r: &RoundView<Arm, Run>, a: &Arm| r.get(a).map(|x| x.client.delivered_per_sec);
            claims.push(
                Spec::iomux(
                    "E7 pub/sub bound: the fan-out floor's messages delivered/s / redis's (what this machine allows)",
                    Needed::AtLeast(GOAL),
                    vec![floor, redis],
                    move |r: &RoundView<Arm, Run>| Some(rate(r, &floor)? / rate(r, &redis)?),
                )
                .machine(),
            );
            let epoll = Arm { server: Server::Iomux(Backend::Epoll), load: Load::Fanout };
            if p.servers.contains(&epoll.server) {
                claims.push(Spec::iomux(
                    "E7 pub/sub bound: iomux-epoll messages delivered/s / the fan-out floor's",
                    Needed::AtLeast(OF_FLOOR),
                    vec![epoll, floor],
                    move |r: &RoundView<Arm, Run>| Some(rate(r, &epoll)? / rate(r, &floor)?),
                ));
            }
        }
        for &load in &p.loads {
            let all: Vec<Arm> =
                p.servers.iter().filter(|&&s| runs_under(s, load)).map(|&server| Arm { server, load }).collect();
            let what = match load {
                Load::Fanout => "E7 pub/sub fanout: runs in which a subscriber missed or got an altered message",
                Load::Slow => "E7 pub/sub slow: runs in which a reader missed a message or the slow one was kept",
            };
            claims.push(
                Spec::iomux(what, Needed::AtMost(0.0), all, move |r: &RoundView<Arm, Run>| {
                    Some(r.samples().iter().map(|(_, run)| f64::from(u8::from(!run.clean(load)))).sum())
                })
                .counted(),
            );
        }
        if p.loads.contains(&Load::Slow) {
            for arm in iomux(Load::Slow) {
                claims.push(Spec::iomux(
                    format!(
                        "E7 pub/sub slow: {} peak RSS, MiB (the slow subscriber is dropped past 32 MiB queued)",
                        arm.server
                    ),
                    Needed::AtMost(RSS_BOUND_MIB),
                    vec![arm],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&arm)?.rss_peak_mib),
                ));
            }
        }
        claims
    }

    fn metrics() -> Vec<Metric<Run>> {
        vec![
            Metric { name: "rate", unit: "1/s", higher_is_better: true, get: |r| r.client.delivered_per_sec },
            Metric { name: "cost", unit: "s", higher_is_better: false, get: |r| r.cpu_s_per_million },
        ]
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Run>) -> Vec<Arm> {
        every_cell(p)
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Run>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Run>> {
        let missing = missing_told("pubsub", &p.missing);
        let quota = crate::lab::rig::quota::available().is_ok();
        Ok(Box::new(move |a: &Arm| -> Measured<Run> {
            if !quota || (a.server == Server::Redis && p.redis.is_none()) {
                return Ok(Err(missing.clone()));
            }
            Ok(cell(p, a))
        }))
    }

    fn reference(arm: &Arm) -> bool {
        arm.server == Server::Redis
    }
}

impl Shown for Pubsub {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let intro = format!(
            "Every server pinned to the server CPU in a cgroup CPU quota of {:.0}% of one CPU, one loop \
             (`iomux serve --proto resp`, redis-server with `--io-threads 1`); the client, `iomux load --mode pubsub \
             --subscribers {SUBSCRIBERS} --msg-size {PAYLOAD} --window {WINDOW}`, on the other CPU for {} s a run \
             ({SLOW_MIN_S} s at least under slow). \
             fanout: one publisher, {SUBSCRIBERS} subscribers that read, every push checked byte for byte. slow: the \
             same and one subscriber that never reads (the server drops it past 32 MiB queued). A fresh server per \
             run. Beside them, under fanout, the floor of a fan-out (`iomux peer --server c-pubsub-floor`: each \
             read's publishes in one batch, one write of it per subscriber, nothing else). {} rounds first, each in \
             another order, then more for undecided claims.",
            p.bound_share * 100.0,
            p.seconds,
            p.rounds.first_rounds
        );
        let mut view = View { intro: vec![intro], ..View::default() };
        view.intro.extend(missing_line(&p.missing));
        for &load in &p.loads {
            let redis = env.estimate(&Arm { server: Server::Redis, load }, |r| r.client.delivered_per_sec);
            let mut t = TableView {
                caption: format!("{load}: 1 KiB messages to {SUBSCRIBERS} subscribers, every server in one quota"),
                header: [
                    "server",
                    "runs",
                    "delivered/s",
                    "/ redis",
                    "server CPU s per million",
                    "peak RSS MiB",
                    "clean runs",
                ]
                .map(String::from)
                .to_vec(),
                rows: Vec::new(),
            };
            for &server in p.servers.iter().filter(|&&s| runs_under(s, load)) {
                let arm = Arm { server, load };
                let mut name = server.to_string();
                if let Some(why) = env.note(&arm) {
                    name = format!("{name} {}", view.footnote(why));
                }
                let rate = env.estimate(&arm, |r| r.client.delivered_per_sec);
                let kept: Vec<&Run> = env.kept(&arm).collect();
                t.rows.push(vec![
                    name,
                    kept.len().to_string(),
                    shown(rate),
                    rate.zip(redis).map_or("-".into(), |(a, b)| format!("{:.2}", a.median / b.median)),
                    shown(env.estimate(&arm, |r| r.cpu_s_per_million)),
                    shown(env.estimate(&arm, |r| r.rss_peak_mib)),
                    format!("{}/{}", kept.iter().filter(|r| r.clean(load)).count(), kept.len()),
                ]);
            }
            view.tables.push(t);
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No claim asks for a cell that does not run (the floor runs under
    /// fanout alone).
    #[test]
    fn claims_ask_only_for_cells_that_run() {
        let p = Params {
            servers: vec![Server::Iomux(Backend::Epoll), Server::Iomux(Backend::Uring), Server::Redis, Server::Floor],
            loads: vec![Load::Fanout, Load::Slow],
            redis: None,
            missing: vec![],
            seconds: 1.0,
            rounds: Rounds::fixed(1, 0.0),
            bound_share: 0.5,
        };
        let cells = every_cell(&p);
        assert!(!cells.contains(&Arm { server: Server::Floor, load: Load::Slow }));
        for spec in Pubsub::claims(&p) {
            assert!(spec.arms.iter().all(|a| cells.contains(a)), "{}: {:?}", spec.quantity, spec.arms);
        }
    }
}
