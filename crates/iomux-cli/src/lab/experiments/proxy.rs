//! E9 `proxy`: `iomux serve --proto proxy` on each backend beside haproxy
//! (tcp mode, one thread) and the C floor of a relay (recv and send alone),
//! each pinned to the server CPU inside the same CPU quota (server-bound,
//! as E6's and E7's bound cells). Three loads:
//! - requests: wrk `-t1 -c100` on the other CPU through each proxy to
//!   nginx: requests/s, proxy CPU per request, latency, errors;
//! - bulk: one connection sends N MiB through each proxy to a sink: proxy
//!   CPU per GB (the floor is not a bulk relay, so it does not run here);
//! - many: as many proxied connections as one process may hold here (each
//!   takes two descriptors), each used once, then held idle: proxy RSS per
//!   connection.

use crate::lab::experiments::http::answers_plaintext;
use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::{by_name, by_names, iomux_server, no_repeats};
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::anchors::clients::{self, Client, Report, Tool, INSTALL};
use crate::lab::rig::anchors::haproxy::Haproxy;
use crate::lab::rig::anchors::nginx::Nginx;
use crate::lab::rig::child::{status_kib, ServerChild};
use crate::lab::rig::quota::{CpuQuota, BOUND_SHARE};
use crate::lab::Settings;
use crate::CliResult;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CONNS: u32 = 100;
const QUICK_SECONDS: u32 = 1;
const FULL_SECONDS: u32 = 10;
const QUICK_REPS: usize = 1;
const FULL_REPS: usize = 5;
const BUDGET_S: f64 = 30.0;
const QUICK_BULK_MIB: u32 = 256;
const FULL_BULK_MIB: u32 = 1024;
/// The count of mostly idle proxied connections.
const MANY: usize = 10_000;
/// Descriptors a proxy keeps beside its connections (listener, poller,
/// ring, pipes, std streams) with room to spare.
const SPARE_FDS: u64 = 200;
/// Issue 33's goals against haproxy: requests/s, CPU per request (judged as
/// what this machine allows: no relay measured here reaches them).
const GOAL_RATE: f64 = 1.5;
const GOAL_CPU: f64 = 0.65;
/// On epoll against haproxy: what the floor is judged against, as the
/// machine's part.
const GOAL_EPOLL: f64 = 1.2;
/// iomux-epoll against the floor on the same mechanism: its own part.
const GOAL_OF_FLOOR: f64 = 0.95;
/// A side using at least this share of its CPU sets the pace.
const SATURATED: f64 = 0.95;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proxy {
    /// `--splice auto`, the default.
    Iomux(Backend),
    /// `--splice off`: every byte copied through the proxy (bulk only),
    /// the measurement that chooses the default.
    Copying(Backend),
    Haproxy,
    /// c/relay_floor.c: one recv and one send per message, nothing else.
    Floor,
    /// The same on io_uring (iomux-peers' uring_relay_floor.rs).
    UringFloor,
}

impl std::fmt::Display for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proxy::Iomux(b) => write!(f, "iomux-{b}"),
            Proxy::Copying(b) => write!(f, "iomux-{b}-copying"),
            Proxy::Haproxy => f.write_str("haproxy"),
            Proxy::Floor => f.write_str("floor"),
            Proxy::UringFloor => f.write_str("uring-floor"),
        }
    }
}

impl std::str::FromStr for Proxy {
    type Err = String;
    fn from_str(s: &str) -> Result<Proxy, String> {
        match s {
            "haproxy" => Ok(Proxy::Haproxy),
            "floor" => Ok(Proxy::Floor),
            "uring-floor" => Ok(Proxy::UringFloor),
            _ if s.ends_with("-copying") => s
                .strip_suffix("-copying")
                .and_then(iomux_server)
                .unwrap_or_else(|| Err(format!("unknown proxy '{s}'")))
                .map(Proxy::Copying),
            _ => iomux_server(s).unwrap_or_else(|| Err(format!("unknown proxy '{s}'"))).map(Proxy::Iomux),
        }
    }
}

/// What goes through the proxies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// wrk's GETs to nginx.
    Requests,
    /// One connection's bulk transfer to a sink.
    Bulk,
    /// Many idle proxied connections.
    Many,
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Load::Requests => "requests",
            Load::Bulk => "bulk",
            Load::Many => "many",
        })
    }
}

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// iomux backends, comma-separated [default: epoll, uring; --full: all six]
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend)]
    pub backends: Option<Vec<Backend>>,
    /// Loads, comma-separated: requests, bulk, many [default: all three]
    #[arg(long, value_delimiter = ',')]
    pub loads: Option<Vec<Load>>,
    #[arg(long, help = format!("Rounds before any is added for undecided claims; proxies in another order each \
                                 round [default: {QUICK_REPS}; --full: {FULL_REPS}]"))]
    pub reps: Option<usize>,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3600),
          help = format!("Seconds per wrk run [default: {QUICK_SECONDS}; --full: {FULL_SECONDS}]"))]
    pub seconds: Option<u32>,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536),
          help = format!("MiB sent through each proxy in a bulk cell [default: {QUICK_BULK_MIB}; --full: {FULL_BULK_MIB}]"))]
    pub bulk_mib: Option<u32>,
    /// Proxied connections in a many cell [default: 10,000, or as many as
    /// one process's open-files limit allows at two descriptors each]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub many: Option<u32>,
    #[arg(long, value_parser = crate::lab::harness::parse_budget, help = crate::lab::harness::budget_help(BUDGET_S, ""))]
    pub budget: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(with = "by_names")]
    proxies: Vec<Proxy>,
    loads: Vec<Load>,
    /// Tools or facilities missing, with why; their cells are not run.
    missing: Vec<String>,
    wrk: Option<PathBuf>,
    nginx: Option<PathBuf>,
    haproxy: Option<PathBuf>,
    conns: u32,
    seconds: u32,
    bulk_mib: u32,
    many: usize,
    /// Why `many` is less than the 10,000, when it is.
    many_limited: Option<String>,
    first_rounds: usize,
    budget_s: f64,
    pinned: Option<(usize, usize)>,
    bound_share: f64,
    saturated_at: f64,
}

/// One cell: a proxy under a load.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    #[serde(with = "by_name")]
    proxy: Proxy,
    load: Load,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.proxy, self.load)
    }
}

/// One run of one cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// requests: requests/s (wrk's); bulk: MB/s through the proxy; many: none.
    pub rate: Option<f64>,
    /// requests: proxy CPU µs per request; bulk: proxy CPU s per GB;
    /// many: proxy RSS bytes per connection.
    pub cost: f64,
    /// requests: wrk's report.
    pub report: Option<Report>,
    /// Shares of one CPU over the run: the proxy's, and the client's (wrk);
    /// none for many.
    pub proxy_util: Option<f64>,
    pub client_util: Option<f64>,
    /// Periods in which the quota held the proxy back.
    pub throttled_periods: Option<u64>,
}

/// A proxy running for one cell.
enum Running {
    Child(ServerChild),
    Haproxy(Haproxy),
}

impl Running {
    fn start(p: &Params, arm: &Arm, upstream: SocketAddr, maxconn: usize, cpu: Option<usize>) -> CliResult<Running> {
        let flags = ["--upstream".to_string(), upstream.to_string()];
        Ok(match arm.proxy {
            Proxy::Iomux(b) => Running::Child(ServerChild::start_with(b, "proxy", cpu, None, 1, &flags)?),
            Proxy::Copying(b) => {
                let flags = [&flags[..], &["--splice".to_string(), "off".to_string()]].concat();
                Running::Child(ServerChild::start_with(b, "proxy", cpu, None, 1, &flags)?)
            }
            Proxy::Floor => Running::Child(ServerChild::start_peer_with("c-relay-floor", cpu, &flags)?),
            Proxy::UringFloor => Running::Child(ServerChild::start_peer_with("uring-relay-floor", cpu, &flags)?),
            Proxy::Haproxy => {
                let program = p.haproxy.as_ref().ok_or("haproxy not found")?;
                // Idle connections splice nothing, and the pipes would take
                // descriptors the many cell needs.
                let splice = arm.load != Load::Many;
                Running::Haproxy(Haproxy::start(program, upstream, maxconn, splice, cpu)?)
            }
        })
    }
    fn addr(&self) -> SocketAddr {
        match self {
            Running::Child(c) => c.addr,
            Running::Haproxy(h) => h.addr,
        }
    }
    fn pid(&self) -> u32 {
        match self {
            Running::Child(c) => c.pid,
            Running::Haproxy(h) => h.pid(),
        }
    }
    fn stop(self) -> CliResult<()> {
        match self {
            Running::Child(c) => c.stop().map(drop),
            Running::Haproxy(h) => h.stop(),
        }
    }
}

fn cpu_of(pid: u32) -> Duration {
    crate::os::process_cpu(pid).unwrap_or_default()
}

/// Runs `f` with the proxy, in the quota, then stops it (whatever `f` did).
fn with_proxy<T>(
    p: &Params,
    arm: &Arm,
    upstream: SocketAddr,
    maxconn: usize,
    f: impl FnOnce(&Running, &CpuQuota) -> Result<T, String>,
) -> Result<T, String> {
    let (server_cpu, _) = crate::lab::rig::cell::cpus();
    let quota = CpuQuota::new(BOUND_SHARE)?;
    let proxy = Running::start(p, arm, upstream, maxconn, server_cpu).map_err(|e| e.to_string())?;
    let result = quota.add(proxy.pid()).and_then(|()| f(&proxy, &quota));
    let stopped = proxy.stop().map_err(|e| e.to_string());
    let value = result?;
    stopped?;
    Ok(value)
}

fn requests(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (server_cpu, client_cpu) = crate::lab::rig::cell::cpus();
    let wrk = p.wrk.as_ref().ok_or("wrk not found")?;
    let nginx = Nginx::start(p.nginx.as_ref().ok_or("nginx not found")?, server_cpu).map_err(|e| e.to_string())?;
    let run = with_proxy(p, arm, nginx.addr, 4096, |proxy, quota| {
        answers_plaintext(proxy.addr()).map_err(|e| format!("{}: through the proxy: {e}", arm.proxy))?;
        let url = format!("http://{}/plaintext", proxy.addr());
        let args = clients::args(Client::Wrk, &url, p.conns, 1, p.seconds, None);
        let before = cpu_of(proxy.pid());
        let (report, client) =
            clients::run(Client::Wrk, wrk, &args, client_cpu, p.seconds).map_err(|e| e.to_string())?;
        let used = cpu_of(proxy.pid()).saturating_sub(before);
        Ok(Run {
            rate: Some(report.requests_per_sec),
            cost: used.as_secs_f64() * 1e6 / report.requests.max(1) as f64,
            proxy_util: Some(used.as_secs_f64() / report.seconds),
            client_util: Some(client.as_secs_f64() / report.seconds),
            throttled_periods: quota.throttled_periods(),
            report: Some(report),
        })
    });
    nginx.stop().map_err(|e| e.to_string())?;
    run
}

fn bulk(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (_, client_cpu) = crate::lab::rig::cell::cpus();
    let sink = ServerChild::start_with(Backend::Epoll, "sink", client_cpu, None, 1, &[]).map_err(|e| e.to_string())?;
    let bytes = u64::from(p.bulk_mib) << 20;
    let run = with_proxy(p, arm, sink.addr, 4096, |proxy, quota| {
        let addr = proxy.addr();
        let sender = std::thread::spawn(move || -> Result<Duration, String> {
            if let Some(cpu) = client_cpu {
                crate::os::pin_to_cpu(cpu).map_err(|e| format!("pinning the sender: {e}"))?;
            }
            let mut s = TcpStream::connect(addr).map_err(|e| format!("connect to the proxy: {e}"))?;
            let chunk = vec![0x5a_u8; 256 << 10];
            let started = Instant::now();
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                s.write_all(&chunk[..n]).map_err(|e| format!("sending through the proxy: {e}"))?;
                left -= n as u64;
            }
            // The proxy's end of input, then its own: every byte went through.
            s.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).map_err(|e| format!("waiting for the proxy's end: {e}"))?;
            Ok(started.elapsed())
        });
        let before = cpu_of(proxy.pid());
        let took = sender.join().map_err(|_| "the sender panicked".to_string())??;
        let used = cpu_of(proxy.pid()).saturating_sub(before);
        Ok(Run {
            rate: Some(bytes as f64 / 1e6 / took.as_secs_f64()),
            cost: used.as_secs_f64() / (bytes as f64 / 1e9),
            report: None,
            proxy_util: Some(used.as_secs_f64() / took.as_secs_f64()),
            client_util: None,
            throttled_periods: quota.throttled_periods(),
        })
    });
    let stats = sink.stop().map_err(|e| e.to_string())?.typed;
    let run = run?;
    if stats.bytes_in != bytes {
        return Err(format!("the sink got {} bytes of {bytes}", stats.bytes_in));
    }
    Ok(run)
}

fn many(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (_, client_cpu) = crate::lab::rig::cell::cpus();
    let echo = ServerChild::start_with(Backend::Epoll, "echo", client_cpu, None, 1, &[]).map_err(|e| e.to_string())?;
    let run = with_proxy(p, arm, echo.addr, p.many + 64, |proxy, quota| {
        let rss = || status_kib(proxy.pid(), "VmRSS:") * 1024;
        let before = rss();
        let mut conns = Vec::with_capacity(p.many);
        for i in 0..p.many {
            let mut s = TcpStream::connect(proxy.addr()).map_err(|e| format!("connection {i}: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
            let mut b = [0u8; 1];
            s.write_all(b"x").and_then(|()| s.read_exact(&mut b)).map_err(|e| format!("connection {i}: {e}"))?;
            conns.push(s);
        }
        // Idle now: what the proxy holds for them.
        std::thread::sleep(Duration::from_millis(200));
        let after = rss();
        drop(conns);
        Ok(Run {
            rate: None,
            cost: after.saturating_sub(before) as f64 / p.many as f64,
            report: None,
            proxy_util: None,
            client_util: None,
            throttled_periods: quota.throttled_periods(),
        })
    });
    echo.stop().map_err(|e| e.to_string())?;
    run
}

/// Whether `proxy` runs under `load`: the floor under requests only, the
/// copying iomux under bulk only.
fn runs_under(proxy: Proxy, load: Load) -> bool {
    match proxy {
        Proxy::Floor | Proxy::UringFloor => load == Load::Requests,
        Proxy::Copying(_) => load == Load::Bulk,
        Proxy::Iomux(_) | Proxy::Haproxy => true,
    }
}

/// Every cell.
fn every_cell(p: &Params) -> Vec<Arm> {
    let mut arms = Vec::new();
    for &load in &p.loads {
        for &proxy in &p.proxies {
            if runs_under(proxy, load) {
                arms.push(Arm { proxy, load });
            }
        }
    }
    arms
}

fn iomux_arms(p: &Params, load: Load) -> Vec<Arm> {
    p.proxies.iter().filter(|x| matches!(x, Proxy::Iomux(_))).map(|&proxy| Arm { proxy, load }).collect()
}

/// The best iomux value of `field` in a round (highest, or lowest for a cost).
fn best(r: &RoundView<Arm, Run>, arms: &[Arm], field: fn(&Run) -> f64, lowest: bool) -> Option<f64> {
    let values = arms.iter().map(|a| r.get(a).map(field)).collect::<Option<Vec<f64>>>()?;
    values.into_iter().reduce(if lowest { f64::min } else { f64::max })
}

pub struct ProxyBench;

impl Experiment for ProxyBench {
    experiment_types!(Args, Params, Arm, Run);

    const ENTRY: Entry = Entry {
        name: "proxy",
        label: "E9",
        title: "iomux serve --proto proxy beside haproxy, in one CPU quota",
        smoke: &[
            "--backends",
            "epoll,uring",
            "--reps",
            "1",
            "--seconds",
            "1",
            "--bulk-mib",
            "16",
            "--many",
            "200",
            "--budget",
            "0",
        ],
        needs: &["wrk", "nginx", "haproxy"],
    };
    const PUBLISHED: &'static str = "nothing: the documents relayed nothing. Issue 33 asked, in the same CPU quota, \
                                     for 1.5 times haproxy's requests/s at 0.65 times its CPU per request (1.2 times \
                                     on epoll): no relay on this machine reaches that (the floors), so iomux is \
                                     judged against the floors, and for bulk against haproxy's CPU per GB.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let quick = [Backend::Epoll, Backend::Uring];
        let backends =
            args.backends.clone().unwrap_or_else(|| if settings.full { Backend::ALL.to_vec() } else { quick.to_vec() });
        no_repeats("--backends", &backends)?;
        let loads = args.loads.clone().unwrap_or_else(|| vec![Load::Requests, Load::Bulk, Load::Many]);
        no_repeats("--loads", &loads)?;
        let first_rounds = args.reps.unwrap_or(if settings.full { FULL_REPS } else { QUICK_REPS });
        if first_rounds == 0 {
            return Err("--reps must be at least 1".into());
        }
        let mut missing = Vec::new();
        let mut found = |tool: Tool| tool.find().map_err(|why| missing.push(why)).ok();
        let (wrk, nginx, haproxy) = (found(Tool::Wrk), found(Tool::Nginx), found(Tool::Haproxy));
        if let Err(why) = crate::lab::rig::quota::available() {
            missing.push(format!("{why}: every cell runs in a CPU quota (root and a cgroup CPU controller)"));
        }
        // Each proxied connection is two descriptors in the proxy's one
        // process; this process holds the clients' ends.
        crate::os::raise_nofile_limit().map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
        let (soft, _) = crate::os::nofile_limit();
        let fits = (soft.saturating_sub(SPARE_FDS) / 2) as usize;
        let wanted = args.many.map_or(MANY, |n| n as usize);
        let many = wanted.min(fits);
        let many_limited = (many < wanted).then(|| {
            format!(
                "{wanted} proxied connections need {} descriptors in one process; the open-files limit here is \
                 {soft}, so {many} were held",
                2 * wanted as u64 + SPARE_FDS
            )
        });
        if many == 0 {
            return Err(format!("the open-files limit ({soft}) leaves no room for proxied connections").into());
        }
        let mut proxies: Vec<Proxy> = backends.iter().copied().map(Proxy::Iomux).collect();
        proxies.extend(backends.iter().copied().map(Proxy::Copying));
        proxies.extend([Proxy::Haproxy, Proxy::Floor, Proxy::UringFloor]);
        Ok(Params {
            proxies,
            loads,
            missing,
            wrk,
            nginx,
            haproxy,
            conns: CONNS,
            seconds: args.seconds.unwrap_or(if settings.full { FULL_SECONDS } else { QUICK_SECONDS }),
            bulk_mib: args.bulk_mib.unwrap_or(if settings.full { FULL_BULK_MIB } else { QUICK_BULK_MIB }),
            many,
            many_limited,
            first_rounds,
            budget_s: args.budget.unwrap_or_else(|| crate::lab::harness::default_budget(BUDGET_S, settings)),
            pinned: match crate::lab::rig::cell::cpus() {
                (Some(s), Some(c)) => Some((s, c)),
                _ => None,
            },
            bound_share: BOUND_SHARE,
            saturated_at: SATURATED,
        })
    }

    fn budget(p: &Params, _: &Settings) -> Duration {
        Duration::from_secs_f64(p.budget_s)
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Run>> {
        let mut claims = Vec::new();
        let at = |proxy: Proxy, load: Load| Arm { proxy, load };
        let rate = |r: &Run| r.rate.unwrap_or(f64::NAN);
        let cost = |r: &Run| r.cost;
        let haproxy_vs = |load: Load, name: String, needed: Needed, field: fn(&Run) -> f64, lowest: bool| {
            let iomux = iomux_arms(p, load);
            let h = at(Proxy::Haproxy, load);
            let mut arms = iomux.clone();
            arms.push(h);
            Spec::iomux(name, needed, arms, move |r| Some(best(r, &iomux, field, lowest)? / field(r.get(&h)?)))
        };
        if p.loads.contains(&Load::Requests) {
            // The goals against haproxy are what this machine
            // allows, not iomux's: no relay here reaches them (the floors,
            // below), and iomux-uring's time is 94% the kernel's
            // (docs/experiments/proxy.md). iomux is judged against the floors.
            let name = "E9 bound requests: iomux best req/s / haproxy's".to_string();
            claims.push(haproxy_vs(Load::Requests, name, Needed::AtLeast(GOAL_RATE), rate, false).machine());
            let name = "E9 bound requests: iomux best CPU per request / haproxy's".to_string();
            claims.push(haproxy_vs(Load::Requests, name, Needed::AtMost(GOAL_CPU), cost, true).machine());
            let (floor, haproxy) = (at(Proxy::Floor, Load::Requests), at(Proxy::Haproxy, Load::Requests));
            claims.push(
                Spec::iomux(
                    "E9 bound requests: a relay of recv and send alone (the C floor), req/s / haproxy's",
                    Needed::AtLeast(GOAL_EPOLL),
                    vec![floor, haproxy],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&floor)?.rate? / r.get(&haproxy)?.rate?),
                )
                .machine(),
            );
            // The io_uring floor: what an io_uring relay may reach here.
            let uring_floor = at(Proxy::UringFloor, Load::Requests);
            claims.push(
                Spec::iomux(
                    "E9 bound requests: a relay of io_uring receives and sends alone (the io_uring floor), req/s / \
                     haproxy's",
                    Needed::AtLeast(GOAL_RATE),
                    vec![uring_floor, haproxy],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&uring_floor)?.rate? / r.get(&haproxy)?.rate?),
                )
                .machine(),
            );
            claims.push(
                Spec::iomux(
                    "E9 bound requests: the io_uring floor's CPU per request / haproxy's",
                    Needed::AtMost(GOAL_CPU),
                    vec![uring_floor, haproxy],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&uring_floor)?.cost / r.get(&haproxy)?.cost),
                )
                .machine(),
            );
            let uring = at(Proxy::Iomux(Backend::Uring), Load::Requests);
            if p.proxies.contains(&uring.proxy) {
                claims.push(Spec::iomux(
                    "E9 bound requests: iomux-uring req/s / the io_uring floor's",
                    Needed::AtLeast(GOAL_OF_FLOOR),
                    vec![uring, uring_floor],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&uring)?.rate? / r.get(&uring_floor)?.rate?),
                ));
            }
            let epoll = at(Proxy::Iomux(Backend::Epoll), Load::Requests);
            if p.proxies.contains(&epoll.proxy) {
                claims.push(Spec::iomux(
                    "E9 bound requests: iomux-epoll req/s / the C floor's",
                    Needed::AtLeast(GOAL_OF_FLOOR),
                    vec![epoll, floor],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&epoll)?.rate? / r.get(&floor)?.rate?),
                ));
            }
            let all: Vec<Arm> = p
                .proxies
                .iter()
                .filter(|&&proxy| runs_under(proxy, Load::Requests))
                .map(|&proxy| at(proxy, Load::Requests))
                .collect();
            let keep = all.clone();
            claims.push(Spec::iomux("E9 errors reported by wrk", Needed::AtMost(0.0), all, move |r| {
                keep.iter().map(|a| r.get(a).and_then(|run: &Run| run.report.as_ref()).map(|w| w.errors as f64)).sum()
            }));
        }
        if p.loads.contains(&Load::Bulk) {
            let name = "E9 bound bulk: iomux best CPU per GB / haproxy's".to_string();
            claims.push(haproxy_vs(Load::Bulk, name, Needed::AtMost(1.0), cost, true));
            // What chooses --splice's default: splicing against copying.
            for &proxy in &p.proxies {
                let Proxy::Iomux(b) = proxy else { continue };
                if !p.proxies.contains(&Proxy::Copying(b)) {
                    continue;
                }
                let (spliced, copied) = (at(proxy, Load::Bulk), at(Proxy::Copying(b), Load::Bulk));
                claims.push(Spec::iomux(
                    format!("E9 bound bulk: iomux-{b} CPU per GB splicing (--splice auto) / copying (--splice off)"),
                    Needed::AtMost(1.0),
                    vec![spliced, copied],
                    move |r: &RoundView<Arm, Run>| Some(r.get(&spliced)?.cost / r.get(&copied)?.cost),
                ));
            }
        }
        if p.loads.contains(&Load::Many) {
            let name = format!("E9 many ({}): iomux best RSS per idle proxied connection / haproxy's", p.many);
            claims.push(haproxy_vs(Load::Many, name, Needed::AtMost(1.0), cost, true));
        }
        claims
    }

    fn metrics() -> Vec<Metric<Run>> {
        vec![
            Metric { name: "rate", unit: "1/s", higher_is_better: true, get: |r| r.rate.unwrap_or(f64::NAN) },
            Metric { name: "cost", unit: "us", higher_is_better: false, get: |r| r.cost },
        ]
    }

    fn unit(arm: &Arm, metric: &Metric<Run>) -> &'static str {
        match (arm.load, metric.name) {
            (Load::Requests, "rate") => "1/s",
            (Load::Requests, _) => "us",
            (Load::Bulk, "rate") => "MB/s",
            (Load::Bulk, _) => "s/GB",
            (Load::Many, "rate") => "-",
            (Load::Many, _) => "B",
        }
    }

    fn first_rounds(p: &Params) -> usize {
        p.first_rounds
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Run>) -> Vec<Arm> {
        every_cell(p)
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Run>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Run>> {
        let missing = format!("{}; install with {INSTALL}", p.missing.join("; "));
        if !p.missing.is_empty() {
            eprintln!("proxy: {missing}. The cells that need them are not run.");
        }
        let quota = crate::lab::rig::quota::available().is_ok();
        Ok(Box::new(move |a: &Arm| -> Measured<Run> {
            let needs_haproxy = a.proxy == Proxy::Haproxy && p.haproxy.is_none();
            let needs_http = a.load == Load::Requests && (p.wrk.is_none() || p.nginx.is_none());
            if !quota || needs_haproxy || needs_http {
                return Ok(Err(missing.clone()));
            }
            Ok(match a.load {
                Load::Requests => requests(p, a),
                Load::Bulk => bulk(p, a),
                Load::Many => many(p, a),
            })
        }))
    }

    fn reference(arm: &Arm) -> bool {
        arm.proxy == Proxy::Haproxy && arm.load == Load::Requests
    }
}

impl Shown for ProxyBench {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        if !p.missing.is_empty() {
            view.intro.push(format!("Not run: {}; install with {INSTALL}.", p.missing.join("; ")));
        }
        if let Some(why) = &p.many_limited {
            view.intro.push(format!("many: {why}."));
        }
        for &load in &p.loads {
            let haproxy = env.estimate(&Arm { proxy: Proxy::Haproxy, load }, |r| r.rate.unwrap_or(f64::NAN));
            let haproxy_cost = env.estimate(&Arm { proxy: Proxy::Haproxy, load }, |r| r.cost);
            let (caption, rate, cost) = match load {
                Load::Requests => (
                    "requests: wrk -t1 -c100 GET /plaintext through each proxy to nginx",
                    "requests/s",
                    "proxy CPU us/req",
                ),
                Load::Bulk => ("bulk: one connection's bytes through each proxy to a sink", "MB/s", "proxy CPU s/GB"),
                Load::Many => ("many: idle proxied connections", "-", "proxy RSS bytes/conn"),
            };
            let mut t = TableView {
                caption: format!("{caption}, every proxy in a {:.0}% CPU quota", p.bound_share * 100.0),
                header: [
                    "proxy",
                    "runs",
                    rate,
                    "/ haproxy",
                    cost,
                    "/ haproxy",
                    "proxy CPU",
                    "client CPU",
                    "p50 us",
                    "p99 us",
                    "errors",
                ]
                .map(String::from)
                .to_vec(),
                rows: Vec::new(),
            };
            for &proxy in &p.proxies {
                let arm = Arm { proxy, load };
                if !runs_under(proxy, load) {
                    continue;
                }
                let mut name = proxy.to_string();
                if let Some(why) = env.note(&arm) {
                    name = format!("{name} {}", view.footnote(why));
                }
                let med = |f: &dyn Fn(&Run) -> f64| env.estimate(&arm, f).map(|e| e.median);
                let fixed = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
                let pct =
                    |v: Option<f64>| v.filter(|v| v.is_finite()).map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
                let client_util = med(&|r| r.client_util.unwrap_or(f64::NAN));
                if client_util.is_some_and(|u| u.is_finite() && u >= p.saturated_at) {
                    let why = format!(
                        "{arm}: the client used {:.0}% of its CPU: it set the pace",
                        client_util.unwrap_or(0.0) * 100.0
                    );
                    name = format!("{name} {}", view.footnote(&why));
                }
                if env.kept(&arm).any(|r| r.throttled_periods == Some(0)) && load != Load::Many {
                    let why = format!("{arm}: the quota never held the proxy back in some runs");
                    name = format!("{name} {}", view.footnote(&why));
                }
                let r = env.estimate(&arm, |r| r.rate.unwrap_or(f64::NAN));
                let c = env.estimate(&arm, |r| r.cost);
                let wrk =
                    |f: fn(&Report) -> Option<f64>| med(&move |r| r.report.as_ref().and_then(f).unwrap_or(f64::NAN));
                t.rows.push(vec![
                    name,
                    env.kept(&arm).count().to_string(),
                    shown(r),
                    fixed(r.zip(haproxy).map(|(r, h)| r.median / h.median), 2),
                    shown(c),
                    fixed(c.zip(haproxy_cost).map(|(c, h)| c.median / h.median), 2),
                    pct(med(&|r| r.proxy_util.unwrap_or(f64::NAN))),
                    pct(client_util),
                    fixed(wrk(|w| w.p50_us), 0),
                    fixed(wrk(|w| w.p99_us), 0),
                    env.kept(&arm).filter_map(|r| r.report.as_ref()).map(|w| w.errors).sum::<u64>().to_string(),
                ]);
            }
            view.tables.push(t);
        }
        if env.takes.iter().any(|t| t.arm.load == Load::Requests) {
            view.svg = Some(svg(env)?);
        }
        Ok(view)
    }
}

fn intro(p: &Params) -> String {
    let placement = match p.pinned {
        Some((s, c)) => format!(
            "Every proxy runs pinned to CPU {s} in a cgroup CPU quota of {:.0}% of one CPU; its upstream (nginx for \
             requests) on CPU {s} outside the quota; the client (wrk, the bulk sender) on CPU {c}.",
            p.bound_share * 100.0
        ),
        None => "This machine has one CPU, so nothing is pinned.".to_string(),
    };
    format!(
        "{placement} Proxies: `iomux serve --proto proxy --upstream ADDR --backend B` (one loop; `--splice auto`, and for bulk \
         also `--splice off`: copying), haproxy (tcp mode, \
         `nbthread 1`, `option splice-auto`) and the floor (`iomux peer --server c-relay-floor`: one recv and one \
         send per message, nothing else; requests only) and its io_uring twin (`uring-relay-floor`: one receive \
         and one send per message, SINGLE_ISSUER | DEFER_TASKRUN, one io_uring_enter per turn). requests: `wrk -t1 -c{c} -d{s}s --latency` through each \
         proxy to nginx (`return 200`): requests/s are wrk's; proxy CPU: user + system time of the proxy's process \
         over wrk's run, over its requests. bulk: one connection sends {b} MiB through the proxy to `iomux serve \
         --proto sink`, then waits for the proxy's end: proxy CPU per GB and MB/s. many: {m} connections through \
         the proxy to an echo server, each echoes one byte and is then held: the proxy's RSS growth over them. A \
         fresh proxy (and upstream) per cell. {r} rounds first, each in another order, then more for undecided \
         claims; cells: median ± half its 95% interval. The floor's claim is what this machine allows: on this \
         kernel almost all of a proxy's time is TCP over loopback, the same for every proxy.",
        c = p.conns,
        s = p.seconds,
        b = p.bulk_mib,
        m = p.many,
        r = p.first_rounds,
    )
}

fn svg(env: &Envelope<Params, Arm, Run>) -> CliResult<String> {
    let p = &env.params;
    let series: Vec<plot::BarSeries> = p
        .proxies
        .iter()
        .filter(|&&proxy| runs_under(proxy, Load::Requests))
        .map(|&proxy| plot::BarSeries {
            name: proxy.to_string(),
            values: vec![env
                .estimate(&Arm { proxy, load: Load::Requests }, |r| r.rate.unwrap_or(f64::NAN))
                .map_or((f64::NAN, f64::NAN, f64::NAN), |e| (e.median, e.lo, e.hi))],
        })
        .collect();
    plot::grouped_bars(
        "E9: requests/s through each proxy to nginx, wrk -c100, every proxy in one CPU quota (median, 95% interval)",
        "load",
        "requests/s",
        &["requests".to_string()],
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::harness::trial::Quiet;

    fn params(proxies: Vec<Proxy>) -> Params {
        Params {
            proxies,
            loads: vec![Load::Requests, Load::Bulk, Load::Many],
            missing: vec![],
            wrk: None,
            nginx: None,
            haproxy: None,
            conns: CONNS,
            seconds: 1,
            bulk_mib: 16,
            many: 100,
            many_limited: None,
            first_rounds: 6,
            budget_s: 0.0,
            pinned: None,
            bound_share: BOUND_SHARE,
            saturated_at: SATURATED,
        }
    }

    fn run(rate: f64, cost: f64) -> Run {
        let report = Report { requests: rate as u64, seconds: 1.0, requests_per_sec: rate, ..Report::default() };
        Run {
            rate: rate.is_finite().then_some(rate),
            cost,
            report: Some(report),
            proxy_util: Some(0.5),
            client_util: Some(0.5),
            throttled_periods: Some(3),
        }
    }

    #[test]
    fn claims_take_the_best_iomux_and_the_floor_apart() {
        let p = params(vec![
            Proxy::Iomux(Backend::Epoll),
            Proxy::Iomux(Backend::Uring),
            Proxy::Copying(Backend::Epoll),
            Proxy::Haproxy,
            Proxy::Floor,
            Proxy::UringFloor,
        ]);
        let mut trial = Trial::new(&Quiet, "test", Duration::ZERO);
        for _ in 0..6 {
            trial
                .round(&every_cell(&p), &mut |a: &Arm| {
                    Ok(Ok(match (a.proxy, a.load) {
                        (Proxy::Haproxy, Load::Requests) => run(50_000.0, 10.0),
                        (Proxy::Floor, _) => run(60_000.0, 8.0),
                        (Proxy::Iomux(Backend::Epoll), Load::Requests) => run(60_000.0, 8.3),
                        (_, Load::Requests) => run(70_000.0, 7.0),
                        (Proxy::Haproxy | Proxy::Copying(_), Load::Bulk) => run(900.0, 0.5),
                        (_, Load::Bulk) => run(1000.0, 0.4),
                        (Proxy::Haproxy, _) => run(f64::NAN, 4000.0),
                        _ => run(f64::NAN, 300.0),
                    }))
                })
                .unwrap();
        }
        let claims: Vec<_> = ProxyBench::claims(&p).iter().map(|s| trial.judge(s)).collect();
        let median =
            |q: &str| claims.iter().find(|c| c.quantity.starts_with(q)).and_then(|c| c.estimate).map(|e| e.median);
        assert_eq!(median("E9 bound requests: iomux best req/s"), Some(1.4));
        assert_eq!(median("E9 bound requests: iomux best CPU per request"), Some(0.7));
        assert_eq!(median("E9 bound requests: a relay of recv and send alone"), Some(1.2));
        assert_eq!(median("E9 bound requests: iomux-epoll req/s / the C floor's"), Some(1.0));
        assert_eq!(median("E9 bound bulk: iomux best"), Some(0.8));
        assert_eq!(median("E9 bound bulk: iomux-epoll CPU per GB splicing"), Some(0.8));
        assert_eq!(median("E9 many"), Some(0.075));
        assert_eq!(median("E9 errors"), Some(0.0));
        let floor = claims.iter().find(|c| c.quantity.contains("C floor), req/s")).unwrap();
        assert_eq!(floor.source, crate::lab::harness::claim::Source::Machine);
        // No claim asks for a cell that does not run (the copying proxy
        // runs under bulk alone, the floor under requests alone).
        let cells = every_cell(&p);
        for spec in ProxyBench::claims(&p) {
            assert!(spec.arms.iter().all(|a| cells.contains(a)), "{}: {:?}", spec.quantity, spec.arms);
        }
        assert!(cells.iter().all(|a| runs_under(a.proxy, a.load)));
    }

    #[test]
    fn proxies_print_and_parse_back() {
        for proxy in [
            Proxy::Iomux(Backend::EpollEt),
            Proxy::Copying(Backend::Uring),
            Proxy::Haproxy,
            Proxy::Floor,
            Proxy::UringFloor,
        ] {
            assert_eq!(proxy.to_string().parse::<Proxy>(), Ok(proxy));
        }
    }
}
