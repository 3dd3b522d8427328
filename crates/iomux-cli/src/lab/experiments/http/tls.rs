//! E6's HTTPS cells: one certificate for every server (ECDSA P-256, made
//! by the lab), one suite (TLS 1.3, AES-128-GCM, X25519) pinned on both
//! sides and checked by a probe before each run, and the idle cell:
//! TLS connections held open, the servers' resident memory per connection.

use super::running::Running;
use super::{Arm, Run, Workload};
use crate::lab::rig::anchors::clients::Report;
use crate::lab::rig::anchors::nginx::{is_plaintext_answer, NginxTls};
use crate::lab::rig::child::load_args_to;
use crate::lab::rig::load_child::{LoadChild, Stderr};
use crate::lab::rig::sampler::{Readings, Sampler};
use crate::os::PrivateDir;
use crate::CliResult;
use anyhow::Context as _;
use iomux_tls::rustls::{self, pki_types::ServerName, ClientConfig, ClientConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The suite and group every server is held to (the choice:
/// what most clients negotiate first with an ECDSA certificate).
pub const SUITE: &str = "TLS13_AES_128_GCM_SHA256";
pub const GROUP: &str = "X25519";
/// The name the certificate is for, and the clients ask for.
const NAME: &str = "localhost";

/// How long the idle connections are held once all are up: the RSS
/// sampler reads every 10 ms.
const IDLE_HOLD_S: f64 = 1.0;

/// The lab's certificate, its files, and a client config trusting it.
pub struct LabTls {
    _dir: PrivateDir,
    pub cert: PathBuf,
    pub key: PathBuf,
    client: Arc<ClientConfig>,
}

impl LabTls {
    pub fn new() -> CliResult<LabTls> {
        let dir = PrivateDir::new("iomux-lab-tls", "the lab's certificate")?;
        let identity = iomux_tls::certs::self_signed(&[NAME]).map_err(anyhow::Error::msg)?;
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, &identity.chain_pem).with_context(|| format!("writing {}", cert.display()))?;
        std::fs::write(&key, &identity.key_pem).with_context(|| format!("writing {}", key.display()))?;
        let config = ClientConfig::builder()
            .with_root_certificates(identity.roots().map_err(anyhow::Error::msg)?)
            .with_no_client_auth();
        Ok(LabTls { _dir: dir, cert, key, client: Arc::new(config) })
    }

    /// `iomux serve`'s flags for `workload`.
    pub fn serve_flags(&self, workload: Workload) -> Vec<String> {
        let mut flags: Vec<String> = vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
            "--tls-suites".into(),
            SUITE.into(),
            "--tls-groups".into(),
            GROUP.into(),
        ];
        match workload {
            Workload::HttpsFull => flags.push("--tls-no-resumption".into()),
            // nginx's client_header_timeout: an idle connection is held
            // 60 s before its first request.
            Workload::HttpsIdle => flags.extend(["--http-header-timeout".into(), "60".into()]),
            _ => {}
        }
        flags
    }

    /// nginx's TLS for `workload`, holding `conns` connections.
    pub fn nginx(&self, workload: Workload, conns: u32) -> NginxTls {
        NginxTls {
            cert: self.cert.clone(),
            key: self.key.clone(),
            resumption: workload != Workload::HttpsFull,
            log_handshakes: workload.reconnects(),
            conns,
        }
    }

    /// `GET /plaintext` over TLS: TechEmpower's body, with TLS 1.3, the
    /// pinned suite and group (the server's choice, offered everything).
    pub fn probe(&self, addr: SocketAddr) -> Result<(), String> {
        let name = ServerName::try_from(NAME).map_err(|e| e.to_string())?;
        let conn = ClientConnection::new(self.client.clone(), name).map_err(|e| e.to_string())?;
        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
        sock.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        let mut s = StreamOwned::new(conn, sock);
        s.write_all(b"GET /plaintext HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            .map_err(|e| format!("https: {e}"))?;
        let mut answer = Vec::new();
        // A server that closes without close_notify still answered.
        if let Err(e) = s.read_to_end(&mut answer) {
            if answer.is_empty() {
                return Err(format!("https: {e}"));
            }
        }
        is_plaintext_answer(&answer).map_err(|e| format!("over TLS: {e}"))?;
        let suite = s.conn.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite()));
        let group = s.conn.negotiated_key_exchange_group().map(|g| format!("{:?}", g.name()));
        let version = s.conn.protocol_version();
        if (suite.as_deref(), group.as_deref(), version)
            != (Some(SUITE), Some(GROUP), Some(rustls::ProtocolVersion::TLSv1_3))
        {
            return Err(format!(
                "negotiated {version:?} {suite:?} {group:?}, not TLS 1.3 with {SUITE} and {GROUP}: the pin did not hold"
            ));
        }
        Ok(())
    }
}

/// The idle cell: `conns` TLS connections opened by `iomux load` (on the
/// client CPU) and held; the server's resident memory per connection is
/// what all its processes held while the connections were up (the median
/// over the load's holding window) less what they held before.
pub fn idle_cell(arm: &Arm, lab: &LabTls, conns: u32) -> Result<Run, String> {
    let (server_cpu, client_cpu) = crate::lab::rig::cell::cpus();
    // nginx closes connections waiting for a request once fewer than 1/16
    // of its worker_connections are free (its log: "not enough, reusing
    // connections"): an eighth more, and some.
    let room = conns + conns / 8 + 256;
    let running = Running::start(arm.server, arm.workload, Some(lab), server_cpu, room)?;
    let held = lab
        .probe(running.addr())
        .map_err(|e| format!("{}: {e}", arm.server))
        .and_then(|()| hold_idle(running.addr(), &running.pids(), lab, conns, client_cpu));
    let stopped = running.stop(arm.workload);
    let rss_per_conn = held?;
    stopped?;
    Ok(Run {
        // Not served: `served()` says so, and these are not figures.
        report: Report::default(),
        server_cpu_us_per_request: 0.0,
        server_util: 0.0,
        client_util: 0.0,
        syscalls_per_request: None,
        throttled_periods: None,
        handshakes: None,
        idle_rss_bytes_per_conn: Some(rss_per_conn),
    })
}

/// Opens and holds the idle connections; returns the RSS per connection.
fn hold_idle(addr: SocketAddr, pids: &[u32], lab: &LabTls, conns: u32, cpu: Option<usize>) -> Result<f64, String> {
    let sampler = Sampler::start(cpu);
    for &pid in pids {
        sampler.watch(pid);
    }
    let mut args = load_args_to(addr, iomux::Backend::Epoll, cpu);
    (args.conns, args.idle, args.duration) = (0, conns as usize, Some(IDLE_HOLD_S));
    args.tls_ca = Some(lab.cert.clone());
    let mut load = LoadChild::start(&args, |exe| Command::new(exe), "", Stderr::Kept).map_err(crate::one_line)?;
    let limit = Duration::from_secs(120);
    let exited = load.wait(limit, |_| {}).map_err(crate::one_line)?;
    let readings = sampler.finish();
    let (status, result) = load.outcome(exited, limit)?;
    if !status.success() {
        return Err(format!("iomux load --tls-ca exited with {status}: {}", load.last_words()));
    }
    if result.connected != u64::from(conns) {
        return Err(format!(
            "{} of {conns} idle TLS connections were established: {}",
            result.connected,
            result.errors.first.as_deref().unwrap_or("no error said")
        ));
    }
    let window = result.measure_window.ok_or("the load reported no window in which it held its connections")?;
    Ok(held_per_conn(&readings, window, conns).ok_or("no resident memory was read while the connections were held")?)
}

/// Each process's first reading (all taken before the load started) is
/// the baseline; the processes' summed RSS at the first one's sample
/// times inside `window`, its median, is what they held.
fn held_per_conn(readings: &[Readings], (start, end): (f64, f64), conns: u32) -> Option<f64> {
    let before: f64 = readings.iter().map(|r| r.rss_bytes.first()).sum::<Option<f64>>()?;
    let times = readings.first()?.rss_bytes.times();
    let total = |t: f64| readings.iter().map(|r| r.rss_bytes.at(t)).sum::<Option<f64>>();
    let mut held: Vec<f64> = times.into_iter().filter(|t| (start..=end).contains(t)).filter_map(total).collect();
    held.sort_by(f64::total_cmp);
    let median = *held.get(held.len() / 2)?;
    Some((median - before) / f64::from(conns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss(samples: &[(f64, f64)]) -> Readings {
        let mut r = Readings::default();
        for &(t, v) in samples {
            r.rss_bytes.push(t, v);
        }
        r
    }

    #[test]
    fn the_memory_held_is_the_median_inside_the_window_less_each_first_reading() {
        // A master that holds still, and a worker first read a little
        // later, which grows during the handshakes and settles.
        let master = rss(&[(0.0, 1000.0), (1.0, 1000.0), (2.0, 1000.0), (3.0, 1000.0), (4.0, 1000.0)]);
        let worker = rss(&[(0.1, 5000.0), (1.1, 9000.0), (2.1, 7000.0), (3.1, 7000.0), (4.1, 7000.0)]);
        // Held from 2 s to 4 s: worker 7,000 (interpolated at 2, 3 and 4 s:
        // 7,200, 7,000 and 7,000), master 1,000; before: 5,000 + 1,000.
        let per = held_per_conn(&[master, worker], (2.0, 4.0), 10).unwrap();
        assert_eq!(per, (8000.0 - 6000.0) / 10.0);
        assert_eq!(held_per_conn(&[rss(&[(0.0, 1.0)])], (2.0, 4.0), 10), None, "no sample in the window");
    }
}
