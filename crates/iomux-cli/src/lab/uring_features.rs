//! `iomux bench uring-features`: what each optional io_uring feature of
//! the runtime buys on this kernel. Each feature is measured off and on
//! with every other one at its default, on the workloads it is meant
//! for: an echo server under 1,000 closed-loop connections (server CPU
//! and syscalls per echo), E3's loopback sink (CPU per GB), and, for
//! zero-copy sends, an echo of large messages (CPU per GB echoed).
//!
//! The machine is shared and its timings noisy, so configurations run in
//! a rotating order, several times, and each figure is a median; the
//! syscall counts (the library's own) are the steadier figures.

use super::cell::{self, f64_of};
use super::measure::{calls_per_sec, median};
use super::plot;
use super::sink;
use super::table::Table;
use super::{Check, Outcome, Settings};
use crate::progress::Progress;
use crate::CliResult;
use iomux::lab::PollRing;
use iomux::Backend;
use serde_json::{json, Value};
use std::os::fd::OwnedFd;
use std::time::Duration;

pub const NAME: &str = "uring-features";

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Seconds per measured cell [default: 1; --full: 5]
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Runs of every configuration [default: 3; --full: 5]
    #[arg(long)]
    pub reps: Option<usize>,
    /// Echo connections (closed loop, 100-byte messages) [default: 1000]
    #[arg(long)]
    pub conns: Option<usize>,
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

/// One feature: its name in the stats, and its `iomux serve` flag's value off and on.
struct Feature {
    name: &'static str,
    flag: &'static str,
    off: String,
    on: String,
}

fn features() -> Vec<Feature> {
    let switch = |name, flag| Feature { name, flag, off: "off".into(), on: "on".into() };
    vec![
        switch("register_ring", "--uring-register-ring"),
        Feature { name: "min_wait", flag: "--uring-min-wait-us", off: "0".into(), on: MIN_WAIT_ON_US.to_string() },
        switch("bundle", "--uring-bundle"),
        switch("buf_inc", "--uring-buf-inc"),
        Feature { name: "send_zc", flag: "--uring-send-zc-min", off: "0".into(), on: SEND_ZC_ON_BYTES.to_string() },
    ]
}

/// What one configuration measured in one run.
#[derive(Clone, Default)]
struct Sample {
    cpu_us_per_echo: f64,
    syscalls_per_echo: f64,
    echoes_per_sec: f64,
    sink_cpu_s_per_gb: f64,
    /// Large-message echo (send_zc's configurations only).
    bulk_cpu_s_per_gb: Option<f64>,
    zero_copy: Option<(u64, u64)>,
    /// Few active connections among idle ones (min_wait's configurations
    /// only): median latency and server CPU per echo.
    few: Option<(f64, f64)>,
    /// The server's `uring_features` as it reported them.
    features: Value,
}

/// A configuration: the default (no flag), or one feature switched.
struct Config {
    label: String,
    flags: Vec<String>,
    bulk: bool,
    few: bool,
}

pub fn run(args: &Args, settings: &Settings) -> CliResult<Outcome> {
    let seconds = args.seconds.unwrap_or(if settings.full { 5.0 } else { 1.0 });
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("--seconds must be positive, not {seconds}").into());
    }
    let reps = args.reps.unwrap_or(if settings.full { 5 } else { 3 }).max(1);
    let conns = args.conns.unwrap_or(1000).max(1);
    let feats = features();

    // Which features the default asks for: its own stats say.
    let probe = echo_cell(&[], conns, 0.2)?;
    let default_on: Vec<bool> = feats.iter().map(|f| probe.features[f.name]["requested"] == true).collect();
    let mut configs = vec![Config { label: "default".into(), flags: Vec::new(), bulk: true, few: true }];
    for (f, &on) in feats.iter().zip(&default_on) {
        let value = if on { &f.off } else { &f.on };
        configs.push(Config {
            label: format!("{} {}", f.name, if on { "off" } else { "on" }),
            flags: vec![f.flag.to_string(), value.clone()],
            bulk: f.name == "send_zc",
            few: f.name == "min_wait",
        });
    }

    let cells_per_rep: usize = configs.iter().map(|c| 2 + usize::from(c.bulk) + usize::from(c.few)).sum();
    let progress = Progress::new(NAME, (reps * cells_per_rep) as u64);
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); configs.len()];
    for rep in 0..reps {
        // Rotate the order every run, so that no configuration always
        // meets the same moment of the machine's other load.
        let shift = rep * configs.len() / reps;
        for i in (0..configs.len()).map(|k| (k + shift) % configs.len()) {
            let c = &configs[i];
            progress.step(&format!("run {}/{reps}: {}", rep + 1, c.label));
            let mut s = echo_cell(&c.flags, conns, seconds)?;
            progress.inc(1);
            s.sink_cpu_s_per_gb = sink::cell(BACKEND, false, seconds, &c.flags)?.cpu_s_per_gb;
            progress.inc(1);
            if c.bulk {
                let (cpu, zc) = bulk_cell(&c.flags, seconds)?;
                s.bulk_cpu_s_per_gb = Some(cpu);
                s.zero_copy = Some(zc);
                progress.inc(1);
            }
            if c.few {
                s.few = Some(few_cell(&c.flags, seconds)?);
                progress.inc(1);
            }
            samples[i].push(s);
        }
    }
    progress.finish();
    let enter_ns = enter_cost(if settings.full { 15 } else { 5 }, Duration::from_millis(100))?;

    let med = |i: usize, f: fn(&Sample) -> f64| median(&samples[i].iter().map(f).collect::<Vec<_>>());
    let mut rows = Vec::new();
    let mut checks = Vec::new();
    for (k, (f, &on_by_default)) in feats.iter().zip(&default_on).enumerate() {
        // configs[0] is the default; configs[k + 1] switches feature k.
        let (off, on) = if on_by_default { (k + 1, 0) } else { (0, k + 1) };
        let state = &samples[on][0].features[f.name];
        let active = state["active"] == true;
        let why_not = state["why_not"].as_str().map(str::to_string);
        let metric = |g: fn(&Sample) -> f64| (med(off, g), med(on, g));
        let cpu = metric(|s| s.cpu_us_per_echo);
        let sys = metric(|s| s.syscalls_per_echo);
        let rate = metric(|s| s.echoes_per_sec);
        let sink = metric(|s| s.sink_cpu_s_per_gb);
        let bulk = (f.name == "send_zc").then(|| metric(|s| s.bulk_cpu_s_per_gb.unwrap_or(f64::NAN)));
        let zc = samples[on].iter().filter_map(|s| s.zero_copy).fold((0, 0), |a, z| (a.0 + z.0, a.1 + z.1));
        let few = (f.name == "min_wait").then(|| {
            let p50 = metric(|s| s.few.map_or(f64::NAN, |f| f.0));
            let cpu = metric(|s| s.few.map_or(f64::NAN, |f| f.1));
            json!({"p50_us": {"off": p50.0, "on": p50.1}, "cpu_us_per_echo": {"off": cpu.0, "on": cpu.1}})
        });
        // The figure each feature is meant to improve decides whether it
        // wins. A feature on by default must win on it; one off by default
        // must not (min_wait wins CPU at 1,000 busy connections, but is off
        // for what it costs a few active connections among idle ones).
        let few_p50 = few.as_ref().map(|f| (f64_of(&f["p50_us"]["off"]), f64_of(&f["p50_us"]["on"])));
        let (target, (x_off, x_on)) = match (f.name, few_p50) {
            ("register_ring", _) => ("ns per empty enter".to_string(), enter_ns),
            ("bundle" | "buf_inc", _) => ("sink CPU per GB".into(), sink),
            ("send_zc", _) => ("large-echo CPU per GB".into(), bulk.unwrap_or((f64::NAN, f64::NAN))),
            ("min_wait", Some(p50)) if !on_by_default => {
                (format!("p50 latency of {FEW_ACTIVE} active among {FEW_IDLE} idle"), p50)
            }
            _ => ("server CPU per echo".into(), cpu),
        };
        let claim = format!("{} on/off, {target} (default {})", f.name, if on_by_default { "on" } else { "off" });
        checks.push(match (active, on_by_default) {
            (false, _) => Check::not_measured(&claim, 1.0),
            (true, true) => Check::at_most(&claim, x_on / x_off, 1.0, "on by default: on wins".into()),
            (true, false) => Check::new(&claim, x_on / x_off, 1.0, "off by default: on does not win".into()),
        });
        rows.push(json!({
            "feature": f.name, "default": if on_by_default { "on" } else { "off" },
            "off_flags": [f.flag, f.off], "on_flags": [f.flag, f.on],
            "active": active, "why_not": why_not,
            "cpu_us_per_echo": {"off": cpu.0, "on": cpu.1},
            "syscalls_per_echo": {"off": sys.0, "on": sys.1},
            "echoes_per_sec": {"off": rate.0, "on": rate.1},
            "sink_cpu_s_per_gb": {"off": sink.0, "on": sink.1},
            "bulk_cpu_s_per_gb": bulk.map(|b| json!({"off": b.0, "on": b.1})),
            "zero_copy_sends": bulk.map(|_| zc.0), "zero_copy_copied": bulk.map(|_| zc.1),
            "few_active": few,
        }));
    }

    let (checks, noise) = settings.judge(checks);
    let run = Run { seconds, reps, conns, enter_ns };
    let md = render(&rows, &checks, noise.as_ref(), settings, &run);
    println!("{md}");
    let doc = json!({
        "experiment": NAME,
        "machine": settings.machine,
        "params": {"backend": BACKEND.name(), "seconds_per_cell": seconds, "reps": reps, "echo_conns": conns,
                   "echo_msg_size": 100, "sink_senders": 40, "bulk_conns": BULK_CONNS, "bulk_msg_size": BULK_MSG,
                   "few_active": FEW_ACTIVE, "few_idle": FEW_IDLE,
                   "min_wait_on_us": MIN_WAIT_ON_US, "send_zc_on_bytes": SEND_ZC_ON_BYTES,
                   "load_backend": cell::LOAD_BACKEND.name()},
        "empty_enter_ns": {"plain": enter_ns.0, "registered": enter_ns.1},
        "rows": rows,
        "samples": configs.iter().zip(&samples).map(|(c, s)| json!({
            "config": c.label, "flags": c.flags,
            "cpu_us_per_echo": s.iter().map(|x| x.cpu_us_per_echo).collect::<Vec<_>>(),
            "syscalls_per_echo": s.iter().map(|x| x.syscalls_per_echo).collect::<Vec<_>>(),
            "echoes_per_sec": s.iter().map(|x| x.echoes_per_sec).collect::<Vec<_>>(),
            "sink_cpu_s_per_gb": s.iter().map(|x| x.sink_cpu_s_per_gb).collect::<Vec<_>>(),
            "bulk_cpu_s_per_gb": s.iter().filter_map(|x| x.bulk_cpu_s_per_gb).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "noise": noise,
        "checks": checks,
    });
    let ratio = |key: &str| -> Vec<(String, f64)> {
        rows.iter()
            .map(|r| (r["feature"].as_str().unwrap_or("?").to_string(), f64_of(&r[key]["on"]) / f64_of(&r[key]["off"])))
            .collect()
    };
    const RATIO: &str = "feature on / off (1 = no change)";
    let svg = plot::bar_panels(&[
        plot::Panel { title: "server CPU µs per echo, on/off", y_label: RATIO, bars: ratio("cpu_us_per_echo") },
        plot::Panel { title: "syscalls per echo, on/off", y_label: RATIO, bars: ratio("syscalls_per_echo") },
        plot::Panel { title: "E3 loopback CPU s per GB, on/off", y_label: RATIO, bars: ratio("sink_cpu_s_per_gb") },
    ])?;
    let files = super::output::write_experiment(&settings.out_dir, NAME, &doc, &md, Some(&svg))?;
    Ok(Outcome { files })
}

/// 1,000 connections echoing 100-byte messages, closed loop, for `seconds`.
fn echo_cell(flags: &[String], conns: usize, seconds: f64) -> CliResult<Sample> {
    let c = cell::run_with_flags(BACKEND, "echo", 0, flags, |a| {
        a.conns = conns;
        a.duration = Some(seconds);
    })?;
    c.require_no_errors(&format!("{NAME} {flags:?}, echo"))?;
    let s = &c.server.stats;
    let echoes = c.load["echoes"].as_u64().unwrap_or(0).max(1) as f64;
    let cpu = cell::server_cpu_s(s);
    Ok(Sample {
        cpu_us_per_echo: cpu * 1e6 / echoes,
        syscalls_per_echo: s["syscalls_total"].as_u64().unwrap_or(0) as f64 / echoes,
        echoes_per_sec: f64_of(&c.load["echoes_per_sec"]),
        features: s["uring_features"].clone(),
        ..Sample::default()
    })
}

/// FEW_ACTIVE connections echoing among FEW_IDLE idle ones: the median
/// latency and the server's CPU per echo.
fn few_cell(flags: &[String], seconds: f64) -> CliResult<(f64, f64)> {
    let c = cell::run_with_flags(BACKEND, "echo", FEW_IDLE, flags, |a| {
        a.conns = FEW_ACTIVE;
        a.duration = Some(seconds);
    })?;
    let s = &c.server.stats;
    let echoes = c.load["echoes"].as_u64().unwrap_or(0).max(1) as f64;
    let cpu = cell::server_cpu_s(s);
    Ok((f64_of(&c.load["latency"]["p50_us"]), cpu * 1e6 / echoes))
}

/// A few connections echoing 256 KiB messages: server CPU per GB echoed,
/// and its zero-copy sends (made, copied anyway).
fn bulk_cell(flags: &[String], seconds: f64) -> CliResult<(f64, (u64, u64))> {
    let c = cell::run_with_flags(BACKEND, "echo", 0, flags, |a| {
        a.conns = BULK_CONNS;
        a.msg_size = BULK_MSG;
        a.duration = Some(seconds);
    })?;
    let s = &c.server.stats;
    let bytes = s["bytes_out"].as_u64().unwrap_or(0).max(1) as f64;
    let cpu = cell::server_cpu_s(s);
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    Ok((cpu / (bytes / 1e9), (n("zero_copy_sends"), n("zero_copy_copied"))))
}

/// What one empty `io_uring_enter(GETEVENTS)` costs on a ring, in ns,
/// with its descriptor plain and registered: `rounds` alternating timings
/// of `slice` each, medians.
fn enter_cost(rounds: usize, slice: Duration) -> CliResult<(f64, f64)> {
    let ring = || PollRing::new::<OwnedFd>(&[]).map_err(|e| format!("io_uring: {e}"));
    let mut plain = ring()?;
    let mut registered = ring()?;
    registered.register_ring_fd().map_err(|e| format!("IORING_REGISTER_RING_FDS: {e}"))?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let time = |r: &mut PollRing| 1e9 / calls_per_sec(slice, || drop(r.enter_getevents())).0;
        // Alternate which goes first, so neither always follows the other.
        if round % 2 == 0 {
            a.push(time(&mut plain));
            b.push(time(&mut registered));
        } else {
            b.push(time(&mut registered));
            a.push(time(&mut plain));
        }
    }
    Ok((median(&a), median(&b)))
}

/// How the run went, for its text.
#[derive(Clone, Copy)]
struct Run {
    seconds: f64,
    reps: usize,
    conns: usize,
    /// An empty enter's cost, plain and registered.
    enter_ns: (f64, f64),
}

fn render(
    rows: &[Value],
    checks: &[Check],
    noise: Option<&super::noise::Noise>,
    settings: &Settings,
    run: &Run,
) -> String {
    let Run { seconds, reps, conns, enter_ns } = *run;
    let f3 = |v: &Value| format!("{:.3}", f64_of(v));
    let f4 = |v: &Value| format!("{:.4}", f64_of(v));
    let ratio = |v: &Value| format!("{:.2}", f64_of(&v["on"]) / f64_of(&v["off"]));
    let mut t = Table::new([
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
    ]);
    let mut notes = Vec::new();
    for r in rows {
        let mut name = r["feature"].as_str().unwrap_or("?").to_string();
        if let Some(why) = r["why_not"].as_str() {
            notes.push(format!("{name}: not active on this kernel ({why}); its \"on\" figures are the default's"));
            name += &format!(" [{}]", notes.len());
        }
        let (c, s, k) = (&r["cpu_us_per_echo"], &r["syscalls_per_echo"], &r["sink_cpu_s_per_gb"]);
        t.row([
            name,
            r["default"].as_str().unwrap_or("?").to_string(),
            f3(&c["off"]),
            f3(&c["on"]),
            ratio(c),
            f4(&s["off"]),
            f4(&s["on"]),
            ratio(s),
            f3(&k["off"]),
            f3(&k["on"]),
            ratio(k),
        ]);
    }
    let mut bulk = Table::new(["send_zc", "CPU s/GB echoed off", "on", "on/off", "zero-copy sends", "copied anyway"]);
    for r in rows.iter().filter(|r| !r["bulk_cpu_s_per_gb"].is_null()) {
        let b = &r["bulk_cpu_s_per_gb"];
        bulk.row([
            format!(">= {} B", SEND_ZC_ON_BYTES),
            f3(&b["off"]),
            f3(&b["on"]),
            ratio(b),
            super::table::thousands(f64_of(&r["zero_copy_sends"])),
            super::table::thousands(f64_of(&r["zero_copy_copied"])),
        ]);
    }
    let mut md = format!(
        "## io_uring features: each off and on, everything else at its default ({seconds} s cells, median of {reps} runs)\n\n\
         Machine: {}. Server `iomux serve --backend {}` on CPU 0, load on CPU 1. Echo: {conns} connections, \
         100-byte messages, closed loop; CPU is the server process's (user + sys) per echo, syscalls the \
         library's own count per echo. E3: 40 unpaced senders of 100-byte messages to a sink over loopback. \
         \"on\" for min_wait is {MIN_WAIT_ON_US} us, for send_zc writes of {SEND_ZC_ON_BYTES} bytes or more. \
         Configurations run in a rotating order and each figure is a median. CPU figures move with what \
         else the machine runs (the noise guard's reading is above the checks), and syscalls per echo \
         vary too: a loop that other load keeps busier finds bigger batches per enter, so only a change of \
         several times is a feature's own.\n\n",
        settings.machine.summary(),
        BACKEND.name(),
    );
    md += &t.render();
    for (i, n) in notes.iter().enumerate() {
        md += &format!("\n[{}] {n}  ", i + 1);
    }
    let (sends, copied) = rows
        .iter()
        .find(|r| !r["bulk_cpu_s_per_gb"].is_null())
        .map_or((0, 0), |r| (r["zero_copy_sends"].as_u64().unwrap_or(0), r["zero_copy_copied"].as_u64().unwrap_or(0)));
    let copies = match (sends, copied) {
        (0, _) => "no zero-copy send was made".to_string(),
        (s, c) if s == c => format!("the kernel copied all {s} zero-copy sends anyway (their notifications say so)"),
        (s, c) => format!("the kernel copied {c} of {s} zero-copy sends anyway (their notifications say so)"),
    };
    md += &format!(
        "\n\nZero-copy sends, measured with a large-message echo ({BULK_CONNS} connections, {} KiB messages; \
         the 100-byte echo and the sink make no write that large): {copies}.\n\n",
        BULK_MSG >> 10
    );
    md += &bulk.render();
    if let Some(few) = rows.iter().find_map(|r| r["few_active"].as_object()) {
        let (p, c) = (&few["p50_us"], &few["cpu_us_per_echo"]);
        let mut t = Table::new(["min_wait", "p50 us off", "on", "CPU us/echo off", "on", "on/off"]);
        t.row([
            format!("{MIN_WAIT_ON_US} us"),
            format!("{:.0}", f64_of(&p["off"])),
            format!("{:.0}", f64_of(&p["on"])),
            f3(&c["off"]),
            f3(&c["on"]),
            ratio(c),
        ]);
        md += &format!(
            "\nBatched waits with few active connections ({FEW_ACTIVE} echoing among {FEW_IDLE} idle ones, \
             E2's shape): the loop waits for completions that the idle connections will not bring, so it \
             sleeps out the minimum wait every turn.\n\n"
        );
        md += &t.render();
    }
    md += &format!(
        "\nA registered ring descriptor saves the kernel a descriptor lookup per `io_uring_enter`: an empty \
         enter took {:.1} ns plain and {:.1} ns registered here (medians of alternating timings).\n\n",
        enter_ns.0, enter_ns.1
    );
    md += &super::render_checks(checks, noise);
    md
}
