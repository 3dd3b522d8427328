//! E3 `sink`: 40 connections send 100-byte messages without pause; the
//! server only reads. What it costs the server per byte (seed 002).

use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{BackendDefaults, QuickFull, SharedFlags, Standard};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::harness::{by_name, by_names, envelope::Envelope};
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot;
use crate::lab::render::table::kinds;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::cell;
use crate::lab::rig::child::ServerChild;
use crate::lab::rig::lan;
use crate::lab::rig::netns::{Net, Side};
use crate::lab::Settings;
use crate::load::LoadMode;
use crate::CliResult;
use anyhow::bail;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SENDERS: usize = 40;
const SECONDS: QuickFull<f64> = QuickFull { quick: 0.5, full: 10.0 };

/// The article's epoll traffic, 97,950 kbit/s, as 100-byte messages per second.
const PUBLISHED_RATE: f64 = PUBLISHED_KBIT_S * 1000.0 / 8.0 / 100.0;
/// The article's epoll sink, NIC-bound on its 100 Mbit LAN.
const PUBLISHED_KBIT_S: f64 = 97_950.0;

/// Every backend, quick or full.
#[derive(Clone, Debug, Default)]
pub struct Defaults;

impl BackendDefaults for Defaults {
    const BACKENDS: (&'static [Backend], &'static [Backend]) = (Backend::ALL, Backend::ALL);
}

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    #[arg(long, value_parser = parse_seconds,
          help = format!("Seconds of sending per cell {SECONDS}"))]
    pub seconds: Option<f64>,
    #[command(flatten)]
    pub shared: SharedFlags<Defaults, Standard>,
    #[command(flatten)]
    pub network: lan::NetworkFlag,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s}: must be a positive number of seconds")),
    }
}

/// One row of the article's table (its 100 Mbit NIC saturated).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PublishedRow {
    server: String,
    traffic: String,
    sys_share: String,
    idle_share: String,
    process_cpu: String,
    strace: String,
}

fn published_rows() -> Vec<PublishedRow> {
    let row = |server: &str, traffic: &str, sys: &str, idle: &str, cpu: &str, strace: &str| PublishedRow {
        server: server.into(),
        traffic: traffic.into(),
        sys_share: sys.into(),
        idle_share: idle.into(),
        process_cpu: cpu.into(),
        strace: strace.into(),
    };
    vec![
        row("poll", "95,165 kbit/s", "~78%", "~20%", "56.9%", "111,511 poll + 347,887 read"),
        row("epoll (ET)", "97,950 kbit/s", "~24%", "~74%", "9.9%", "323,798 epoll_wait + 654,077 read"),
    ]
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(with = "by_names")]
    backends: Vec<Backend>,
    senders: usize,
    msg_size: usize,
    seconds: f64,
    paced_msgs_per_sec: f64,
    #[serde(flatten)]
    rounds: Rounds,
    #[serde(with = "by_name")]
    load_backend: Backend,
    published: Vec<PublishedRow>,
    #[serde(flatten)]
    net: lan::Networks,
}

/// One cell: a backend, its senders paced to the article's NIC or not, on
/// loopback or on the emulated LAN (never paced: the link sets the pace).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    #[serde(with = "by_name")]
    backend: Backend,
    paced: bool,
    #[serde(default)]
    lan: bool,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match (self.lan, self.paced) {
            (true, _) => "lan",
            (false, true) => "paced",
            (false, false) => "loopback",
        };
        write!(f, "{}, {how}", self.backend)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub mb_per_sec: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub cpu_s_per_gb: f64,
    pub syscalls_per_mb: f64,
    pub syscalls: BTreeMap<String, u64>,
    /// On the LAN: the link's rate into the server while every sender is
    /// busy, in Mbit/s of frames (headers included, as a NIC counts).
    #[serde(default)]
    pub link_mbit_s: Option<f64>,
}

/// One run: SENDERS senders for `seconds` (paced or not) against a
/// `backend` sink started with `serve_flags`.
pub fn cell(backend: Backend, paced: bool, seconds: f64, serve_flags: &[String]) -> CliResult<Sample> {
    let c = cell::run_with_flags(backend, "sink", 0, serve_flags, |a| {
        a.conns = SENDERS;
        a.mode = LoadMode::Sink;
        a.duration = Some(seconds);
        a.rate = paced.then_some(PUBLISHED_RATE);
    })?;
    Ok(sample_of(&c.server.typed, c.result.seconds, None))
}

/// A run's figures from the server's stats over `seconds` of sending.
fn sample_of(s: &crate::stats::ServerStats, seconds: f64, link_mbit_s: Option<f64>) -> Sample {
    let bytes = s.bytes_in as f64;
    Sample {
        mb_per_sec: bytes / 1e6 / seconds,
        user_s: s.user_cpu_s,
        sys_s: s.sys_cpu_s,
        cpu_s_per_gb: s.cpu_s() / (bytes / 1e9),
        syscalls_per_mb: s.syscalls_total as f64 / (bytes / 1e6),
        syscalls: s.syscalls.clone(),
        link_mbit_s,
    }
}

/// Seconds of sending on the LAN: the link's rate is read from half a
/// second after the last sender connected (windows open) to half a second
/// before the senders stop.
const LAN_SECONDS: f64 = 4.0;
/// How long the senders may take to connect on the LAN.
const LAN_CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// One run on the LAN: the senders in the client's namespace, the server
/// in the other, the link's frames into the server counted.
fn lan_cell(net: &Net, backend: Backend) -> CliResult<Sample> {
    let server = ServerChild::start_in(net, backend, "sink", &lan::server_flags())?;
    let mut args = server.load_args(cell::LOAD_BACKEND, cell::cpus().1);
    (args.conns, args.mode, args.duration) = (SENDERS, LoadMode::Sink, Some(LAN_SECONDS));
    // The senders are connected when the server holds a descriptor for
    // each; their seconds of sending count from then.
    let before = server.fd_count();
    let mut load = lan::load(net, &args)?;
    let deadline = Instant::now() + LAN_CONNECT_WITHIN;
    while server.fd_count() < before + SENDERS {
        if Instant::now() > deadline {
            let connected = server.fd_count().saturating_sub(before);
            bail!("E3 on the LAN: {connected} of {SENDERS} senders connected within 5 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    let at =
        |s: f64| std::thread::sleep((start + Duration::from_secs_f64(s)).saturating_duration_since(Instant::now()));
    at(0.5);
    let (from, bytes_from) = (Instant::now(), net.rx_bytes(Side::Server)?);
    at(LAN_SECONDS - 0.5);
    let (to, bytes_to) = (Instant::now(), net.rx_bytes(Side::Server)?);
    if to.duration_since(from) < Duration::from_secs(1) {
        bail!("E3 on the LAN: the link was read over {:?}, not the 3 s planned", to - from);
    }
    let link_mbit_s = bytes_to.saturating_sub(bytes_from) as f64 * 8.0 / to.duration_since(from).as_secs_f64() / 1e6;
    if load.wait(Duration::from_secs(120), |_| {})?.is_none() {
        bail!("E3 on the LAN: the senders did not end within 120 s");
    }
    let result = load.result().map_err(anyhow::Error::msg)?;
    if result.errors.total > 0 {
        bail!("E3 on the LAN: the senders counted errors: {:?}", result.errors);
    }
    let stats = server.stop()?.typed;
    Ok(sample_of(&stats, result.seconds, Some(link_mbit_s)))
}

/// `backend`'s CPU per GB over `base`'s, both paced or both not.
fn cpu_ratio(p: &Params, backend: Backend, base: Backend, paced: bool, quantity: String) -> Spec<Arm, Sample> {
    let (a, b) = (Arm { backend, paced, lan: false }, Arm { backend: base, paced, lan: false });
    let both = p.backends.contains(&backend) && p.backends.contains(&base) && p.net.loopback();
    let arms = if both { vec![a, b] } else { vec![] };
    Spec::iomux(quantity, Needed::AtMost(1.0), arms, move |r: &RoundView<Arm, Sample>| {
        Some(r.get(&a)?.cpu_s_per_gb / r.get(&b)?.cpu_s_per_gb)
    })
}

pub struct Sink;

impl Experiment for Sink {
    experiment_types!(Args, Params, Arm, Sample, rounds: params.rounds);

    const ENTRY: Entry = Entry::new("sink", "E3", "40 senders, a server that only reads")
        .smoke("--seconds 0.3 --backends poll,epoll-et,uring --budget 5");
    const PUBLISHED: &'static str = "the article's test, 100 Mbit NIC saturated: poll moved 95,165 kbit/s with the \
                                     machine ~78% in the kernel; epoll (ET) 97,950 kbit/s with ~24%.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let net = args.network.plan(settings.full)?;
        Ok(Params {
            net,
            backends: args.shared.backends.chosen(settings.full)?,
            senders: SENDERS,
            msg_size: 100,
            seconds: args.seconds.unwrap_or(SECONDS.pick(settings)),
            paced_msgs_per_sec: PUBLISHED_RATE,
            rounds: args.shared.rounds.rounds(settings)?,
            load_backend: cell::LOAD_BACKEND,
            published: published_rows(),
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        let mut claims: Vec<Spec<Arm, Sample>> = [Backend::EpollEt, Backend::Uring]
            .into_iter()
            .map(|b| {
                cpu_ratio(p, b, Backend::Poll, true, format!("{b} CPU per GB / poll's, paced as the article's NIC"))
                    .documents(&format!("{b} uses less CPU per byte than poll"))
            })
            .collect();
        claims.push(cpu_ratio(
            p,
            Backend::Uring,
            Backend::EpollEt,
            false,
            "uring CPU per GB / epoll-et's, loopback".into(),
        ));
        if p.net.lan() {
            let arms: Vec<Arm> = p.backends.iter().map(|&backend| Arm { backend, paced: false, lan: true }).collect();
            let of_round = arms.clone();
            claims.push(
                Spec::iomux(
                    "on the LAN: Mbit/s of frames (headers included) on the 100 Mbit/s link into a server that only \
                     reads, slowest backend",
                    Needed::AtLeast(90.0),
                    arms,
                    move |r: &RoundView<Arm, Sample>| {
                        of_round
                            .iter()
                            .map(|a| r.get(a).and_then(|s| s.link_mbit_s))
                            .try_fold(f64::INFINITY, |m, v| Some(m.min(v?)))
                    },
                )
                .documents("a server that only reads is bound by the 100 Mbit/s link (the article: 97.95 Mbit/s)"),
            );
        }
        claims
    }

    fn network_is_own(a: &Arm) -> bool {
        a.lan
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![
            Metric { name: "MB/s", unit: "MB/s", higher_is_better: true, get: |s| s.mb_per_sec },
            Metric { name: "CPU s per GB", unit: "s", higher_is_better: false, get: |s| s.cpu_s_per_gb },
        ]
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Sample>) -> Vec<Arm> {
        let loopback = p.net.loopback();
        let on_loopback = [true, false]
            .into_iter()
            .filter(|_| loopback)
            .flat_map(|paced| p.backends.iter().map(move |&backend| Arm { backend, paced, lan: false }));
        let on_lan = p.backends.iter().filter(|_| p.net.lan()).map(|&backend| Arm { backend, paced: false, lan: true });
        on_loopback.chain(on_lan).collect()
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Sample>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        let mut lan = lan::OnDemand::new(&p.net.lan);
        Ok(Box::new(move |a: &Arm| -> Measured<Sample> {
            match a.lan {
                false => cell(a.backend, a.paced, p.seconds, &[]).map(Ok),
                true => lan.run(|net| lan_cell(net, a.backend)),
            }
        }))
    }
}

impl Shown for Sink {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let intro = format!(
            "{} senders of {}-byte messages for {} s per cell. Each backend runs twice: with the senders paced to \
             the article's measured 97.95 Mbit/s (its 100 Mbit NIC was the bottleneck, so the server mostly waited \
             for data: the regime the article's CPU figures describe), and unpaced on loopback, where every server \
             is busy copying bytes. The figure to compare is CPU per byte. Server CPU is the whole server \
             process's, including io_uring's SQPOLL kernel thread. Cells: median ± half its 95% interval.",
            p.senders, p.msg_size, p.seconds
        );
        let how = format!(
            "unpaced, {LAN_SECONDS} s a run; pace: the link's rate into the server from half a second after the last \
             sender connected to half a second \
             before the senders stop, in frames (headers included), as the article's NIC counted them"
        );
        let mut intro = vec![intro];
        intro.extend(lan::intro(&p.net.lan, "the senders", &how));
        let mut measured = TableView {
            caption: String::new(),
            header: [
                "backend",
                "pace",
                "runs",
                "MB/s",
                "CPU s per GB",
                "user s",
                "sys s",
                "syscalls per MB",
                "syscalls by kind (one run)",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        for (paced, lan) in [(true, false), (false, false), (false, true)] {
            for &backend in &p.backends {
                let arm = Arm { backend, paced, lan };
                let Some(last) = env.kept(&arm).last() else { continue };
                let med =
                    |f: fn(&Sample) -> f64| env.estimate(&arm, f).map_or("-".into(), |e| format!("{:.3}", e.median));
                measured.rows.push(vec![
                    backend.to_string(),
                    match (lan, paced) {
                        (true, _) => format!(
                            "LAN: {} Mbit/s of frames",
                            shown(env.estimate(&arm, |s| s.link_mbit_s.unwrap_or(f64::NAN)))
                        ),
                        (false, true) => "97.95 Mbit/s".into(),
                        (false, false) => "loopback".into(),
                    },
                    env.kept(&arm).count().to_string(),
                    shown(env.estimate(&arm, |s| s.mb_per_sec)),
                    shown(env.estimate(&arm, |s| s.cpu_s_per_gb)),
                    med(|s| s.user_s),
                    med(|s| s.sys_s),
                    med(|s| s.syscalls_per_mb),
                    kinds(&last.syscalls),
                ]);
            }
        }
        let published = TableView::new(
            "Published (the article's test; CPU share of one machine while the NIC was saturated):",
            &["published (100 Mbit NIC)", "traffic", "server %sys", "server %idle", "process CPU", "strace -c"],
            p.published
                .iter()
                .map(|r| {
                    [&r.server, &r.traffic, &r.sys_share, &r.idle_share, &r.process_cpu, &r.strace]
                        .map(|c| c.clone())
                        .to_vec()
                })
                .collect(),
        );
        let bars = |paced: bool| -> Vec<(String, f64)> {
            p.backends
                .iter()
                .map(|&backend| {
                    let e = env.estimate(&Arm { backend, paced, lan: false }, |s| s.cpu_s_per_gb);
                    (backend.to_string(), e.map_or(f64::NAN, |e| e.median))
                })
                .collect()
        };
        const CPU_PER_GB: &str = "CPU s per GB received (user + system)";
        let svg = plot::bar_panels(&[
            plot::Panel { title: "E3: CPU s per GB, paced (97.95 Mbit/s)", y_label: CPU_PER_GB, bars: bars(true) },
            plot::Panel { title: "E3: CPU s per GB, loopback", y_label: CPU_PER_GB, bars: bars(false) },
        ])?;
        // The plot is of loopback's cells: none with --network lan alone.
        Ok(View { intro, tables: vec![measured, published], notes: Vec::new(), svg: p.net.loopback().then_some(svg) })
    }
}
