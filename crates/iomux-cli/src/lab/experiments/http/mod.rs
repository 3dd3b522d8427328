//! E6 `http`: `iomux serve --proto http` on each backend beside nginx
//! (one worker, `return 200`), on the same CPU, measured by clients
//! nobody here wrote: wrk (with and without pipelining) and h2load
//! `--h1`, on the other CPU. Requests/s, server CPU per request, both
//! sides' CPU shares (so a client-bound cell says so), latency, errors,
//! and iomux's syscalls per request. Open (the server has its CPU to
//! itself, so at depth 1 the one client thread sets the pace) and
//! server-bound (every server in the same 50% CPU quota, wrk only).
//! Over HTTPS, in the quota: keep-alive, a full handshake per request,
//! a resumed one per request; and the memory of idle TLS connections.
//! By wrk at depth 1 the C floor (crates/peers/c/http_floor.c) runs
//! beside them: canned responses and nothing else, what any epoll server
//! reaches here, against which iomux-epoll is judged in the quota.

mod claims;
mod running;
mod tls;
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
use crate::lab::rig::anchors::clients::{self, missing_line, missing_told, Client, Report, Tool};
use crate::lab::rig::anchors::nginx::answers_plaintext;
use crate::lab::rig::anchors::nginx::Handshakes;
use crate::lab::rig::quota::{self, CpuQuota, Scenario, BOUND_SHARE};
use crate::lab::Settings;
use crate::CliResult;
use anyhow::{bail, Context as _};
use iomux::Backend;
use running::{check_handshakes, Running, Stopped};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tls::LabTls;

/// TechEmpower's plaintext test and the issue's: 100 connections, one
/// client thread.
const CONNS: u32 = 100;
const SECONDS: QuickFull<u32> = QuickFull { quick: 1, full: 10 };
const DEFAULT_DEPTHS: [u32; 2] = [1, 16];
/// A side using at least this share of its CPU sets the pace.
const SATURATED: f64 = 0.95;
/// iomux's goal against nginx, in requests/s and in CPU per request.
const GOAL: f64 = 1.2;
/// iomux's own part at depth 1, server-bound: iomux-epoll within 5% of
/// the C floor's requests/s (the floor, on the same epoll, spends only
/// what the kernel does).
const GOAL_OF_FLOOR: f64 = 0.95;
const CLIENTS: [Client; 2] = [Client::Wrk, Client::H2load];
/// Every server's CPU quota for the handshake cells.
const HANDSHAKE_SHARE: f64 = 0.15;
/// Idle TLS connections for the memory cell: the 10,000 at full
/// size; quick, 2,000, a fifth of the handshakes.
const TLS_IDLE: QuickFull<u32> = QuickFull { quick: 2_000, full: 10_000 };
/// iomux's goal for the memory of an idle TLS connection: at most this
/// share of nginx's (the issue's).
const IDLE_MEMORY_GOAL: f64 = 0.5;

/// What the client does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// HTTP/1.1 keep-alive, at every depth and in every scenario.
    #[default]
    Plain,
    /// HTTPS keep-alive, by wrk in the quota.
    Https,
    /// HTTPS with a new connection per request and resumption off on
    /// every server: a full handshake per request, in the quota.
    HttpsFull,
    /// HTTPS with a new connection per request, resuming the session wrk
    /// keeps: a resumed handshake per request, in the quota.
    HttpsResumed,
    /// TLS connections opened by `iomux load` and held idle: the servers'
    /// memory per connection.
    HttpsIdle,
}

crate::lab::harness::display_as_value!(Workload);

impl Workload {
    fn is_tls(self) -> bool {
        self != Workload::Plain
    }

    /// A connection per request.
    fn reconnects(self) -> bool {
        matches!(self, Workload::HttpsFull | Workload::HttpsResumed)
    }

    /// The share of a CPU every server gets in the bound scenario. A
    /// handshake costs wrk's one thread more than a server (an ECDSA
    /// verification and OpenSSL's own work): at half a CPU, iomux's full
    /// handshakes outpaced wrk's (127 us of server CPU each, wrk at 100%
    /// of its CPU and 2,282/s); at a fifth, iomux reached 2,003/s, 88% of
    /// that. At 15% wrk keeps well ahead.
    pub fn quota_share(self) -> f64 {
        if self.reconnects() {
            HANDSHAKE_SHARE
        } else {
            BOUND_SHARE
        }
    }
}

servers!(Server {
    Nginx => "nginx",
    /// The C floor (c/http_floor.c): canned responses, nothing else; by
    /// wrk at depth 1 only, where it shows what this machine allows.
    Floor => "floor",
});

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    #[command(flatten)]
    pub shared: SharedFlags<Standard>,
    /// Pipelining depths, comma-separated: requests a client sends before
    /// reading the answers (1: none) [default: 1,16]
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=256))]
    pub depths: Option<Vec<u32>>,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3600),
          help = format!("Seconds per client run (wrk counts whole seconds) {SECONDS}"))]
    pub seconds: Option<u32>,
    /// Scenarios, comma-separated: open (each server on a CPU of its own)
    /// and bound (every server in the same 50% CPU quota, by wrk; needs
    /// root and a cgroup CPU controller) [default: open,bound]
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Option<Vec<Scenario>>,
    /// What to measure, comma-separated: plain (HTTP/1.1), https
    /// (keep-alive over TLS), https-full (a connection and a full
    /// handshake per request), https-resumed (a connection per request,
    /// resuming the session), https-idle (the memory of idle TLS
    /// connections). The https ones but https-idle need the bound scenario
    /// [default: all]
    #[arg(long, value_delimiter = ',')]
    pub workloads: Option<Vec<Workload>>,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=18_000),
          help = format!("Idle TLS connections https-idle holds {TLS_IDLE}"))]
    pub tls_idle: Option<u32>,
}

/// Sum of the processes' CPU time now.
fn cpu_of(pids: &[u32]) -> Duration {
    pids.iter().filter_map(|&p| crate::os::process_cpu(p).ok()).sum()
}

fn run_cell(
    arm: &Arm,
    program: &std::path::Path,
    seconds: u32,
    script: &std::path::Path,
    lab: Option<&LabTls>,
) -> Result<Run, String> {
    let Arm { server, client, depth, scenario, workload } = *arm;
    let (server_cpu, client_cpu) = crate::lab::rig::cell::cpus();
    let quota = match scenario {
        Scenario::Open => None,
        Scenario::Bound => Some(CpuQuota::new(workload.quota_share())?),
    };
    let running = Running::start(server, workload, lab, server_cpu, CONNS)?;
    let (addr, pids) = (running.addr(), running.pids());
    let measure = || -> Result<(Report, Duration, Duration), String> {
        match (workload.is_tls(), lab) {
            (true, Some(lab)) => lab.probe(addr),
            _ => answers_plaintext(addr),
        }
        .map_err(|e| format!("{server}: {e}"))?;
        if let Some(q) = &quota {
            for &pid in &pids {
                q.add(pid)?;
            }
        }
        let url = format!("{}://{addr}/plaintext", if workload.is_tls() { "https" } else { "http" });
        let mut args = clients::args(client, &url, CONNS, depth, seconds, Some(script));
        if workload.reconnects() {
            // Before the URL, which comes last.
            args.splice(args.len() - 1..args.len() - 1, ["-H".to_string(), "Connection: close".to_string()]);
        }
        let before = cpu_of(&pids);
        let (report, used) = clients::run(client, program, &args, client_cpu, seconds).map_err(crate::one_line)?;
        Ok((report, cpu_of(&pids).saturating_sub(before), used))
    };
    let measured = measure();
    let stopped = running.stop(workload);
    // The measurement's own failure says more than the stop's.
    let (report, server_used, client_used) = measured?;
    let Stopped { stats, handshakes } = stopped?;
    // wrk's first connections, and the probe's.
    check_handshakes(server, workload, handshakes, u64::from(CONNS) + 1)?;
    // The errors claim leaves resumed cells out (a figure, so they run in
    // the first rounds alone); an error there fails the cell instead.
    if workload == Workload::HttpsResumed && report.errors > 0 {
        return Err(format!("{server}: wrk reported {} errors over resumed handshakes", report.errors));
    }
    let syscalls = stats.and_then(|st| {
        let per = st.syscalls_total as f64 / st.http_responses? as f64;
        per.is_finite().then_some(per)
    });
    let per = |d: Duration| d.as_secs_f64() / report.seconds;
    Ok(Run {
        server_cpu_us_per_request: server_used.as_secs_f64() * 1e6 / report.requests.max(1) as f64,
        server_util: per(server_used),
        client_util: per(client_used),
        syscalls_per_request: syscalls,
        throttled_periods: quota.as_ref().and_then(CpuQuota::throttled_periods),
        report,
        handshakes,
        idle_rss_bytes_per_conn: None,
    })
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(with = "by_names")]
    servers: Vec<Server>,
    depths: Vec<u32>,
    /// Results written before the server-bound scenario were all open.
    #[serde(default = "open_only")]
    scenarios: Vec<Scenario>,
    /// Results written before HTTPS measured plaintext only.
    #[serde(default = "plain_only")]
    workloads: Vec<Workload>,
    /// Idle TLS connections of the https-idle cells.
    #[serde(default)]
    tls_idle: u32,
    /// The clients found, with their paths.
    clients: Vec<(Client, PathBuf)>,
    /// Tools not found, with why; the cells that need them are not run.
    missing: Vec<String>,
    conns: u32,
    #[serde(flatten)]
    rounds: Rounds,
    seconds: u32,
    /// (server CPU, client CPU), when the machine has two to pin to.
    pinned: Option<(usize, usize)>,
    saturated_at: f64,
}

fn open_only() -> Vec<Scenario> {
    vec![Scenario::Open]
}

fn open() -> Scenario {
    Scenario::Open
}

fn plain_only() -> Vec<Workload> {
    vec![Workload::Plain]
}

/// One cell: a server, a client, a pipelining depth, a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    #[serde(with = "by_name")]
    server: Server,
    client: Client,
    depth: u32,
    #[serde(default = "open")]
    scenario: Scenario,
    #[serde(default)]
    workload: Workload,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let over_tls = match self.workload {
            Workload::Plain => "",
            Workload::Https => " https",
            Workload::HttpsFull => " https full handshakes",
            Workload::HttpsResumed => " https resumed handshakes",
            Workload::HttpsIdle => return write!(f, "{} idle TLS connections", self.server),
        };
        write!(f, "{} {} depth {}{over_tls}", self.server, self.client.name(), self.depth)?;
        match self.scenario {
            Scenario::Open => Ok(()),
            Scenario::Bound => f.write_str(" bound"),
        }
    }
}

/// One run of one cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub report: Report,
    /// User + system time of the server's processes over the client's run.
    pub server_cpu_us_per_request: f64,
    /// Shares of one CPU over the client's measured seconds.
    pub server_util: f64,
    pub client_util: f64,
    /// iomux only: the syscalls its loop made over its whole life (starting,
    /// the client's connects and closes included) per response it sent.
    pub syscalls_per_request: Option<f64>,
    /// Server-bound: periods in which the quota held the server back.
    #[serde(default)]
    pub throttled_periods: Option<u64>,
    /// HTTPS: the handshakes the server counted over its life (the probe's
    /// included): iomux's stats, nginx's log of `$ssl_session_reused`.
    #[serde(default)]
    pub handshakes: Option<Handshakes>,
    /// https-idle: the server's resident memory per idle TLS connection.
    #[serde(default)]
    pub idle_rss_bytes_per_conn: Option<f64>,
}

serving::request_run!(Run, served: |r: &Run| r.idle_rss_bytes_per_conn.is_none());

/// Every cell: both clients open; wrk alone in the quota, at depth 1 (the
/// bound scenario measures the server, which one client does, where the
/// open one measures wrk).
/// Over HTTPS: wrk at depth 1 in the quota, and the idle cell (memory, no
/// quota).
fn every_cell(p: &Params, pick: impl Fn(&Arm) -> bool) -> Vec<Arm> {
    let mut cells = Vec::new();
    for &workload in &p.workloads {
        match workload {
            Workload::Plain => {
                for &scenario in &p.scenarios {
                    for client in CLIENTS.into_iter().filter(|&c| scenario == Scenario::Open || c == Client::Wrk) {
                        for &depth in p.depths.iter().filter(|&&d| scenario == Scenario::Open || d == 1) {
                            cells.push((client, depth, scenario, workload));
                        }
                    }
                }
            }
            Workload::HttpsIdle => cells.push((Client::Wrk, 1, Scenario::Open, workload)),
            _ if p.scenarios.contains(&Scenario::Bound) => cells.push((Client::Wrk, 1, Scenario::Bound, workload)),
            _ => {}
        }
    }
    let arms = cells.into_iter().flat_map(|(client, depth, scenario, workload)| {
        p.servers.iter().map(move |&server| Arm { server, client, depth, scenario, workload })
    });
    // The floor finds each request's end and answers it, which is valid
    // for wrk's plaintext GETs; at depth 1 it is what the claims read.
    let floor_runs = |a: &Arm| a.workload == Workload::Plain && a.client == Client::Wrk && a.depth == 1;
    arms.filter(|a| (a.server != Server::Floor || floor_runs(a)) && holds_idle(p, a) && pick(a)).collect()
}

/// Whether the run has select but not its idle cell (past FD_SETSIZE).
fn select_left_out(p: &Params) -> bool {
    let select = Server::Iomux(iomux::Backend::Select);
    p.servers.contains(&select)
        && p.workloads.contains(&Workload::HttpsIdle)
        && !holds_idle(
            p,
            &Arm {
                server: select,
                client: Client::Wrk,
                depth: 1,
                scenario: Scenario::Open,
                workload: Workload::HttpsIdle,
            },
        )
}

/// Whether `arm`'s server can hold its connections: every one of them
/// but select's idle cell past FD_SETSIZE (a full run's 10,000).
fn holds_idle(p: &Params, arm: &Arm) -> bool {
    match arm.server {
        Server::Iomux(backend) if arm.workload == Workload::HttpsIdle => {
            !super::past_fd_setsize(backend, p.tls_idle as usize)
        }
        _ => true,
    }
}

/// Whether `arm` is one of the run's cells (the floor's are few).
fn is_cell(p: &Params, arm: &Arm) -> bool {
    !every_cell(p, |a| a == arm).is_empty()
}

pub struct Http;

impl Experiment for Http {
    experiment_types!(Args, Params, Arm, Run, rounds: params.rounds);

    const ENTRY: Entry = Entry::new("http", "E6", "iomux serve --proto http beside nginx, by wrk and h2load")
        .smoke("--backends epoll --reps 1 --seconds 1 --budget 0 --tls-idle 200")
        .needs(&["wrk", "h2load", "nginx"]);
    const PUBLISHED: &'static str = "nothing: the documents served no HTTP. iomux's goals: 1.2 times nginx's \
                                     requests/s by wrk, and nginx's CPU per request 1.2 times iomux's. At depth 1 \
                                     the C floor (canned responses, nothing else) shows how far over nginx this \
                                     machine lets any epoll server go, beside iomux's figures, and iomux's own part \
                                     is judged against it: iomux-epoll at least 0.95 of the floor's requests/s, \
                                     every server in one quota.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        // Quick settings measure epoll and uring, which the claims' "best"
        // comes from on this kind of machine (edge-triggered epoll ties
        // with level-triggered: 138,483 against 138,644 requests/s by wrk
        // at depth 1); --full: all six.
        let backends = args.shared.backends.chosen(settings.full)?;
        let depths = args.depths.clone().unwrap_or_else(|| DEFAULT_DEPTHS.to_vec());
        no_repeats("--depths", &depths)?;
        let mut missing = Vec::new();
        let mut servers: Vec<Server> = backends.into_iter().map(Server::Iomux).collect();
        servers.extend([Server::Nginx, Server::Floor]);
        if let Err(why) = Tool::Nginx.find() {
            missing.push(why);
        }
        let scenarios = args.scenarios.clone().unwrap_or_else(|| vec![Scenario::Open, Scenario::Bound]);
        no_repeats("--scenarios", &scenarios)?;
        let scenarios = quota::runnable(scenarios, args.scenarios.is_some(), &mut missing)?;
        let workloads = args.workloads.clone().unwrap_or_else(|| {
            vec![Workload::Plain, Workload::Https, Workload::HttpsFull, Workload::HttpsResumed, Workload::HttpsIdle]
        });
        no_repeats("--workloads", &workloads)?;
        let bound_tls = workloads.iter().any(|w| w.is_tls() && *w != Workload::HttpsIdle);
        if bound_tls && args.workloads.is_some() && !scenarios.contains(&Scenario::Bound) {
            bail!(
                "--workloads https, https-full and https-resumed run in the bound scenario, which \
                        this run does not have (--scenarios bound; it needs root and a cgroup CPU controller)"
            );
        }
        let mut clients = Vec::new();
        for client in CLIENTS {
            match client.tool().find() {
                Ok(path) => clients.push((client, path)),
                Err(why) => missing.push(why),
            }
        }
        Ok(Params {
            servers,
            depths,
            scenarios,
            workloads,
            tls_idle: args.tls_idle.unwrap_or(TLS_IDLE.pick(settings)),
            clients,
            missing,
            conns: CONNS,
            rounds: args.shared.rounds.rounds(settings)?,
            seconds: args.seconds.unwrap_or(SECONDS.pick(settings)),
            pinned: crate::lab::rig::cell::pinned(),
            saturated_at: SATURATED,
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Run>> {
        claims::all(p)
    }

    fn metrics() -> Vec<Metric<Run>> {
        let mut metrics = request_metrics();
        metrics.push(Metric {
            name: "RSS per idle TLS connection",
            unit: "B",
            higher_is_better: false,
            get: |r: &Run| r.idle_rss_bytes_per_conn.unwrap_or(f64::NAN),
        });
        metrics
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Run>) -> Vec<Arm> {
        every_cell(p, |_| true)
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Run>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Run>> {
        let missing = missing_told("http", &p.missing);
        // Its error names the folder's use.
        let scratch = crate::os::PrivateDir::new("iomux-lab-http", "the wrk script")?;
        let nginx = Tool::Nginx.find().ok();
        let lab = match p.workloads.iter().any(|w| w.is_tls()) {
            true => Some(LabTls::new()?),
            false => None,
        };
        Ok(Box::new(move |a: &Arm| -> Measured<Run> {
            if a.workload == Workload::HttpsIdle {
                if nginx.is_none() && a.server == Server::Nginx {
                    return Ok(Err(missing.clone()));
                }
                let lab = lab.as_ref().context("no certificate was made for the https cells")?;
                return Ok(tls::idle_cell(a, lab, p.tls_idle));
            }
            let program = p.clients.iter().find(|(c, _)| *c == a.client).map(|(_, path)| path);
            let Some(program) = program.filter(|_| nginx.is_some() || a.server != Server::Nginx) else {
                return Ok(Err(missing.clone()));
            };
            let lua = scratch.path().join(format!("pipeline-{}.lua", a.depth));
            if a.depth > 1 && !lua.exists() {
                std::fs::write(&lua, clients::wrk_pipeline_script(a.depth))
                    .with_context(|| format!("writing {}", lua.display()))?;
            }
            Ok(run_cell(a, program, p.seconds, &lua, lab.as_ref()))
        }))
    }

    fn reference(arm: &Arm) -> bool {
        !arm.server.is_iomux()
    }

    /// Resident memory per idle TLS connection.
    fn placement_free(arm: &Arm) -> bool {
        arm.workload == Workload::HttpsIdle
    }

    /// A cell of a handshake per request is its own kind of figure: its
    /// spread (12-22% here) is not the keep-alive cells' (about 4%), so
    /// `iomux report A B` pools it apart.
    fn unit(arm: &Arm, metric: &Metric<Run>) -> &'static str {
        match (arm.workload.reconnects(), metric.unit) {
            (true, "1/s") => "handshakes/s",
            (true, "us") => "us/handshake",
            (_, unit) => unit,
        }
    }
}

#[cfg(test)]
mod tests;
