//! Source addresses chosen by themselves. Towards one server address, one
//! source address reaches at most the ephemeral port range (28,232 ports
//! by default); a loopback server is reachable from all of 127.0.0.0/8,
//! so a loopback load too big for one address spreads over 127.0.0.2 and
//! up. Connections take the addresses in turn by their global index (see
//! the client), so every process and loop uses them evenly.

use super::watch::thousands;
use super::Sources;
use crate::limits::CONNS_PER_SOURCE;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The kernel's default range, if /proc cannot be read.
const DEFAULT_RANGE: (u64, u64) = (32768, 60999);

/// The ephemeral port range (net.ipv4.ip_local_port_range).
pub fn port_range() -> (u64, u64) {
    let k = crate::limits::Kernel::read();
    if k.ports() == 0 {
        DEFAULT_RANGE
    } else {
        k.port_range
    }
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
/// its processes and loops) to `server`. Up to one address's port budget,
/// the kernel's own choice stands. Past it, `iomux load` has to choose, and
/// chooses enough addresses for connects to stay fast: one per
/// [`CONNS_PER_SOURCE`] connections (connect()'s search for a free port
/// slows as an address's range fills).
pub fn choose(server: SocketAddr, conns: u64, bind: Option<&Sources>, range: (u64, u64)) -> Result<Choice, String> {
    let per_source = crate::limits::ports_per_source(range);
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
    if conns <= per_source {
        return Ok(Choice::One);
    }
    let needed = conns.div_ceil(per_source);
    let fast = conns.div_ceil(CONNS_PER_SOURCE.min(per_source)).max(needed);
    match server.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => {
            // At most what --bind A-B takes (and what a child process is passed).
            let n = fast.min(65_536);
            let first = u32::from(Ipv4Addr::new(127, 0, 0, 2));
            let sources = Sources((first..first + n as u32).map(|a| IpAddr::V4(Ipv4Addr::from(a))).collect());
            let why = format!(
                "{} connections to {server} need at least {needed} source addresses ({ports}); \
                 using {n} ({} connections each, for fast connects): --bind {sources}",
                thousands(conns),
                thousands(conns.div_ceil(n))
            );
            Ok(Choice::Chosen(sources, why))
        }
        _ => Err(format!(
            "{} connections to {server} need at least {needed} source addresses ({ports}; {fast} keep \
             connects fast), and one address can only reach {}: give this host that many addresses that \
             reach the server and pass them as --bind A-B, or split the load over hosts with --shard",
            thousands(conns),
            thousands(per_source)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: (u64, u64) = (32768, 60999);

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn small_loads_keep_one_source() {
        assert_eq!(choose(addr("127.0.0.1:7878"), 25_408, None, RANGE), Ok(Choice::One));
        assert_eq!(choose(addr("10.0.0.1:7878"), 20_000, None, RANGE), Ok(Choice::One));
    }

    #[test]
    fn a_million_loopback_connections_spread_over_enough_addresses() {
        let Ok(Choice::Chosen(s, why)) = choose(addr("127.0.0.1:7878"), 1_000_000, None, RANGE) else {
            panic!("no sources chosen")
        };
        assert_eq!(s.0.len(), 200, "1,000,000 / 5,000 per address");
        assert_eq!(s.to_string(), "127.0.0.2-127.0.0.201");
        assert!(why.contains("at least 40 source addresses"), "{why}");
        assert!(why.contains("--bind 127.0.0.2-127.0.0.201"), "{why}");
        let Ok(Choice::Chosen(s, _)) = choose(addr("127.0.0.1:1"), 25_409, None, RANGE) else { panic!() };
        assert_eq!(s.0.len(), 6);
        // A small port range: its budget, not CONNS_PER_SOURCE, sets the count.
        let Ok(Choice::Chosen(s, _)) = choose(addr("127.0.0.1:1"), 10_000, None, (60000, 60999)) else { panic!() };
        assert_eq!(s.0.len(), 12, "900 ports each");
    }

    #[test]
    fn a_remote_server_needs_bind_and_bind_overrides() {
        let e = choose(addr("10.1.2.3:7878"), 100_000, None, RANGE).unwrap_err();
        assert!(e.contains("--bind A-B") && e.contains("at least 4 source addresses"), "{e}");
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
