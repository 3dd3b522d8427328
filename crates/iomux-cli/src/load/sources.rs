//! Source addresses chosen by themselves. Towards one server address, one
//! source address reaches at most the ephemeral port range (28,232 ports
//! by default); a loopback server is reachable from all of 127.0.0.0/8,
//! so a bigger loopback load spreads over 127.0.0.2 and up. Connections
//! take the addresses in turn by their global index (see the client), so
//! every process and loop uses them evenly.

use super::watch::thousands;
use super::Sources;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The kernel's default range, if /proc cannot be read.
const DEFAULT_RANGE: (u32, u32) = (32768, 60999);

/// The ephemeral port range (net.ipv4.ip_local_port_range).
pub fn port_range() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|x| x.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .filter(|(lo, hi)| lo <= hi)
        .unwrap_or(DEFAULT_RANGE)
}

/// Ports one source address may use: the range less 10%, for the
/// connections of other programs and sockets still in TIME_WAIT.
fn budget((lo, hi): (u32, u32)) -> u64 {
    u64::from(hi - lo + 1) * 9 / 10
}

#[derive(Debug, PartialEq)]
pub enum Choice {
    /// One source address (the kernel's choice) suffices.
    One,
    /// These addresses, and a line saying why.
    Chosen(Sources, String),
    /// --bind was given and is too small: a warning.
    Short(String),
}

/// Picks source addresses for `conns` connections (this host's, over all
/// its processes and loops) to `server`.
pub fn choose(server: SocketAddr, conns: u64, bind: Option<&Sources>, range: (u32, u32)) -> Result<Choice, String> {
    let per_source = budget(range);
    let ports = format!("{} ports each: {}-{} less 10% headroom", thousands(per_source), range.0, range.1);
    if let Some(bind) = bind {
        let n = bind.0.len() as u64;
        return Ok(if conns > n * per_source {
            Choice::Short(format!(
                "{} connections to {server} from {n} source address(es) ({ports}) may run out of ports \
                 (EADDRNOTAVAIL): --bind {} addresses or more",
                thousands(conns),
                conns.div_ceil(per_source)
            ))
        } else {
            Choice::One
        });
    }
    match server.ip() {
        // Loopback addresses cost nothing, and connect() finds a free port
        // fast only while the range is mostly free (crate::limits::
        // CONNS_PER_SOURCE): spread well before the range runs out.
        IpAddr::V4(ip) if ip.is_loopback() && conns > crate::limits::CONNS_PER_SOURCE => {
            let needed = conns.div_ceil(crate::limits::CONNS_PER_SOURCE.min(per_source));
            let first = u32::from(Ipv4Addr::new(127, 0, 0, 2));
            // 127.0.0.2 to 127.255.255.254: room for any load that fits in memory.
            let last = first + needed.min(0x00ff_fffc) as u32 - 1;
            let sources = Sources((first..=last).map(|a| IpAddr::V4(Ipv4Addr::from(a))).collect());
            let why = format!(
                "{} connections to {server}: spread over {needed} source addresses, at most {} each \
                 (connect() slows as one address's {ports} fill): using --bind {sources}",
                thousands(conns),
                thousands(crate::limits::CONNS_PER_SOURCE),
            );
            Ok(Choice::Chosen(sources, why))
        }
        _ if conns <= per_source => Ok(Choice::One),
        _ => Err(format!(
            "{} connections to {server} need {needed} source addresses ({ports}), and one address can only \
             reach {}: give this host {needed} addresses that reach the server and pass them as --bind A-B, \
             or split the load over hosts with --shard",
            thousands(conns),
            thousands(per_source),
            needed = conns.div_ceil(per_source),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: (u32, u32) = (32768, 60999);

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn small_loads_keep_one_source() {
        assert_eq!(choose(addr("127.0.0.1:7878"), 5_000, None, RANGE), Ok(Choice::One));
        assert_eq!(choose(addr("10.0.0.1:7878"), 20_000, None, RANGE), Ok(Choice::One));
    }

    #[test]
    fn a_million_loopback_connections_spread_over_enough_addresses() {
        let Ok(Choice::Chosen(s, why)) = choose(addr("127.0.0.1:7878"), 1_000_000, None, RANGE) else {
            panic!("no sources chosen")
        };
        assert_eq!(s.0.len(), 200, "1,000,000 / 5,000 per address");
        assert_eq!(s.to_string(), "127.0.0.2-127.0.0.201");
        assert!(why.contains("--bind 127.0.0.2-127.0.0.201"), "{why}");
        assert!(1_000_000u64.div_ceil(200) <= budget(RANGE));
        let Ok(Choice::Chosen(s, _)) = choose(addr("127.0.0.1:1"), 5_001, None, RANGE) else { panic!() };
        assert_eq!(s.0.len(), 2);
    }

    #[test]
    fn a_remote_server_needs_bind_and_bind_overrides() {
        let e = choose(addr("10.1.2.3:7878"), 100_000, None, RANGE).unwrap_err();
        assert!(e.contains("--bind A-B") && e.contains("4 source addresses"), "{e}");
        let two = Sources(vec!["10.0.0.5".parse().unwrap(), "10.0.0.6".parse().unwrap()]);
        assert!(matches!(choose(addr("10.1.2.3:7878"), 100_000, Some(&two), RANGE), Ok(Choice::Short(_))));
        assert_eq!(choose(addr("10.1.2.3:7878"), 50_000, Some(&two), RANGE), Ok(Choice::One));
        assert!(choose(addr("[::1]:7878"), 100_000, None, RANGE).is_err(), "no 127.x for an IPv6 server");
    }

    #[test]
    fn the_port_range_reads() {
        let (lo, hi) = port_range();
        assert!(lo <= hi && hi <= 65535);
    }
}
