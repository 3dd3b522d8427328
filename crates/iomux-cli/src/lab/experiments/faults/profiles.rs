//! E8's fault profiles, and the qdisc, nftables rules and delays that make each.

use super::*;

/// A network condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// The seeds' LAN: 100 Mbit/s, about 0.1 ms.
    Lan,
    /// Retired: E3 on the LAN is `iomux bench sink --network lan` now;
    /// kept so that older results still read.
    #[value(skip)]
    LanSink,
    /// Retired: E2 on the LAN is `iomux bench idle --network lan` now.
    #[value(skip)]
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

crate::lab::harness::display_as_value!(Profile);

pub(super) const ALL: [Profile; 9] = [
    Profile::Lan,
    Profile::Wan,
    Profile::Loss1,
    Profile::Loss5,
    Profile::Reorder,
    Profile::Dup1,
    Profile::Resets,
    Profile::Vanished,
    Profile::ServerVanished,
];
pub(super) const QUICK: [Profile; 2] = [Profile::Loss1, Profile::Vanished];
pub(super) const CONNS: usize = 20;
pub(super) const PER_CONN: u64 = 100;
pub(super) const MSG_SIZE: u32 = 100;
/// Reordering needs several segments of one flow in flight: the reorder
/// profile's messages span a dozen.
pub(super) const REORDER_MSG_SIZE: u32 = 16_384;
/// New connections each of the load's may take in place of reset ones.
pub(super) const RESET_RECONNECTS: u32 = 10;
/// Linux's least retransmission timeout (TCP_RTO_MIN), added to the
/// smoothed round trip for each timeout.
pub(super) const RTO_MIN_S: f64 = 0.2;
/// The timeout of a connection that has measured no round trip yet, as
/// when its handshake lost a packet (TCP_TIMEOUT_INIT, RFC 6298).
pub(super) const RTO_INIT_S: f64 = 1.0;
/// Seconds of quiet before the first keepalive probe, in the vanished profiles.
pub(super) const KEEPALIVE_S: u16 = 1;
/// Idle connections whose peers vanish, by default.
pub(super) const VANISHING: usize = 200;
/// A load that sees no echo for this long gives up, naming the stall.
pub(super) const STALL_S: f64 = 20.0;

pub(super) fn vanishing(profile: Profile) -> bool {
    matches!(profile, Profile::Vanished | Profile::ServerVanished)
}

/// The faults of a profile on this machine: the qdisc of each end of the
/// link, each namespace's nftables rules and the delay line of both.
#[derive(Default)]
pub(super) struct Setting {
    pub(super) qdisc: Option<String>,
    pub(super) server_rules: Option<String>,
    pub(super) client_rules: Option<String>,
    pub(super) delay: Option<Delay>,
}

/// The echo profiles' message size.
pub(super) fn msg_size(profile: Profile, p: &Params) -> u32 {
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
pub(super) fn stall_bound_s(profile: Profile, p: &Params, ordinary_echo_s: f64) -> f64 {
    // Each direction's delay is N(12.5 ms, 2.5 ms): a round trip's is
    // N(25 ms, 3.5 ms); 4 standard deviations cover it.
    let wan_rtt = 0.025 + 4.0 * 0.0025 * std::f64::consts::SQRT_2;
    let (rtt, loss): (f64, f64) = match profile {
        Profile::Wan => (wan_rtt, 0.0),
        // tbf's queue holds up to 20 ms each way.
        Profile::Lan => (0.040, 0.0),
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

pub(super) fn drop_share(per_mille: u32) -> String {
    format!(
        "table inet iomux_faults {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    \
         meta l4proto tcp numgen random mod 1000 < {per_mille} counter drop\n  }}\n}}\n"
    )
}

pub(super) fn duplicate(to: std::net::Ipv4Addr, device: &str) -> String {
    format!(
        "table ip iomux_faults {{\n  chain post {{\n    type filter hook postrouting priority 0; policy accept;\n    \
         meta l4proto tcp numgen random mod 100 < 1 counter dup to {to} device \"{device}\"\n  }}\n}}\n"
    )
}

/// Every TCP packet dropped, both ways: what a vanished host looks like.
pub(super) const DROP_ALL: &str =
    "table inet iomux_faults {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    \
                        meta l4proto tcp counter drop\n  }\n  chain output {\n    type filter hook output priority 0; \
                        policy accept;\n    meta l4proto tcp counter drop\n  }\n}\n";

/// 0.5% of the client's packets after the handshake answered with a reset.
pub(super) const RESETS: &str = "table inet iomux_faults {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    \
                      meta l4proto tcp tcp flags & syn == 0 numgen random mod 1000 < 5 counter reject with tcp reset\n  }\n}\n";

pub(super) fn setting(profile: Profile, netem: bool, nfqueue: bool) -> Result<Setting, String> {
    let none = Setting::default();
    let qdisc = |q: &str| Ok(Setting { qdisc: Some(q.into()), ..Setting::default() });
    let delay = |d: Delay| Ok(Setting { delay: Some(d), ..Setting::default() });
    match (profile, netem) {
        (Profile::Lan, _) => qdisc(crate::lab::rig::lan::qdisc(netem)),
        (Profile::LanSink | Profile::LanIdle, _) => {
            Err("now E3's and E2's own cells: iomux bench sink (or idle) --network lan".into())
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

pub(super) fn mechanism(profile: Profile, netem: bool, nfqueue: bool) -> Emulation {
    let (mechanism, caveat) = match (profile, setting(profile, netem, nfqueue)) {
        (_, Err(why)) => (None, Some(why)),
        (Profile::Lan, Ok(_)) => {
            let (how, caveat) = crate::lab::rig::lan::mechanism(netem);
            (Some(how), caveat)
        }
        // setting() refuses them: never reached.
        (Profile::LanSink | Profile::LanIdle, Ok(_)) => (None, None),
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
