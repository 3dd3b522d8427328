//! E5's scenarios and servers: names, parsing, defaults and help.

use super::*;

/// A closed loop of N connections, or an open loop of N connections at
/// [`OPEN_RATE`] in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub conns: usize,
    pub open: bool,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Scenario, String> {
        parse_scenario(s)
    }
}

impl Scenario {
    pub fn name(&self) -> String {
        format!("{}-{}", if self.open { "open" } else { "closed" }, self.conns)
    }

    pub(super) fn describe(&self) -> String {
        if self.open {
            format!("{} connections, open loop at {} msgs/s in all", thousands(self.conns as f64), thousands(OPEN_RATE))
        } else {
            format!("{} connections, closed loop", thousands(self.conns as f64))
        }
    }
}

pub(super) const DEFAULT_SCENARIOS: [Scenario; 4] = [
    Scenario { conns: 100, open: false },
    Scenario { conns: 1000, open: false },
    Scenario { conns: 10_000, open: false },
    Scenario { conns: 1000, open: true },
];

pub(super) fn default_servers(full: bool) -> Vec<Server> {
    let iomux = IOMUX_BACKENDS.iter().filter(|&&b| full || b != Backend::EpollEt);
    iomux.map(|&b| Server::Iomux(b)).chain(Peer::ALL.map(Server::Peer)).collect()
}

pub(super) fn peer_names() -> String {
    Peer::ALL.map(Peer::name).join(", ")
}

/// `iomux-BACKEND` or a peer's name.
pub(super) fn parse_server(s: &str) -> Result<Server, String> {
    if let Some(backend) = iomux_server(s) {
        return backend.map(Server::Iomux);
    }
    // Only the echo servers: the RESP floor is a peer too, but no echo.
    s.parse::<Peer>().ok().filter(|p| Peer::ALL.contains(p)).map(Server::Peer).ok_or_else(|| {
        format!("unknown server '{s}': iomux-BACKEND (e.g. iomux-epoll, iomux-uring) or one of {}", peer_names())
    })
}

/// `closed-N` or `open-N`.
pub(super) fn parse_scenario(s: &str) -> Result<Scenario, String> {
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

pub(super) fn servers_help() -> String {
    let names = |full| default_servers(full).iter().map(Server::name).collect::<Vec<_>>().join(",");
    format!(
        "Servers, comma-separated: iomux-BACKEND, or a peer ({}) [default: {}; --full: {}]",
        peer_names(),
        names(false),
        names(true)
    )
}

/// The default scenarios: quick settings leave out closed-10000
/// (connecting 10,000 for each cell of every round).
pub(super) fn default_scenarios(full: bool) -> Vec<Scenario> {
    DEFAULT_SCENARIOS.iter().copied().filter(|s| full || s.conns < 10_000 || s.open).collect()
}

pub(super) fn scenarios_help() -> String {
    let names = |full| default_scenarios(full).iter().map(Scenario::name).collect::<Vec<_>>().join(",");
    format!(
        "Scenarios, comma-separated: closed-N (N connections, closed loop) or open-N (N connections, {} msgs/s \
         in all) [default: {}; --full: {}]",
        thousands(OPEN_RATE),
        names(false),
        names(true)
    )
}

pub(super) fn seconds_help() -> String {
    format!("Seconds of load per cell, after connecting {SECONDS}")
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::str::FromStr for Server {
    type Err = String;
    fn from_str(s: &str) -> Result<Server, String> {
        parse_server(s)
    }
}
