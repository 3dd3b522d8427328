//! A server started for one E6 cell, iomux on a backend, nginx or the C
//! floor, in plaintext or over TLS; stopped with what it counted.

use super::{tls::LabTls, Server, Workload};
use crate::lab::rig::anchors::clients::Tool;
use crate::lab::rig::anchors::nginx::{Handshakes, Nginx};
use crate::lab::rig::child::ServerChild;
use crate::stats::ServerStats;
use std::net::SocketAddr;

pub enum Running {
    Iomux(ServerChild),
    Nginx(Nginx),
    Floor(ServerChild),
}

/// What a stopped server counted.
pub struct Stopped {
    /// iomux's stats.
    pub stats: Option<ServerStats>,
    /// The handshakes: iomux's stats; nginx's log where each request had
    /// its own connection (it logs requests, not connections).
    pub handshakes: Option<Handshakes>,
}

impl Running {
    /// Starts `server` for `workload` on `cpu` (over TLS with `lab`'s
    /// certificate), ready to hold `conns` connections at once.
    pub fn start(
        server: Server,
        workload: Workload,
        lab: Option<&LabTls>,
        cpu: Option<usize>,
        conns: u32,
    ) -> Result<Running, String> {
        let lab = match (workload.is_tls(), lab) {
            (false, _) => None,
            (true, Some(lab)) => Some(lab),
            (true, None) => return Err("no certificate was made for the https cells".into()),
        };
        match server {
            Server::Iomux(backend) => {
                let flags = lab.map(|l| l.serve_flags(workload)).unwrap_or_default();
                let child = ServerChild::start_with(backend, "http", cpu, None, 1, &flags).map_err(crate::one_line)?;
                Ok(Running::Iomux(child))
            }
            Server::Floor if lab.is_some() => Err("the C floor serves plaintext only".into()),
            Server::Floor => {
                let child = ServerChild::start_peer("c-http-floor", cpu).map_err(crate::one_line)?;
                Ok(Running::Floor(child))
            }
            Server::Nginx => {
                let program = Tool::Nginx.find()?;
                let tls = lab.map(|l| l.nginx(workload, conns));
                let nginx = Nginx::start(&program, cpu, tls.as_ref()).map_err(crate::one_line)?;
                Ok(Running::Nginx(nginx))
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        match self {
            Running::Iomux(child) | Running::Floor(child) => child.addr,
            Running::Nginx(nginx) => nginx.addr,
        }
    }

    /// Every process of the server.
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Running::Iomux(child) | Running::Floor(child) => vec![child.pid],
            Running::Nginx(nginx) => nginx.pids(),
        }
    }

    pub fn stop(self, workload: Workload) -> Result<Stopped, String> {
        match self {
            Running::Iomux(child) => {
                let stats = child.stop().map_err(crate::one_line)?.typed;
                let handshakes =
                    stats.tls.map(|t| Handshakes { full: t.full_handshakes, resumed: t.resumed_handshakes });
                Ok(Stopped { stats: Some(stats), handshakes })
            }
            Running::Floor(child) => {
                child.stop().map_err(crate::one_line)?;
                Ok(Stopped { stats: None, handshakes: None })
            }
            Running::Nginx(nginx) => {
                let handshakes = match workload.reconnects() {
                    false => nginx.stop().map(|()| None),
                    true => nginx.stop_counting().map(Some),
                };
                Ok(Stopped { stats: None, handshakes: handshakes.map_err(crate::one_line)? })
            }
        }
    }
}

/// A handshake cell measures what it says: none resumed where resumption
/// is off; where wrk resumes, a full handshake only for the probe and each
/// of wrk's `firsts` first connections, and a few more at most (a tenth of
/// the resumed ones: a session wrk dropped).
pub fn check_handshakes(
    server: Server,
    workload: Workload,
    counted: Option<Handshakes>,
    firsts: u64,
) -> Result<(), String> {
    let Some(Handshakes { full, resumed }) = counted else { return Ok(()) };
    match workload {
        Workload::HttpsFull if resumed > 0 => {
            Err(format!("{server} resumed {resumed} handshakes with resumption off: not a cell of full handshakes"))
        }
        Workload::HttpsResumed if full > firsts + resumed / 10 => Err(format!(
            "{server} did {full} full handshakes beside {resumed} resumed ones, over the {firsts} first \
             connections: not a cell of resumed handshakes"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_cell_of_the_wrong_kind_fails() {
        let n = |full, resumed| Some(Handshakes { full, resumed });
        let check = |workload, counted| check_handshakes(Server::Nginx, workload, counted, 101);
        assert!(check(Workload::HttpsFull, n(2151, 0)).is_ok());
        let err = check(Workload::HttpsFull, n(2000, 1)).unwrap_err();
        assert!(err.contains("resumed 1 handshakes with resumption off"), "{err}");
        // A short run: wrk's 100 first connections and the probe are most.
        assert!(check(Workload::HttpsResumed, n(101, 579)).is_ok());
        assert!(check(Workload::HttpsResumed, n(158, 579)).is_ok());
        let err = check(Workload::HttpsResumed, n(2000, 101)).unwrap_err();
        assert!(err.contains("did 2000 full handshakes beside 101 resumed"), "{err}");
        assert!(check(Workload::Https, n(101, 0)).is_ok());
    }
}
