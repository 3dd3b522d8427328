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

use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
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
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A network condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// The seeds' LAN: 100 Mbit/s, about 0.1 ms.
    Lan,
    /// E3 on that LAN: 40 senders of 100-byte messages, a server that only reads.
    LanSink,
    /// E2 on that LAN: 40,000 round trips by 10 connections among 640 idle ones.
    LanIdle,
    /// A WAN: 25 ms +- 5 ms round trips.
    Wan,
    /// 1% of packets lost, each direction.
    Loss1,
    /// 5% of packets lost, each direction.
    Loss5,
    /// 25% of packets reordered.
    Reorder,
    /// 1% of packets duplicated.
    Dup1,
    /// Resets injected: 0.5% of the client's packets answered with a TCP reset.
    Resets,
    /// The clients vanish: their packets dropped, then they close.
    Vanished,
    /// The server vanishes: its packets dropped, then it dies.
    ServerVanished,
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = clap::ValueEnum::to_possible_value(self).map(|v| v.get_name().to_string()).unwrap_or_default();
        f.write_str(&name)
    }
}

const ALL: [Profile; 11] = [
    Profile::Lan,
    Profile::LanSink,
    Profile::LanIdle,
    Profile::Wan,
    Profile::Loss1,
    Profile::Loss5,
    Profile::Reorder,
    Profile::Dup1,
    Profile::Resets,
    Profile::Vanished,
    Profile::ServerVanished,
];
const QUICK: [Profile; 2] = [Profile::Loss1, Profile::Vanished];
const QUICK_BACKENDS: [Backend; 2] = [Backend::Epoll, Backend::Uring];
const CONNS: usize = 20;
const PER_CONN: u64 = 100;
const MSG_SIZE: u32 = 100;
/// Reordering needs several segments of one flow in flight: the reorder
/// profile's messages span a dozen.
const REORDER_MSG_SIZE: u32 = 16_384;
/// New connections each of the load's may take in place of reset ones.
const RESET_RECONNECTS: u32 = 10;
/// Linux's least retransmission timeout (TCP_RTO_MIN), added to the
/// smoothed round trip for each timeout.
const RTO_MIN_S: f64 = 0.2;
/// The timeout of a connection that has measured no round trip yet, as
/// when its handshake lost a packet (TCP_TIMEOUT_INIT, RFC 6298).
const RTO_INIT_S: f64 = 1.0;
/// Seconds of quiet before the first keepalive probe, in the vanished profiles.
const KEEPALIVE_S: u16 = 1;
/// Idle connections whose peers vanish, by default.
const VANISHING: usize = 200;
/// A load that sees no echo for this long gives up, naming the stall.
const STALL_S: f64 = 20.0;
/// E3 on the LAN: senders, and seconds of sending.
const SINK_SENDERS: usize = 40;
const SINK_S: f64 = 4.0;
/// E2 on the LAN: active connections, idle ones, round trips.
const IDLE_ACTIVE: usize = 10;
/// 640: the largest of the documents' Z (0, 10, ..., 640, 1280, ...)
/// that select holds in one process (FD_SETSIZE 1,024), so that E2 runs
/// on all six backends.
const IDLE_Z: usize = 640;
const IDLE_ROUND_TRIPS: u64 = 40_000;
/// E3's published figure: the article's sink, NIC-bound on a 100 Mbit LAN.
const E3_PUBLISHED_MBIT_S: f64 = 97.95;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Profiles, comma-separated [default: loss1, vanished; --full: all]
    #[arg(long, value_delimiter = ',', value_enum)]
    pub profiles: Option<Vec<Profile>>,
    /// Backends, comma-separated [default: epoll, uring; --full: all]
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend)]
    pub backends: Option<Vec<Backend>>,
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
    /// lan-sink: the link's rate into the server while every sender is
    /// busy, in Mbit/s of frames (headers included, as a NIC counts).
    #[serde(default)]
    sink_mbit_s: Option<f64>,
    /// lan-idle: seconds for the round trips.
    #[serde(default)]
    seconds: Option<f64>,
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
        Profile::LanIdle => IDLE_Z + IDLE_ACTIVE,
        Profile::LanSink => SINK_SENDERS,
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

/// Whether one process on `backend` cannot watch `conns` connections:
/// select past FD_SETSIZE, its own few descriptors counted.
fn past_fd_setsize(backend: Backend, conns: usize) -> bool {
    backend == Backend::Select && conns + 8 > iomux::poller::FD_SETSIZE
}

fn vanishing(profile: Profile) -> bool {
    matches!(profile, Profile::Vanished | Profile::ServerVanished)
}

/// E2 and E3 re-run on the emulated LAN: figures of their own.
fn rerun(profile: Profile) -> bool {
    matches!(profile, Profile::LanSink | Profile::LanIdle)
}

/// The faults of a profile on this machine: the qdisc of each end of the
/// link, each namespace's nftables rules and the delay line of both.
#[derive(Default)]
struct Setting {
    qdisc: Option<String>,
    server_rules: Option<String>,
    client_rules: Option<String>,
    delay: Option<Delay>,
}

/// The echo profiles' message size.
fn msg_size(profile: Profile, p: &Params) -> u32 {
    match profile {
        Profile::Reorder => REORDER_MSG_SIZE,
        _ => p.msg_size,
    }
}

/// The longest an echo may wait under `profile`, in seconds: the
/// profile's slowest round trip (or the cell's slowest ordinary echo, when
/// longer),
/// plus the retransmission timeouts of k losses of one packet in a row,
/// plus 50 ms of scheduling on a busy machine. k is the least run that
/// leaves a longer one unlikely: k + 1 losses in a row happen somewhere
/// among the cell's n packets with chance about n p^(k+1), under 1% (k
/// is 1 without loss: one timeout, for a queue's drop or a reordering
/// taken for a loss). Each timeout doubles the last, from 0.2 s plus the
/// round trip; under loss, from 1 s: the client counts itself connected
/// when the SYN-ACK arrives, and when its ACK (and the data carrying it)
/// is lost, the server's socket waits for its own SYN-ACK timer (1 s,
/// TCP_TIMEOUT_INIT) before the first echo can begin.
fn stall_bound_s(profile: Profile, p: &Params, ordinary_echo_s: f64) -> f64 {
    // Each direction's delay is N(12.5 ms, 2.5 ms): a round trip's is
    // N(25 ms, 3.5 ms); 4 standard deviations cover it.
    let wan_rtt = 0.025 + 4.0 * 0.0025 * std::f64::consts::SQRT_2;
    let (rtt, loss): (f64, f64) = match profile {
        Profile::Wan => (wan_rtt, 0.0),
        // tbf's queue holds up to 20 ms each way.
        Profile::Lan | Profile::LanIdle | Profile::LanSink => (0.040, 0.0),
        Profile::Reorder => (0.002, 0.0),
        Profile::Loss1 => (0.001, 0.01),
        Profile::Loss5 => (0.001, 0.05),
        _ => (0.001, 0.0),
    };
    let segments = msg_size(profile, p).div_ceil(1448).max(1) as f64;
    // Data and acknowledgements each way, and each connection's handshake
    // and close.
    let packets = p.conns as f64 * (p.per_conn as f64 * segments * 4.0 + 6.0);
    let mut losses = 1;
    while loss > 0.0 && packets * loss.powi(losses + 1) >= 0.01 {
        losses += 1;
    }
    let rtt = rtt.max(ordinary_echo_s);
    let rto = if loss > 0.0 { RTO_INIT_S.max(RTO_MIN_S + rtt) } else { RTO_MIN_S + rtt };
    rtt + rto * (2f64.powi(losses) - 1.0) + 0.05
}

fn drop_share(per_mille: u32) -> String {
    format!(
        "table inet iomux_faults {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    \
         meta l4proto tcp numgen random mod 1000 < {per_mille} counter drop\n  }}\n}}\n"
    )
}

fn duplicate(to: std::net::Ipv4Addr, device: &str) -> String {
    format!(
        "table ip iomux_faults {{\n  chain post {{\n    type filter hook postrouting priority 0; policy accept;\n    \
         meta l4proto tcp numgen random mod 100 < 1 counter dup to {to} device \"{device}\"\n  }}\n}}\n"
    )
}

/// Every TCP packet dropped, both ways: what a vanished host looks like.
const DROP_ALL: &str =
    "table inet iomux_faults {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    \
                        meta l4proto tcp counter drop\n  }\n  chain output {\n    type filter hook output priority 0; \
                        policy accept;\n    meta l4proto tcp counter drop\n  }\n}\n";

/// 0.5% of the client's packets after the handshake answered with a reset.
const RESETS: &str = "table inet iomux_faults {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    \
                      meta l4proto tcp tcp flags & syn == 0 numgen random mod 1000 < 5 counter reject with tcp reset\n  }\n}\n";

fn setting(profile: Profile, netem: bool, nfqueue: bool) -> Result<Setting, String> {
    let none = Setting::default();
    let qdisc = |q: &str| Ok(Setting { qdisc: Some(q.into()), ..Setting::default() });
    let delay = |d: Delay| Ok(Setting { delay: Some(d), ..Setting::default() });
    match (profile, netem) {
        (Profile::Lan | Profile::LanSink | Profile::LanIdle, true) => qdisc("netem delay 50us rate 100mbit"),
        (Profile::Lan | Profile::LanSink | Profile::LanIdle, false) => {
            qdisc("tbf rate 100mbit burst 32kb latency 20ms")
        }
        (Profile::Wan, true) => qdisc("netem delay 12500us 2500us distribution normal"),
        (Profile::Reorder, true) => qdisc("netem delay 1ms reorder 25%"),
        (Profile::Wan | Profile::Reorder, false) if !nfqueue => {
            Err("needs netem (this kernel has none) or iptables with a working NFQUEUE target for the delay line \
                 (scripts/install-net-tools)"
                .into())
        }
        (Profile::Wan, false) => delay(Delay { delay_us: 12_500, jitter_us: 2_500, ..Delay::default() }),
        (Profile::Reorder, false) => delay(Delay { delay_us: 1_000, reorder_pct: 25.0, ..Delay::default() }),
        (Profile::Loss1, _) => {
            Ok(Setting { server_rules: Some(drop_share(10)), client_rules: Some(drop_share(10)), ..none })
        }
        (Profile::Loss5, _) => {
            Ok(Setting { server_rules: Some(drop_share(50)), client_rules: Some(drop_share(50)), ..none })
        }
        (Profile::Dup1, _) => Ok(Setting {
            server_rules: Some(duplicate(netns::CLIENT_IP, netns::SERVER_DEV)),
            client_rules: Some(duplicate(netns::SERVER_IP, netns::CLIENT_DEV)),
            ..none
        }),
        (Profile::Resets, _) => Ok(Setting { server_rules: Some(RESETS.into()), ..none }),
        // Set mid-cell, once the connections are up.
        (Profile::Vanished | Profile::ServerVanished, _) => Ok(none),
    }
}

fn mechanism(profile: Profile, netem: bool, nfqueue: bool) -> Emulation {
    let (mechanism, caveat) = match (profile, setting(profile, netem, nfqueue)) {
        (_, Err(why)) => (None, Some(why)),
        (Profile::Lan | Profile::LanSink | Profile::LanIdle, Ok(_)) if netem => {
            (Some("netem (rate, delay), both ends".into()), None)
        }
        (Profile::Lan | Profile::LanSink | Profile::LanIdle, Ok(_)) => (
            Some("tc tbf 100 Mbit/s, both ends".into()),
            Some("rate only: the 0.1 ms delay is not emulated (no netem; veth adds about 0.02 ms)".into()),
        ),
        (Profile::Wan | Profile::Reorder, Ok(_)) if netem => (Some("netem, both ends".into()), None),
        (Profile::Wan, Ok(_)) => (
            Some(
                "iomux netq (NFQUEUE from iptables at each namespace's input): each packet held N(12.5 ms, 2.5 ms), \
                 both ends"
                    .into(),
            ),
            Some("a held packet waits on a timer: released about 0.1 ms late here (docs/experiments/faults.md)".into()),
        ),
        (Profile::Reorder, Ok(_)) => (
            Some(
                "iomux netq (NFQUEUE from iptables at each namespace's input): 25% of packets passed at once, the \
                 rest held 1 ms, both ends"
                    .into(),
            ),
            None,
        ),
        (Profile::Loss1 | Profile::Loss5, Ok(_)) => {
            (Some("nftables numgen random drop at each namespace's input".into()), None)
        }
        (Profile::Dup1, Ok(_)) => (Some("nftables numgen random dup at each namespace's postrouting".into()), None),
        (Profile::Resets, Ok(_)) => (Some("nftables reject with tcp reset at the server's input".into()), None),
        (Profile::Vanished, Ok(_)) => {
            (Some("nftables drop of all TCP in the client's namespace, then the clients close".into()), None)
        }
        (Profile::ServerVanished, Ok(_)) => {
            (Some("nftables drop of all TCP in the server's namespace, then the server is killed".into()), None)
        }
    };
    Emulation { profile, mechanism, caveat }
}

impl Experiment for Faults {
    experiment_types!(Args, Params, Arm, Sample);

    const ENTRY: Entry = Entry {
        name: "faults",
        label: "E8",
        title: "echo over a faulty network: loss, duplication, resets, a slow link and vanished peers",
        smoke: &[
            "--profiles",
            "loss1,vanished",
            "--backends",
            "epoll,uring",
            "--conns",
            "5",
            "--per-conn",
            "20",
            "--vanishing",
            "20",
        ],
        needs: crate::lab::rig::tools::NET.tools,
    };
    /// The emulated links' work (tbf, nftables, veth, the delay line's
    /// NFQUEUE) runs in softirq, kernel threads and interrupts charged to
    /// no process: others are user-space processes outside the bench.
    const NETWORK_IS_OWN: bool = true;
    const PUBLISHED: &'static str = "nothing: the documents measured on a clean LAN (E2's 100 Mbit LAN, E3's sink at \
                                     97.95 Mbit/s, NIC-bound); this experiment adds the faults a server meets.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let mut profiles = args.profiles.clone().unwrap_or_else(|| match settings.full {
            true => ALL.to_vec(),
            false => QUICK.to_vec(),
        });
        profiles.dedup();
        let backends = args.backends.clone().unwrap_or_else(|| match settings.full {
            true => Backend::ALL.to_vec(),
            false => QUICK_BACKENDS.to_vec(),
        });
        let conns = args.conns.unwrap_or(CONNS);
        let per_conn = args.per_conn.unwrap_or(PER_CONN);
        let vanishing = args.vanishing.unwrap_or(VANISHING);
        if conns == 0 || per_conn == 0 || vanishing == 0 {
            return Err("--conns, --per-conn and --vanishing must be at least 1".into());
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
        })
    }

    /// The six rounds a 95% interval needs, and no more: a count of
    /// failures that is zero in six runs gains nothing from a seventh.
    /// (Zero would run one round alone; a second is shorter than any look.)
    fn budget(_: &Params, _: &Settings) -> Duration {
        Duration::from_secs(1)
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
            if profile == Profile::LanIdle {
                continue; // a figure beside E2's, no threshold of its own
            }
            if profile == Profile::LanSink {
                specs.push(
                    Spec::iomux(
                        "lan-sink: Mbit/s of frames (headers included) on the 100 Mbit/s link into a server that only \
                         reads, slowest backend",
                        Needed::AtLeast(90.0),
                        arms,
                        move |r: &RoundView<Arm, Sample>| {
                            of_round
                                .iter()
                                .map(|a| r.get(a).and_then(|s| s.sink_mbit_s))
                                .try_fold(f64::INFINITY, |m, v| Some(m.min(v?)))
                        },
                    )
                    .documents("a server that only reads is bound by the 100 Mbit/s link (the article: 97.95 Mbit/s)"),
                );
                continue;
            }
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

    fn first_rounds(_: &Params) -> usize {
        1
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
                Profile::LanSink => sink_cell(&net, a.backend),
                Profile::LanIdle => idle_cell(&net, a.backend),
                _ => echo_cell(&net, p, *a),
            };
            net.set_faults(Side::Server, None, None, None)?;
            net.set_faults(Side::Client, None, None, None)?;
            sample.map(Ok)
        }))
    }
}

impl Shown for Faults {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View {
            intro: vec![format!(
                "Server (iomux serve, echo) and load (iomux load, {} client) in two network namespaces joined by \
                 a veth pair; each profile's faults set inside them. Echo profiles: {} connections x {} messages \
                 of {} B ({REORDER_MSG_SIZE} B under reorder, so that a flow has segments to reorder), every byte \
                 checked by the load; an echo stalled when it took longer than the profile's round trip and the \
                 retransmission timeouts of the longest run of losses the cell may meet explain (the bound). \
                 Vanished profiles: {} idle connections, then every TCP \
                 packet of one side dropped and that side gone; --keepalive {} s on the side that must let go \
                 (reclaimed within {:.1} s by design): the server, on the row's backend, under vanished; the \
                 load, on the row's backend, under server-vanished (the killed server runs epoll). select holds \
                 more than FD_SETSIZE of them as several processes (--procs, about 800 connections each). Medians of the runs; counts are totals over all runs.",
                p.load_backend, p.conns, p.per_conn, p.msg_size, p.vanishing, p.keepalive_s, p.reclaim_bound_s
            )],
            ..View::default()
        };
        if let Some(why) = &p.unavailable {
            view.intro.push(format!("Not run here: {why}."));
        }
        let dropped: u64 = env.takes.iter().map(|t| t.value.delay_line_drops).sum();
        if dropped > 0 {
            view.intro.push(format!(
                "The delay line dropped {dropped} packets in all (its queue full): loss no profile asked for."
            ));
        }
        let mut mechanisms = TableView {
            caption: "How each profile was emulated on this machine:".into(),
            header: ["profile", "mechanism", "left out"].map(String::from).to_vec(),
            rows: Vec::new(),
        };
        for e in &p.emulations {
            mechanisms.rows.push(vec![
                e.profile.to_string(),
                e.mechanism.clone().unwrap_or_else(|| "not emulated".into()),
                e.caveat.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        let mut results = TableView {
            caption: "Per profile and backend:".into(),
            header: [
                "profile",
                "backend",
                "runs",
                "echoes",
                "bytes checked",
                "mismatched",
                "closed early (reset; reconnected)",
                "unanswered",
                "retransmits",
                "p50 us",
                "p99 us",
                "p99.9 us",
                "max us",
                "stalls (bound s)",
                "server CPU s",
                "vanished",
                "reclaim s",
                "left open",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        for &profile in p.profiles.iter().filter(|&&pr| !rerun(pr)) {
            for &backend in &p.backends {
                let arm = Arm { profile, backend };
                if let Some(n) = env.note(&arm) {
                    let mark = view.footnote(n);
                    results.rows.push(vec![profile.to_string(), backend.to_string(), format!("n/a {mark}")]);
                    continue;
                }
                let runs: Vec<&Sample> = env.kept(&arm).collect();
                let total = |f: fn(&Sample) -> u64| runs.iter().map(|s| f(s)).sum::<u64>().to_string();
                let med = |f: fn(&Sample) -> f64| shown(env.estimate(&arm, f));
                results.rows.push(vec![
                    profile.to_string(),
                    backend.to_string(),
                    runs.len().to_string(),
                    total(|s| s.echoes),
                    total(|s| s.bytes_checked),
                    total(|s| s.mismatches),
                    format!("{} ({}; {})", total(|s| s.closed_early), total(|s| s.resets), total(|s| s.reconnects)),
                    total(|s| s.unanswered),
                    total(|s| s.retransmits),
                    med(|s| s.p50_us.unwrap_or(f64::NAN)),
                    med(|s| s.p99_us.unwrap_or(f64::NAN)),
                    med(|s| s.p999_us.unwrap_or(f64::NAN)),
                    med(|s| s.max_us.unwrap_or(f64::NAN)),
                    match vanishing(profile) {
                        true => "-".into(),
                        false => format!("{} ({})", total(|s| s.stalled), med(|s| s.stall_bound_s.unwrap_or(f64::NAN))),
                    },
                    med(|s| s.server_cpu_s.unwrap_or(f64::NAN)),
                    total(|s| s.vanished),
                    med(|s| s.reclaim_s),
                    total(|s| s.left_open),
                ]);
            }
        }
        view.tables = vec![mechanisms];
        if !results.rows.is_empty() {
            view.tables.push(results); // none when E2 and E3 alone ran
        }
        if let Some(lan) = lan_table(env, &mut view) {
            view.tables.push(lan);
        }
        view.svg = plot(env)?;
        Ok(view)
    }
}

/// E3 and E2 on the emulated LAN, a row per backend, beside the
/// documents' figures.
fn lan_table(env: &Envelope<Params, Arm, Sample>, view: &mut View) -> Option<TableView> {
    let p = &env.params;
    let (sink, idle) = (p.profiles.contains(&Profile::LanSink), p.profiles.contains(&Profile::LanIdle));
    if !sink && !idle {
        return None;
    }
    let mut table = TableView {
        caption: format!(
            "E3 and E2 again, on the emulated 100 Mbit/s LAN: E3's {SINK_SENDERS} senders of 100-byte messages for \
             {SINK_S} s to a server that only reads (the article: {E3_PUBLISHED_MBIT_S} Mbit/s, NIC-bound), and \
             E2's {IDLE_ROUND_TRIPS} round trips by {IDLE_ACTIVE} connections among {IDLE_Z} idle ones (the epoll \
             article: a plot, poll's time growing with idle connections, epoll's flat):"
        ),
        header: ["backend", "E3 sink Mbit/s", "E2 seconds", "E2 p99 us"].map(String::from).to_vec(),
        rows: Vec::new(),
    };
    for &backend in &p.backends {
        let mut cell = |profile: Profile, on: bool, f: fn(&Sample) -> f64| -> String {
            let arm = Arm { profile, backend };
            match (on, env.note(&arm)) {
                (false, _) => "-".into(),
                (true, Some(n)) => format!("n/a {}", view.footnote(n)),
                (true, None) => shown(env.estimate(&arm, f)),
            }
        };
        let row = vec![
            backend.to_string(),
            cell(Profile::LanSink, sink, |s| s.sink_mbit_s.unwrap_or(f64::NAN)),
            cell(Profile::LanIdle, idle, |s| s.seconds.unwrap_or(f64::NAN)),
            cell(Profile::LanIdle, idle, |s| s.p99_us.unwrap_or(f64::NAN)),
        ];
        table.rows.push(row);
    }
    Some(table)
}

/// p99 echo latency per profile (or, with vanished profiles alone, the
/// seconds to reclaim), a bar per backend.
fn plot(env: &Envelope<Params, Arm, Sample>) -> CliResult<Option<String>> {
    let p = &env.params;
    let echo: Vec<Profile> = p.profiles.iter().copied().filter(|&pr| !vanishing(pr) && !rerun(pr)).collect();
    type Get = fn(&Sample) -> f64;
    let (profiles, get, title, y): (Vec<Profile>, Get, &str, &str) = match echo.is_empty() {
        false => (
            echo,
            |s| s.p99_us.map_or(f64::NAN, |us| us / 1000.0),
            "E8: p99 echo latency under each profile",
            "p99 latency (ms)",
        ),
        true => (
            p.profiles.iter().copied().filter(|&pr| vanishing(pr)).collect(),
            |s| s.reclaim_s,
            "E8: seconds to reclaim vanished peers' connections",
            "seconds",
        ),
    };
    if profiles.is_empty() || p.unavailable.is_some() {
        return Ok(None);
    }
    let groups: Vec<String> = profiles.iter().map(Profile::to_string).collect();
    let series: Vec<BarSeries> = p
        .backends
        .iter()
        .map(|&backend| BarSeries {
            name: backend.to_string(),
            values: profiles
                .iter()
                .map(|&profile| {
                    env.estimate(&Arm { profile, backend }, get)
                        .map_or((f64::NAN, f64::NAN, f64::NAN), |e| (e.median, e.lo, e.hi))
                })
                .collect(),
        })
        .collect();
    grouped_bars(title, "profile", y, &groups, &series).map(Some)
}

/// `iomux load` in the client's namespace with `args`' flags, its result
/// written to a file of its own.
struct LoadChild {
    child: Child,
    json: std::path::PathBuf,
    /// Its stderr, for the message of a load that fails.
    said: std::path::PathBuf,
}

impl LoadChild {
    fn start(net: &Net, args: &crate::load::LoadArgs) -> CliResult<LoadChild> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the iomux executable: {e}"))?;
        let stem = std::env::temp_dir().join(format!("iomux-e8-{}-{}", std::process::id(), fastrand::u64(..)));
        let (json, said) = (stem.with_extension("json"), stem.with_extension("stderr"));
        let stderr = std::fs::File::create(&said).map_err(|e| format!("creating {}: {e}", said.display()))?;
        let mut args = args.clone();
        args.json = Some(json.clone());
        let child = net
            .command(Side::Client, exe.as_os_str())
            .arg("load")
            .args(args.to_cli())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("starting iomux load in the client's namespace: {e}"))?;
        Ok(LoadChild { child, json, said })
    }

    fn sockets(&self) -> usize {
        sockets(self.child.id())
    }

    /// Waits up to `limit` for the load to end, then reads its result;
    /// None when it had to be killed (its own --timeout ends a stalled
    /// run: this limit only catches a load that hangs).
    fn finish(mut self, limit: Duration) -> CliResult<Option<LoadResult>> {
        let deadline = Instant::now() + limit;
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                eprintln!("faults: iomux load did not end within {} s: killed, counted as hung", limit.as_secs());
                self.kill();
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&self.json);
        let said = std::fs::read_to_string(&self.said).unwrap_or_default();
        self.remove_files();
        let text = text.map_err(|_| {
            let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr");
            format!("iomux load in the client's namespace wrote no result: {}", last.trim())
        })?;
        Ok(Some(serde_json::from_str(&text)?))
    }

    fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.json);
        let _ = std::fs::remove_file(&self.said);
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.remove_files();
    }
}

/// A load dropped is killed (the clients gone at once) and its files removed.
impl Drop for LoadChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sockets process `pid` and its children (`--procs`' workers) hold now.
fn sockets(pid: u32) -> usize {
    let own = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.to_string_lossy().starts_with("socket:"))
            .count()
    });
    own + children(pid).into_iter().map(sockets).sum::<usize>()
}

/// How soon a server with `--keepalive k` has closed a connection whose
/// peer vanished.
fn reclaimed_within(k: u16) -> Duration {
    Keepalive::after(Duration::from_secs(u64::from(k))).reclaimed_within()
}

/// Polls `count` until it is at most `target` or `limit` passes: the
/// seconds it took (the limit if it never got there) and what was left.
fn wait_down(count: impl Fn() -> usize, target: usize, limit: Duration) -> (f64, u64) {
    let start = Instant::now();
    loop {
        let now = count();
        if now <= target {
            return (start.elapsed().as_secs_f64(), 0);
        }
        if start.elapsed() > limit {
            return (limit.as_secs_f64(), (now - target) as u64);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn retransmits(net: &Net) -> CliResult<u64> {
    Ok(net.retransmits(Side::Server)? + net.retransmits(Side::Client)?)
}

fn server_flags(keepalive: u16) -> Vec<String> {
    let mut flags = vec!["--keepalive".to_string(), keepalive.to_string()];
    if let (Some(cpu), _) = cell::cpus() {
        flags.extend(["--cpu".into(), cpu.to_string()]);
    }
    flags
}

/// Echo through the profile's faults: every byte checked, the longest
/// echo held against the profile's bound.
fn echo_cell(net: &Net, p: &Params, arm: Arm) -> CliResult<Sample> {
    let backend = arm.backend;
    // With keepalive, as deployed: a connection the faults left half-open
    // (a reset that reached only the client) is reclaimed too. Its user
    // timeout must outlast the retransmissions the profile explains, or
    // the server would give up on connections TCP recovers (under 5%
    // loss, --keepalive 1's 4 s ended a connection in 2 of 36 cells).
    let bound = stall_bound_s(arm.profile, p, 0.0);
    let keepalive = (p.keepalive_s..=600).find(|&k| reclaimed_within(k).as_secs_f64() > bound).unwrap_or(600);
    let reclaim_limit = reclaimed_within(keepalive) * 3;
    let server = ServerChild::start_in(net, backend, "echo", &server_flags(keepalive))?;
    let own = sockets(server.pid);
    let mut args = server.load_args(cell::LOAD_BACKEND, cell::cpus().1);
    args.conns = p.conns;
    args.per_conn = Some(p.per_conn);
    args.msg_size = msg_size(arm.profile, p);
    if arm.profile == Profile::Resets {
        // As a client would: a reset connection is replaced and its
        // unanswered message sent again (counted, and in its latency).
        args.reconnect = RESET_RECONNECTS;
    }
    // Long enough to tell a stall the bound explains from one it does not.
    args.timeout = STALL_S.max(bound + 5.0);
    let before = retransmits(net)?;
    let Some(result) = LoadChild::start(net, &args)?.finish(Duration::from_secs(600))? else {
        return Ok(Sample { hung: 1, ..Sample::default() });
    };
    let retrans = retransmits(net)?.saturating_sub(before);
    let reclaim = wait_down(|| sockets(server.pid), own, reclaim_limit.max(Duration::from_secs(10)));
    let mut sample = echoed(&result);
    net.check_delay_lines()?;
    sample.delay_line_drops = net.delay_line_drops()?;
    // The slowest ordinary echo: the 99th percentile, or under loss the
    // median (there, the 99th is a retransmission already).
    let ordinary_us = match arm.profile {
        Profile::Loss1 | Profile::Loss5 => sample.p50_us,
        _ => sample.p99_us,
    };
    let bound = stall_bound_s(arm.profile, p, ordinary_us.unwrap_or(0.0) / 1e6);
    sample.stall_bound_s = Some(bound);
    sample.stalled = sample.max_us.is_some_and(|us| us / 1e6 > bound) as u64;
    with_server(server, retrans, reclaim, sample)
}

/// `rest` with the cell's retransmits and reclaim time, and the server's
/// CPU and vanished count once it is stopped.
fn with_server(server: ServerChild, retransmits: u64, reclaim: (f64, u64), rest: Sample) -> CliResult<Sample> {
    let stats = server.stop()?.typed;
    let (reclaim_s, left_open) = reclaim;
    Ok(Sample {
        retransmits,
        server_cpu_s: Some(stats.cpu_s()),
        vanished: stats.vanished,
        reclaim_s,
        left_open,
        ..rest
    })
}

/// What an echo load's result says: echoes, checked bytes, errors by
/// name, latency.
fn echoed(result: &LoadResult) -> Sample {
    let latency = |f: fn(&crate::load::result::Latency) -> f64| result.latency.as_ref().map(f);
    let e = &result.errors;
    Sample {
        echoes: result.echoes,
        bytes_checked: result.echo_bytes,
        mismatches: e.mismatches,
        closed_early: e.unexpected_closes,
        resets: e.resets,
        reconnects: e.reconnects,
        unanswered: e.unanswered,
        connect_errors: e.connect.values().sum(),
        p50_us: latency(|l| l.p50_us),
        p99_us: latency(|l| l.p99_us),
        p999_us: latency(|l| l.p999_us),
        max_us: latency(|l| l.max_us),
        ..Sample::default()
    }
}

/// E3 on the LAN: senders for SINK_S seconds to a server that only reads.
fn sink_cell(net: &Net, backend: Backend) -> CliResult<Sample> {
    let server = ServerChild::start_in(net, backend, "sink", &server_flags(0))?;
    let mut args = server.load_args(cell::LOAD_BACKEND, cell::cpus().1);
    args.conns = SINK_SENDERS;
    args.mode = crate::load::LoadMode::Sink;
    args.duration = Some(SINK_S);
    let own = sockets(server.pid);
    let before = retransmits(net)?;
    let start = Instant::now();
    let load = LoadChild::start(net, &args)?;
    // The link's rate while every sender is busy: the server end's frames
    // from 1 s in (connected, windows open) to half a second before the
    // senders stop (their buffers still drain after that).
    let at =
        |s: f64| std::thread::sleep((start + Duration::from_secs_f64(s)).saturating_duration_since(Instant::now()));
    at(1.0);
    let (from, bytes_from) = (Instant::now(), net.rx_bytes(Side::Server)?);
    at(SINK_S - 0.5);
    let (to, bytes_to) = (Instant::now(), net.rx_bytes(Side::Server)?);
    let link_mbit_s = (bytes_to - bytes_from) as f64 * 8.0 / to.duration_since(from).as_secs_f64() / 1e6;
    let Some(result) = load.finish(Duration::from_secs(120))? else {
        return Ok(Sample { hung: 1, ..Sample::default() });
    };
    let (_, left_open) = wait_down(|| sockets(server.pid), own, Duration::from_secs(30));
    let retrans = retransmits(net)?.saturating_sub(before);
    let stats = server.stop()?.typed;
    let e = &result.errors;
    Ok(Sample {
        closed_early: e.unexpected_closes,
        connect_errors: e.connect.values().sum(),
        retransmits: retrans,
        server_cpu_s: Some(stats.cpu_s()),
        sink_mbit_s: Some(link_mbit_s),
        left_open,
        ..Sample::default()
    })
}

/// E2 on the LAN: round trips by a few connections among many idle ones.
fn idle_cell(net: &Net, backend: Backend) -> CliResult<Sample> {
    let server = ServerChild::start_in(net, backend, "echo", &server_flags(0))?;
    let mut args = server.load_args(cell::LOAD_BACKEND, cell::cpus().1);
    args.conns = IDLE_ACTIVE;
    args.idle = IDLE_Z;
    args.requests = Some(IDLE_ROUND_TRIPS);
    args.timeout = STALL_S;
    let Some(result) = LoadChild::start(net, &args)?.finish(Duration::from_secs(300))? else {
        return Ok(Sample { hung: 1, ..Sample::default() });
    };
    let stats = server.stop()?.typed;
    Ok(Sample { server_cpu_s: Some(stats.cpu_s()), seconds: Some(result.seconds), ..echoed(&result) })
}

/// A load holding `p.vanishing` idle connections to `server`, started
/// and waited for until the server has accepted them all.
fn hold(net: &Net, p: &Params, server: &ServerChild, backend: Backend, keepalive: u16) -> CliResult<LoadChild> {
    let mut args = server.load_args(backend, cell::cpus().1);
    args.procs = u16::try_from(procs(backend, p.vanishing)).unwrap_or(u16::MAX);
    args.conns = 0;
    args.idle = p.vanishing;
    args.duration = Some(3600.0);
    args.keepalive = keepalive;
    let own = sockets(server.pid);
    let load = LoadChild::start(net, &args)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while sockets(server.pid) < own + p.vanishing {
        if Instant::now() > deadline || !std::path::Path::new(&format!("/proc/{}", server.pid)).exists() {
            drop(load);
            return Err(format!(
                "the server accepted only {} of {} connections in 120 s (or died)",
                sockets(server.pid).saturating_sub(own),
                p.vanishing
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(load)
}

/// The clients vanish: every TCP packet in their namespace dropped, then
/// they close; the server (--keepalive) must close every connection.
fn clients_vanish(net: &Net, p: &Params, backend: Backend) -> CliResult<Sample> {
    let mut flags = server_flags(p.keepalive_s);
    flags.extend(["--procs".into(), procs(backend, p.vanishing).to_string()]);
    let server = ServerChild::start_in(net, backend, "echo", &flags)?;
    let own = sockets(server.pid);
    let load = hold(net, p, &server, cell::LOAD_BACKEND, 0)?;
    let before = retransmits(net)?;
    net.set_faults(Side::Client, None, Some(DROP_ALL), None)?;
    drop(load); // the clients close: their FIN is dropped
    let limit = Duration::from_secs_f64(p.reclaim_bound_s * 3.0);
    let reclaim = wait_down(|| sockets(server.pid), own, limit);
    let retrans = retransmits(net)?.saturating_sub(before);
    with_server(server, retrans, reclaim, Sample::default())
}

/// The server vanishes: every TCP packet in its namespace dropped, then it
/// dies; the load (--keepalive) must close every connection and end.
/// The arm's backend is the load's: the server, killed, runs epoll.
fn server_vanishes(net: &Net, p: &Params, backend: Backend) -> CliResult<Sample> {
    let server = ServerChild::start_in(net, Backend::Epoll, "echo", &server_flags(0))?;
    let load = hold(net, p, &server, backend, p.keepalive_s)?;
    let before = retransmits(net)?;
    net.set_faults(Side::Server, None, Some(DROP_ALL), None)?;
    drop(server); // killed: the host is gone
    let limit = Duration::from_secs_f64(p.reclaim_bound_s * 3.0);
    let (reclaim_s, left_open) = wait_down(|| load.sockets(), 0, limit);
    let retrans = retransmits(net)?.saturating_sub(before);
    let Some(result) = load.finish(Duration::from_secs(10))? else {
        return Ok(Sample { hung: 1, reclaim_s, left_open, ..Sample::default() });
    };
    Ok(Sample {
        closed_early: result.errors.unexpected_closes,
        resets: result.errors.resets,
        retransmits: retrans,
        vanished: result.errors.vanished,
        reclaim_s,
        left_open,
        ..Sample::default()
    })
}
