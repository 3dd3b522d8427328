//! `iomux bench uring-features`: what each optional io_uring feature of
//! the runtime buys on this kernel. Each feature is measured off and on
//! with every other one at its default, on the workloads it is meant
//! for: an echo server under 1,000 closed-loop connections (server CPU
//! and syscalls per echo), E3's loopback sink (CPU per GB), for
//! zero-copy sends an echo of large messages (CPU per GB echoed), for
//! batched waits a few active connections among idle ones (latency), and
//! for a registered ring an empty `io_uring_enter` (ns).

use crate::lab::experiments::sink;
use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{RoundFlags, Standard};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot;
use crate::lab::render::table::thousands;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::cell;
use crate::lab::rig::measure::calls_per_sec;
use crate::lab::Settings;
use crate::stats::FeatureState;
use crate::CliResult;
use anyhow::{bail, Context as _};
use iomux::lab::PollRing;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Seconds per measured cell [default: 0.5; --full: 5]
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Echo connections (closed loop, 100-byte messages) [default: 1000]
    #[arg(long)]
    pub conns: Option<usize>,
    #[command(flatten)]
    pub rounds: RoundFlags<Standard>,
}

/// The server's backend: io_uring without SQPOLL, whose kernel thread
/// would blur the CPU figures.
const BACKEND: Backend = Backend::Uring;
/// The minimum wait measured when the default has none.
const MIN_WAIT_ON_US: u32 = 50;
/// The zero-copy threshold measured when the default has none.
const SEND_ZC_ON_BYTES: usize = 16 << 10;
/// The large-message echo: connections and message size.
const BULK_CONNS: usize = 8;
const BULK_MSG: u32 = 256 << 10;
/// The low-concurrency echo (E2's shape): active connections among idle ones.
const FEW_ACTIVE: usize = 10;
const FEW_IDLE: usize = 1000;
/// What a feature off by default may win by and stay off: a default is
/// wrong when the other setting saves 5% or more. On and off may cost the
/// same within noise (bundle's sink CPU per GB on/off read 1.109 [0.976,
/// 1.140] in a quick lab on an AMD EPYC), and a claim at exactly 1 could
/// then never be decided.
const OFF_MAY_WIN_BY: f64 = 0.95;
/// One timing of empty enters lasts this long.
const ENTER_SLICE: Duration = Duration::from_millis(100);

/// One feature: its name in the stats, its `iomux serve` flag's value off
/// and on, and whether the default has it on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Feature {
    name: String,
    flag: String,
    off: String,
    on: String,
    on_by_default: bool,
}

impl Feature {
    /// The configuration that switches this feature from its default.
    fn switched(&self) -> String {
        format!("{} {}", self.name, if self.on_by_default { "off" } else { "on" })
    }
    fn flags(&self) -> Vec<String> {
        vec![self.flag.clone(), if self.on_by_default { self.off.clone() } else { self.on.clone() }]
    }
    /// (the configuration with it on, with it off).
    fn on_off(&self) -> (String, String) {
        let (d, s) = (DEFAULT.to_string(), self.switched());
        if self.on_by_default {
            (d, s)
        } else {
            (s, d)
        }
    }
}

const DEFAULT: &str = "default";

fn features(default: &BTreeMap<String, FeatureState>) -> Vec<Feature> {
    let on = |name: &str| default.get(name).is_some_and(|f| f.requested);
    let feature = |name: &str, flag: &str, off: String, on_value: String| Feature {
        name: name.into(),
        flag: flag.into(),
        off,
        on: on_value,
        on_by_default: on(name),
    };
    let switch = |name: &str, flag: &str| feature(name, flag, "off".into(), "on".into());
    vec![
        switch("register_ring", "--uring-register-ring"),
        feature("min_wait", "--uring-min-wait-us", "0".into(), MIN_WAIT_ON_US.to_string()),
        switch("bundle", "--uring-bundle"),
        switch("buf_inc", "--uring-buf-inc"),
        feature("send_zc", "--uring-send-zc-min", "0".into(), SEND_ZC_ON_BYTES.to_string()),
    ]
}

/// What a cell runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Closed-loop echo of 100-byte messages.
    Echo,
    /// E3's unpaced loopback sink.
    Sink,
    /// Large-message echo.
    Bulk,
    /// A few active connections among idle ones.
    Few,
    /// Empty `io_uring_enter` calls, no server.
    Enter,
}

/// A configuration (the default, or one feature switched; for `Enter`:
/// the ring's descriptor "plain" or "registered") under a workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    config: String,
    workload: Workload,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = serde_json::to_value(self.workload).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        write!(f, "{}, {w}", self.config)
    }
}

fn arm(config: &str, workload: Workload) -> Arm {
    Arm { config: config.into(), workload }
}

/// One cell's figures; which are set depends on the workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    /// The workload's figure: echo and few: server CPU us per echo;
    /// sink and bulk: server CPU s per GB; enter: ns per call.
    pub figure: f64,
    pub syscalls_per_echo: Option<f64>,
    pub echoes_per_sec: Option<f64>,
    /// Few: the median latency.
    pub p50_us: Option<f64>,
    /// Bulk: zero-copy sends made, and copied anyway.
    pub zero_copy: Option<(u64, u64)>,
    /// Echo: the server's features as it reported them.
    pub features: Option<BTreeMap<String, FeatureState>>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    seconds: f64,
    #[serde(flatten)]
    rounds: Rounds,
    conns: usize,
    features: Vec<Feature>,
    #[serde(with = "crate::lab::harness::by_name")]
    backend: Backend,
    #[serde(with = "crate::lab::harness::by_name")]
    load_backend: Backend,
}

impl Params {
    fn configs(&self) -> Vec<(String, Vec<String>)> {
        std::iter::once((DEFAULT.to_string(), Vec::new()))
            .chain(self.features.iter().map(|f| (f.switched(), f.flags())))
            .collect()
    }
    fn flags_of(&self, config: &str) -> Vec<String> {
        self.configs().into_iter().find(|(c, _)| c == config).map(|(_, f)| f).unwrap_or_default()
    }
}

/// The figure feature `f` is meant to improve, and its workload.
fn target(f: &Feature) -> (&'static str, Workload) {
    match f.name.as_str() {
        "register_ring" => ("ns per empty enter", Workload::Enter),
        "bundle" | "buf_inc" => ("sink CPU per GB", Workload::Sink),
        "send_zc" => ("large-echo CPU per GB", Workload::Bulk),
        // min_wait wins CPU at 1,000 busy connections, but is off for
        // what it costs a few active connections among idle ones.
        "min_wait" if !f.on_by_default => ("p50 latency of 10 active among 1,000 idle", Workload::Few),
        _ => ("server CPU per echo", Workload::Echo),
    }
}

pub struct UringFeatures;

impl Experiment for UringFeatures {
    experiment_types!(Args, Params, Arm, Sample, rounds: params.rounds);

    const ENTRY: Entry = Entry::new("uring-features", "io_uring", "io_uring's optional features, each off and on")
        .smoke("--seconds 0.3 --reps 1 --conns 100 --budget 0");
    const PUBLISHED: &'static str = "nothing: the documents predate these features. iomux's goal: a feature on by \
                                     default wins on the figure it is meant for; one off by default does not \
                                     win by 5% or more.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let seconds = args.seconds.unwrap_or(if settings.full { 5.0 } else { 0.5 });
        if !(seconds.is_finite() && seconds > 0.0) {
            bail!("--seconds must be positive, not {seconds}");
        }
        let conns = args.conns.unwrap_or(1000).max(1);
        // Which features the default asks for: its own stats say.
        let probe = echo_cell(&[], conns.min(100), 0.2)?;
        Ok(Params {
            seconds,
            rounds: args.rounds.rounds(settings)?,
            conns,
            features: features(&probe.features.unwrap_or_default()),
            backend: BACKEND,
            load_backend: cell::LOAD_BACKEND,
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        p.features
            .iter()
            .map(|f| {
                let (what, workload) = target(f);
                let (on, off) = f.on_off();
                let (on, off) = match workload {
                    Workload::Enter => (arm("registered", workload), arm("plain", workload)),
                    _ => (arm(&on, workload), arm(&off, workload)),
                };
                let claim =
                    format!("{} on/off, {what} (default {})", f.name, if f.on_by_default { "on" } else { "off" });
                // A feature on by default must win on its figure; one off
                // by default must not win by a margin that matters.
                let needed = if f.on_by_default { Needed::AtMost(1.0) } else { Needed::AtLeast(OFF_MAY_WIN_BY) };
                // The switched echo cell says whether the kernel ran the
                // feature at all (it is unmeasurable when not).
                let echo = arm(&f.switched(), Workload::Echo);
                let arms = vec![on.clone(), off.clone(), echo];
                Spec::iomux(claim, needed, arms, move |r: &RoundView<Arm, Sample>| {
                    Some(r.get(&on)?.figure / r.get(&off)?.figure)
                })
            })
            .collect()
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![Metric { name: "cost", unit: "", higher_is_better: false, get: |s| s.figure }]
    }

    fn unit(arm: &Arm, _metric: &Metric<Sample>) -> &'static str {
        match arm.workload {
            Workload::Echo | Workload::Few => "us of server CPU per echo",
            Workload::Sink | Workload::Bulk => "s of server CPU per GB",
            Workload::Enter => "ns per call",
        }
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Sample>) -> Vec<Arm> {
        let mut arms: Vec<Arm> = Vec::new();
        for (config, _) in p.configs() {
            arms.push(arm(&config, Workload::Echo));
            arms.push(arm(&config, Workload::Sink));
        }
        for f in &p.features {
            let (on, off) = f.on_off();
            match target(f).1 {
                w @ (Workload::Bulk | Workload::Few) => arms.extend([arm(&on, w), arm(&off, w)]),
                Workload::Enter => arms.extend([arm("plain", Workload::Enter), arm("registered", Workload::Enter)]),
                _ => {}
            }
        }
        arms
    }

    fn rig<'a>(p: &'a Params, _: &mut Trial<Arm, Sample>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        let ring = |registered: bool| -> CliResult<PollRing> {
            let mut r = PollRing::new::<OwnedFd>(&[]).context("io_uring")?;
            if registered {
                r.register_ring_fd().context("IORING_REGISTER_RING_FDS")?;
            }
            Ok(r)
        };
        let (mut plain, mut registered) = (ring(false)?, ring(true)?);
        Ok(Box::new(move |a: &Arm| -> Measured<Sample> {
            let flags = p.flags_of(&a.config);
            let sample = match a.workload {
                Workload::Echo => {
                    let s = echo_cell(&flags, p.conns, p.seconds)?;
                    // A switched-on feature the kernel did not run: say why.
                    let off_feature = p.features.iter().find(|f| f.switched() == a.config && !f.on_by_default);
                    let state = off_feature.and_then(|f| s.features.as_ref()?.get(&f.name));
                    if let Some(FeatureState { active: false, why_not, .. }) = state {
                        return Ok(Err(format!(
                            "not active on this kernel ({})",
                            why_not.as_deref().unwrap_or("no reason given")
                        )));
                    }
                    s
                }
                Workload::Sink => {
                    Sample { figure: sink::cell(BACKEND, false, p.seconds, &flags)?.cpu_s_per_gb, ..Sample::default() }
                }
                Workload::Bulk => bulk_cell(&flags, p.seconds)?,
                Workload::Few => few_cell(&flags, p.seconds)?,
                Workload::Enter => {
                    let r = if a.config == "registered" { &mut registered } else { &mut plain };
                    let figure = 1e9 / calls_per_sec(ENTER_SLICE, || drop(r.enter_getevents())).0;
                    Sample { figure, ..Sample::default() }
                }
            };
            Ok(Ok(sample))
        }))
    }
}

impl Shown for UringFeatures {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View {
            intro: vec![format!(
                "Server `iomux serve --backend {}` on CPU 0, load on CPU 1, {} s cells. Echo: {} connections, 100-byte \
                 messages, closed loop; CPU is the server process's (user + sys) per echo, syscalls the library's own \
                 count per echo. E3: 40 unpaced senders of 100-byte messages to a sink over loopback. Bulk: {BULK_CONNS} \
                 connections echoing {} KiB messages (the only writes large enough for zero-copy sends). Few: \
                 {FEW_ACTIVE} connections echoing among {FEW_IDLE} idle ones. \"on\" for min_wait is {MIN_WAIT_ON_US} \
                 us, for send_zc writes of {SEND_ZC_ON_BYTES} bytes or more. Each round runs every cell once in \
                 another order; cells: median ± half its 95% interval. Syscalls per echo vary with the machine's \
                 other load too (a busier loop finds bigger batches per enter): only a change of several times is \
                 a feature's own.",
                p.backend,
                p.seconds,
                p.conns,
                BULK_MSG >> 10
            )],
            ..View::default()
        };
        let figure = |config: &str, w: Workload| env.estimate(&arm(config, w), |s| s.figure);
        let syscalls =
            |config: &str| env.estimate(&arm(config, Workload::Echo), |s| s.syscalls_per_echo.unwrap_or(f64::NAN));
        let ratio = |a: Option<crate::lab::harness::stats::Estimate>,
                     b: Option<crate::lab::harness::stats::Estimate>| {
            a.zip(b).map_or("-".into(), |(a, b)| format!("{:.2}", a.median / b.median))
        };
        let mut t = TableView {
            caption: "Each feature off and on, everything else at its default:".into(),
            header: [
                "feature",
                "default",
                "CPU us/echo off",
                "on",
                "on/off",
                "syscalls/echo off",
                "on",
                "on/off",
                "E3 CPU s/GB off",
                "on",
                "on/off",
                "its own figure on/off",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        for f in &p.features {
            let (on, off) = f.on_off();
            let mut name = f.name.clone();
            if let Some(why) = env.note(&arm(&f.switched(), Workload::Echo)) {
                name = format!(
                    "{name} {}",
                    view.footnote(&format!("{}: {why}; its \"on\" figures are the default's", f.name))
                );
            }
            let (what, w) = target(f);
            let own = match w {
                Workload::Enter => ratio(figure("registered", w), figure("plain", w)),
                _ => ratio(figure(&on, w), figure(&off, w)),
            };
            t.rows.push(vec![
                name,
                if f.on_by_default { "on" } else { "off" }.into(),
                shown(figure(&off, Workload::Echo)),
                shown(figure(&on, Workload::Echo)),
                ratio(figure(&on, Workload::Echo), figure(&off, Workload::Echo)),
                shown(syscalls(&off)),
                shown(syscalls(&on)),
                ratio(syscalls(&on), syscalls(&off)),
                shown(figure(&off, Workload::Sink)),
                shown(figure(&on, Workload::Sink)),
                ratio(figure(&on, Workload::Sink), figure(&off, Workload::Sink)),
                format!("{own} ({what})"),
            ]);
        }
        view.tables.push(t);
        if let Some(f) = p.features.iter().find(|f| f.name == "send_zc") {
            let (on, _) = f.on_off();
            let (sends, copied) = env
                .kept(&arm(&on, Workload::Bulk))
                .filter_map(|s| s.zero_copy)
                .fold((0, 0), |a, z| (a.0 + z.0, a.1 + z.1));
            view.notes.push(match (sends, copied) {
                (0, _) => "Zero-copy sends: none was made.".to_string(),
                (s, c) => format!(
                    "Zero-copy sends: the kernel copied {} of {} anyway (their notifications say so).",
                    thousands(c as f64),
                    thousands(s as f64)
                ),
            });
        }
        if let Some(f) = p.features.iter().find(|f| f.name == "min_wait") {
            let (on, off) = f.on_off();
            let p50 = |c: &str| env.estimate(&arm(c, Workload::Few), |s| s.p50_us.unwrap_or(f64::NAN));
            view.notes.push(format!(
                "Batched waits with {FEW_ACTIVE} active connections among {FEW_IDLE} idle ones: p50 {} us off, {} us \
                 on (the loop sleeps out the minimum wait every turn, waiting for completions the idle connections \
                 will not bring).",
                shown(p50(&off)),
                shown(p50(&on))
            ));
        }
        view.notes.push(format!(
            "A registered ring descriptor saves the kernel a descriptor lookup per `io_uring_enter`: an empty enter \
             took {} ns plain and {} ns registered here.",
            shown(figure("plain", Workload::Enter)),
            shown(figure("registered", Workload::Enter))
        ));
        let bars = |w: Workload| -> Vec<(String, f64)> {
            p.features
                .iter()
                .map(|f| {
                    let (on, off) = f.on_off();
                    let r = figure(&on, w).zip(figure(&off, w)).map_or(f64::NAN, |(a, b)| a.median / b.median);
                    (f.name.clone(), r)
                })
                .collect()
        };
        const RATIO: &str = "feature on / off (1 = no change)";
        view.svg = Some(plot::bar_panels(&[
            plot::Panel { title: "server CPU µs per echo, on/off", y_label: RATIO, bars: bars(Workload::Echo) },
            plot::Panel { title: "E3 loopback CPU s per GB, on/off", y_label: RATIO, bars: bars(Workload::Sink) },
        ])?);
        Ok(view)
    }
}

/// `conns` connections echoing 100-byte messages, closed loop, for `seconds`.
fn echo_cell(flags: &[String], conns: usize, seconds: f64) -> CliResult<Sample> {
    let c = cell::run_with_flags(BACKEND, "echo", 0, flags, |a| {
        a.conns = conns;
        a.duration = Some(seconds);
    })?;
    c.require_no_errors(&format!("uring-features {flags:?}, echo"))?;
    let s = &c.server.typed;
    let echoes = c.result.echoes.max(1) as f64;
    Ok(Sample {
        figure: s.cpu_s() * 1e6 / echoes,
        syscalls_per_echo: Some(s.syscalls_total as f64 / echoes),
        echoes_per_sec: Some(c.result.echoes_per_sec),
        features: s.uring_features.clone(),
        ..Sample::default()
    })
}

/// FEW_ACTIVE connections echoing among FEW_IDLE idle ones: the median
/// latency and the server's CPU per echo.
fn few_cell(flags: &[String], seconds: f64) -> CliResult<Sample> {
    let c = cell::run_with_flags(BACKEND, "echo", FEW_IDLE, flags, |a| {
        a.conns = FEW_ACTIVE;
        a.duration = Some(seconds);
    })?;
    let echoes = c.result.echoes.max(1) as f64;
    let p50 = c.result.latency.as_ref().map(|l| l.p50_us);
    Ok(Sample {
        figure: p50.unwrap_or(f64::NAN),
        p50_us: p50,
        echoes_per_sec: Some(echoes / c.result.seconds),
        ..Sample::default()
    })
}

/// A few connections echoing 256 KiB messages: server CPU per GB echoed,
/// and its zero-copy sends (made, copied anyway).
fn bulk_cell(flags: &[String], seconds: f64) -> CliResult<Sample> {
    let c = cell::run_with_load_child(BACKEND, "echo", flags, |a| {
        a.conns = BULK_CONNS;
        a.msg_size = BULK_MSG;
        a.duration = Some(seconds);
    })?;
    let s = &c.server.typed;
    let bytes = s.bytes_out.max(1) as f64;
    Ok(Sample {
        figure: s.cpu_s() / (bytes / 1e9),
        zero_copy: Some((s.zero_copy_sends.unwrap_or(0), s.zero_copy_copied.unwrap_or(0))),
        ..Sample::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::harness::claim::Verdict;
    use crate::lab::harness::trial::judged_quiet;

    /// A feature off by default keeps its default unless on saves 5% or
    /// more of its figure; one on by default must win at all.
    #[test]
    fn a_default_off_holds_unless_on_saves_five_percent() {
        let mut defaults = BTreeMap::new();
        defaults.insert("buf_inc".to_string(), FeatureState { requested: true, active: true, why_not: None });
        let params = Params {
            seconds: 0.5,
            rounds: Rounds::fixed(1, 0.0),
            conns: 100,
            features: features(&defaults),
            backend: BACKEND,
            load_backend: BACKEND,
        };
        let specs = UringFeatures::claims(&params);
        let arms: Vec<Arm> = specs.iter().flat_map(|s| s.arms.clone()).collect();
        let verdicts = |send_zc_on: f64, buf_inc_off: f64| -> Vec<(String, Verdict)> {
            let claims = judged_quiet(&specs, &arms, |a: &Arm| {
                let figure = match (a.config.as_str(), a.workload) {
                    ("send_zc on", Workload::Bulk) => send_zc_on,
                    ("buf_inc off", Workload::Sink) => buf_inc_off,
                    _ => 1.0,
                };
                Ok(Ok(Sample { figure, ..Sample::default() }))
            });
            claims.into_iter().map(|c| (c.quantity.split(' ').next().unwrap_or("").to_string(), c.verdict)).collect()
        };
        let of = |all: &[(String, Verdict)], name: &str| all.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let close = verdicts(0.97, 1.5);
        assert_eq!(of(&close, "send_zc"), Some(Verdict::Holds), "on saves 3%: off stays right");
        assert_eq!(of(&close, "buf_inc"), Some(Verdict::Holds), "on by default and cheaper than off");
        let saves = verdicts(0.9, 0.99);
        assert_eq!(of(&saves, "send_zc"), Some(Verdict::DoesNotHold), "on saves 10%: off is the wrong default");
        assert_eq!(of(&saves, "buf_inc"), Some(Verdict::DoesNotHold), "on by default yet dearer than off");
    }
}
