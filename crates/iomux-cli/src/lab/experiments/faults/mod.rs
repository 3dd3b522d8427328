//! E8 `faults`: echo over a faulty network on every backend. Server and
//! load run in two network namespaces of the run's own, joined by a veth
//! pair (lab/rig/netns.rs); each profile sets its faults there with the
//! mechanism this kernel has (netem where it exists; else tbf for rate,
//! nftables for loss, duplication, resets and drops, and the lab's NFQUEUE
//! delay line, `iomux netq`, for delay and reordering). Every echoed
//! byte is checked by the load; the table gives latency, the kernel's
//! retransmits, errors by name, server CPU, and how long the server took
//! to let go of the connections.
//!
//! Two profiles measure vanished peers: the clients' packets are dropped,
//! then the clients close (their FIN never arrives), and `iomux serve
//! --keepalive K` must close every connection; or the server's packets
//! are dropped and it dies, and `iomux load --keepalive K` must.

mod cells;
mod profiles;
mod view;
use anyhow::bail;
use cells::*;
use profiles::*;

use super::past_fd_setsize;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{BackendDefaults, RoundDefaults, SharedFlags};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::harness::{by_name, by_names, envelope::Envelope};
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot::{grouped_bars, BarSeries};
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::cell;
use crate::lab::rig::child::{children, ServerChild};
use crate::lab::rig::netns::{self, Delay, Net, Side};
use crate::lab::Settings;
use crate::load::result::LoadResult;
use crate::CliResult;
use iomux::runtime::Keepalive;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The defaults of the flags experiments share.
#[derive(Clone, Debug, Default)]
pub struct Defaults;

impl BackendDefaults for Defaults {}

/// The six rounds a 95% interval needs, and no more: a count of failures
/// that is zero in six runs gains nothing from a seventh. One round first:
/// the rest are the free rounds of undecided claims, which a budget above
/// zero allows (a second, quick; three with `--full`), and a second is
/// shorter than any look.
impl RoundDefaults for Defaults {
    const REPS: (usize, usize) = (1, 1);
    const BUDGET_S: f64 = 3.0;
    const BUDGET_NOTE: &'static str = "; zero failures in six rounds decide a count, so more rarely run";
}

/// The rounds of results written before `--reps` and `--budget` existed.
fn rounds_before_flags() -> Rounds {
    Rounds::fixed(1, 1.0)
}

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Profiles, comma-separated [default: loss1, vanished; --full: all]
    #[arg(long, value_delimiter = ',', value_enum)]
    pub profiles: Option<Vec<Profile>>,
    #[command(flatten)]
    pub shared: SharedFlags<Defaults>,
    /// Echoing connections per cell [default: 20]
    #[arg(long)]
    pub conns: Option<usize>,
    /// Messages each echoing connection sends [default: 100]
    #[arg(long)]
    pub per_conn: Option<u64>,
    /// Connections whose peer vanishes, in the vanished profiles [default: 200]
    #[arg(long)]
    pub vanishing: Option<usize>,
    /// --keepalive of the server (vanished) or the load (server-vanished), seconds [default: 1]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=600))]
    pub keepalive: Option<u16>,
}

/// How a profile is emulated here, or why it cannot be.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Emulation {
    profile: Profile,
    /// "nftables numgen drop", ..., or None when it cannot be emulated.
    mechanism: Option<String>,
    /// Why not, or what of the profile is left out.
    caveat: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    profiles: Vec<Profile>,
    #[serde(with = "by_names")]
    backends: Vec<Backend>,
    conns: usize,
    per_conn: u64,
    msg_size: u32,
    vanishing: usize,
    keepalive_s: u16,
    /// Seconds within which keepalive reclaims a vanished peer.
    reclaim_bound_s: f64,
    #[serde(with = "by_name")]
    load_backend: Backend,
    emulations: Vec<Emulation>,
    /// The kernel has netem (probed in a throwaway namespace).
    netem: bool,
    /// iptables is installed: its NFQUEUE target feeds the delay line.
    #[serde(default)]
    nfqueue: bool,
    /// Why nothing can run here (not root, tools missing).
    unavailable: Option<String>,
    #[serde(default = "rounds_before_flags")]
    rounds: Rounds,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    profile: Profile,
    #[serde(with = "by_name")]
    backend: Backend,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, {}", self.profile, self.backend)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    echoes: u64,
    /// Bytes echoed back and checked.
    bytes_checked: u64,
    mismatches: u64,
    closed_early: u64,
    resets: u64,
    /// Connections the load opened in place of reset ones (resets: `load
    /// --reconnect`).
    #[serde(default)]
    reconnects: u64,
    unanswered: u64,
    connect_errors: u64,
    // None where not measured (no echoes; a killed server's CPU).
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    max_us: Option<f64>,
    /// Segments the kernel retransmitted, both namespaces.
    retransmits: u64,
    server_cpu_s: Option<f64>,
    /// Connections closed because their peer vanished (the server's count,
    /// or the load's in server-vanished).
    vanished: u64,
    /// Seconds from the end of the load (or the peers' vanishing) until the
    /// side that must let go holds none of the connections; the limit of
    /// the wait when some were still open (`left_open` counts them).
    reclaim_s: f64,
    left_open: u64,
    /// 1 when the load did not end within its limit and was killed.
    #[serde(default)]
    hung: u64,
    /// 1 when the longest echo took longer than the profile's worst
    /// retransmission explains (`stall_bound_s`).
    #[serde(default)]
    stalled: u64,
    /// That bound, in seconds.
    #[serde(default)]
    stall_bound_s: Option<f64>,
    /// Packets the delay line dropped (its queue full): loss the profile
    /// did not ask for.
    #[serde(default)]
    delay_line_drops: u64,
}

impl Sample {
    /// Bytes lost or corrupted, stalls and unexplained closes: what the
    /// profile must never cause. Under injected resets, a reset connection
    /// loses what it had in flight by design: only corruption counts.
    fn failures(&self, profile: Profile) -> u64 {
        let never = self.mismatches + self.left_open + self.hung + self.stalled;
        match profile {
            Profile::Resets => never,
            _ => never + self.unanswered + self.closed_early + self.connect_errors,
        }
    }
}

pub struct Faults;

/// Why `arm`'s server cannot hold its connections: select watches only
/// fd numbers below FD_SETSIZE (the server's own few descriptors besides).
/// The vanished profiles split them among processes instead (`procs`).
fn cannot_hold(p: &Params, arm: Arm) -> Option<String> {
    let conns = match arm.profile {
        Profile::Vanished | Profile::ServerVanished => return None,
        _ => p.conns,
    };
    past_fd_setsize(arm.backend, conns)
        .then(|| format!("select: {conns} connections need fd numbers past FD_SETSIZE ({})", iomux::poller::FD_SETSIZE))
}

/// Processes that hold `conns` connections on `backend`: one, but for
/// select past FD_SETSIZE, about 800 each (SO_REUSEPORT's share of a
/// server's, `--procs`' of a load's: never near 1,024 in one).
fn procs(backend: Backend, conns: usize) -> usize {
    match past_fd_setsize(backend, conns) {
        true => conns.div_ceil(800),
        false => 1,
    }
}

impl Experiment for Faults {
    experiment_types!(Args, Params, Arm, Sample, rounds: params.rounds);

    const ENTRY: Entry = Entry::new(
        "faults",
        "E8",
        "echo over a faulty network: loss, duplication, resets, a slow link and vanished peers",
    )
    .smoke(
        "--profiles loss1,vanished --backends epoll,uring --conns 5 --per-conn 20 --vanishing 20 --reps 1 --budget 0",
    )
    .needs(crate::lab::rig::tools::NET.tools);
    /// The emulated links' work (tbf, nftables, veth, the delay line's
    /// NFQUEUE) runs in softirq, kernel threads and interrupts charged to
    /// no process: others are user-space processes outside the bench.
    fn network_is_own(_: &Arm) -> bool {
        true
    }
    const PUBLISHED: &'static str = "nothing: the documents measured on a clean LAN (E2's 100 Mbit LAN, E3's sink at \
                                     97.95 Mbit/s, NIC-bound: both run on the emulated LAN with --network lan); this \
                                     experiment adds the faults a server meets.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let mut profiles = args.profiles.clone().unwrap_or_else(|| match settings.full {
            true => ALL.to_vec(),
            false => QUICK.to_vec(),
        });
        profiles.dedup();
        let backends = args.shared.backends.chosen(settings.full)?;
        let conns = args.conns.unwrap_or(CONNS);
        let per_conn = args.per_conn.unwrap_or(PER_CONN);
        let vanishing = args.vanishing.unwrap_or(VANISHING);
        if conns == 0 || per_conn == 0 || vanishing == 0 {
            bail!("--conns, --per-conn and --vanishing must be at least 1");
        }
        let keepalive_s = args.keepalive.unwrap_or(KEEPALIVE_S);
        cell::require_loopback("E8", conns.max(vanishing))?;
        let (unavailable, netns::Emulators { netem, nfqueue }) = match netns::probe() {
            Ok(found) => (None, found),
            Err(why) => (Some(why), netns::Emulators::default()),
        };
        let bound = reclaimed_within(keepalive_s);
        Ok(Params {
            emulations: profiles.iter().map(|&p| mechanism(p, netem, nfqueue)).collect(),
            profiles,
            backends,
            conns,
            per_conn,
            msg_size: MSG_SIZE,
            vanishing,
            keepalive_s,
            // The probes' own time, a second for the timers' slack, and the
            // time to accept the connections before they vanish.
            reclaim_bound_s: bound.as_secs_f64() + 2.0 + vanishing as f64 / 2_000.0,
            load_backend: cell::LOAD_BACKEND,
            netem,
            nfqueue,
            unavailable,
            rounds: args.shared.rounds.rounds(settings)?,
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        let emulated = |profile: Profile| {
            p.emulations.iter().any(|e| e.profile == profile && e.mechanism.is_some()) && p.unavailable.is_none()
        };
        let mut specs = Vec::new();
        for &profile in p.profiles.iter().filter(|&&pr| emulated(pr)) {
            // Over the backends that can hold the connections (the others
            // are n/a, with the reason, in the table).
            let arms: Vec<Arm> = p
                .backends
                .iter()
                .map(|&backend| Arm { profile, backend })
                .filter(|&a| cannot_hold(p, a).is_none())
                .collect();
            if arms.is_empty() {
                continue; // nothing to judge it on: every cell is n/a
            }
            let of_round = arms.clone();
            if vanishing(profile) {
                let who = if profile == Profile::Vanished { "server" } else { "load" };
                specs.push(Spec::iomux(
                    format!(
                        "{profile}: seconds until the {who} (--keepalive {}) holds none of {} vanished peers' \
                         connections, slowest backend",
                        p.keepalive_s, p.vanishing
                    ),
                    Needed::AtMost(p.reclaim_bound_s),
                    arms,
                    move |r: &RoundView<Arm, Sample>| {
                        of_round.iter().map(|a| r.get(a).map(|s| s.reclaim_s)).try_fold(0.0f64, |m, v| Some(m.max(v?)))
                    },
                ));
            } else {
                let what = match profile {
                    Profile::Resets => "corrupted echoes",
                    _ => "bytes lost or corrupted, stalls and early closes",
                };
                specs.push(Spec::iomux(
                    format!("{profile}: {what}, all backends"),
                    Needed::AtMost(0.0),
                    arms,
                    move |r: &RoundView<Arm, Sample>| {
                        of_round.iter().map(|a| r.get(a).map(|s| s.failures(profile) as f64)).sum()
                    },
                ));
            }
        }
        specs
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![
            Metric { name: "p99 latency", unit: "us", higher_is_better: false, get: |s| s.p99_us.unwrap_or(f64::NAN) },
            Metric {
                name: "server CPU",
                unit: "s",
                higher_is_better: false,
                get: |s| s.server_cpu_s.unwrap_or(f64::NAN),
            },
            Metric { name: "reclaim", unit: "s", higher_is_better: false, get: |s| s.reclaim_s },
        ]
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Sample>) -> Vec<Arm> {
        p.profiles.iter().flat_map(|&profile| p.backends.iter().map(move |&backend| Arm { profile, backend })).collect()
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Sample>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        let net = match &p.unavailable {
            // Every arm carries why, and none is tried again.
            Some(why) => return Ok(Box::new(move |_: &Arm| Ok(Err(why.clone())))),
            None => Net::create()?,
        };
        Ok(Box::new(move |a: &Arm| -> Measured<Sample> {
            if let Some(why) = cannot_hold(p, *a) {
                return Ok(Err(why));
            }
            let faults = match setting(a.profile, p.netem, p.nfqueue) {
                Ok(f) => f,
                Err(why) => return Ok(Err(why)),
            };
            let (qdisc, delay) = (faults.qdisc.as_deref(), faults.delay.as_ref());
            net.set_faults(Side::Server, qdisc, faults.server_rules.as_deref(), delay)?;
            net.set_faults(Side::Client, qdisc, faults.client_rules.as_deref(), delay)?;
            let sample = match a.profile {
                // Namespaces of their own: thousands of vanished sockets
                // still closing (their FINs dropped) would retransmit into
                // the next cell once the rules are gone.
                Profile::Vanished => clients_vanish(&Net::create()?, p, a.backend),
                Profile::ServerVanished => server_vanishes(&Net::create()?, p, a.backend),
                _ => echo_cell(&net, p, *a),
            };
            net.set_faults(Side::Server, None, None, None)?;
            net.set_faults(Side::Client, None, None, None)?;
            sample.map(Ok)
        }))
    }
}
