//! The lab: `iomux bench [EXPERIMENT]` reproduces the documents'
//! experiments on this machine, prints the published figures beside fresh
//! ones, and writes JSON, Markdown and SVG for each.

mod browser;
mod cell;
mod child;
mod echo;
mod echo_large;
mod idle;
mod kernel_memory;
mod machine;
mod measure;
mod output;
mod peer_cell;
mod peers;
mod plot;
mod raw;
pub mod report;
mod sampler;
mod sink;
mod syscall_rate;
mod syscount;
mod table;
mod uring_features;
mod wait_peers;

pub use table::thousands;

use crate::CliResult;
use machine::Machine;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = false)]
pub struct BenchArgs {
    #[command(subcommand)]
    experiment: Option<Experiment>,
    /// Quick settings (the default): short cells, fewer repetitions.
    #[arg(long, global = true, conflicts_with = "full")]
    quick: bool,
    /// The documents' own method and sizes, as far as this machine allows
    /// (E1: one second per cell, five repetitions).
    #[arg(long, global = true)]
    full: bool,
    /// Output folder [default: results/<UTC timestamp>]
    #[arg(long, global = true, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Experiment {
    /// E1: empty poll()/epoll_wait()/select()/io_uring waits per second
    /// against the number of registered fds (the book's poll-vs-epoll.c).
    SyscallRate(syscall_rate::Args),
    /// E2: 40,000 round trips by 10 active connections among Z idle ones,
    /// on every backend (the epoll article's poll-vs-epoll test).
    Idle(idle::Args),
    /// E3: 40 senders of 100-byte messages, a server that only reads: CPU
    /// and syscalls per byte.
    Sink(sink::Args),
    /// E4: many connections echoing 100-byte messages: server syscalls per
    /// echo, throughput, latency, memory per connection.
    Echo(echo::Args),
    /// E5: iomux's servers beside tokio, monoio, compio and a plain C
    /// epoll server, one thread on one CPU each: echoes/s, server CPU per
    /// echo, latency, syscalls, memory, under closed and open loops.
    Peers(peers::Args),
    /// io_uring's optional features, each off and on: server CPU and
    /// syscalls per echo, E3 loopback CPU per GB.
    UringFeatures(uring_features::Args),
}

/// What every experiment is given.
pub struct Settings {
    pub full: bool,
    pub out_dir: PathBuf,
    pub machine: Machine,
}

/// What an experiment hands back: the files it wrote and its checks.
pub struct Outcome {
    pub files: Vec<PathBuf>,
    pub checks: Vec<Check>,
}

/// One acceptance ratio, measured in this run.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub claim: String,
    /// None when the run did not measure what the claim needs.
    pub value: Option<f64>,
    /// ">=" or "<=": how the value must compare with the threshold.
    pub needed: &'static str,
    pub threshold: f64,
    pub met: Option<bool>,
    pub detail: String,
}

impl Check {
    /// The value must be at least `threshold`.
    pub fn new(claim: &str, value: f64, threshold: f64, detail: String) -> Check {
        Check {
            claim: claim.into(),
            value: Some(value),
            needed: ">=",
            threshold,
            met: Some(value >= threshold),
            detail,
        }
    }
    /// The value must be at most `threshold`.
    pub fn at_most(claim: &str, value: f64, threshold: f64, detail: String) -> Check {
        Check {
            claim: claim.into(),
            value: Some(value),
            needed: "<=",
            threshold,
            met: Some(value <= threshold),
            detail,
        }
    }
    pub fn not_measured(claim: &str, threshold: f64) -> Check {
        Check {
            claim: claim.into(),
            value: None,
            needed: "",
            threshold,
            met: None,
            detail: "not measured in this run".into(),
        }
    }
}

pub fn render_checks(checks: &[Check]) -> String {
    let mut t = table::Table::new(["check (ratio from this run)", "measured", "needed", "", "where"]);
    for c in checks {
        let verdict = match c.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let value = c.value.map_or("-".into(), |v| if v >= 100.0 { table::thousands(v) } else { format!("{v:.3}") });
        t.row([c.claim.clone(), value, format!("{} {}", c.needed, c.threshold), verdict.into(), c.detail.clone()]);
    }
    let met = checks.iter().filter(|c| c.met == Some(true)).count();
    let measured = checks.iter().filter(|c| c.met.is_some()).count();
    format!("{}\nChecks met: {met} of {measured} measured ({} in all).\n", t.render(), checks.len())
}

pub fn run(args: BenchArgs) -> CliResult<ExitCode> {
    // The output folder first: one that cannot be written fails the run
    // now, not after the experiments.
    let out = output::OutDir::prepare(args.out.clone().unwrap_or_else(output::default_dir))?;
    let result = run_into(args, out.path.clone());
    if result.is_err() {
        out.discard_if_empty();
    }
    result
}

fn run_into(args: BenchArgs, out_dir: PathBuf) -> CliResult<ExitCode> {
    // Raise the fd limit before describing the machine, so the description
    // shows the limit the experiments ran under.
    crate::os::raise_nofile_limit().map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
    let settings = Settings { full: args.full && !args.quick, out_dir, machine: Machine::describe() };
    eprintln!(
        "iomux bench: {} settings; results in {}",
        if settings.full { "full" } else { "quick" },
        settings.out_dir.display()
    );
    let tracer = child::Tracer::detect();
    let started = std::time::Instant::now();
    let outcomes = match args.experiment {
        Some(Experiment::SyscallRate(a)) => vec![syscall_rate::run(&a, &settings)?],
        Some(Experiment::Idle(a)) => vec![idle::run(&a, &settings)?],
        Some(Experiment::Sink(a)) => vec![sink::run(&a, &settings, tracer)?],
        Some(Experiment::Echo(a)) => vec![echo::run(&a, &settings, tracer)?],
        Some(Experiment::Peers(a)) => vec![peers::run(&a, &settings, tracer)?],
        Some(Experiment::UringFeatures(a)) => vec![uring_features::run(&a, &settings)?],
        None => {
            // E5's plan (its limits for 10,000 connections too) before E1:
            // a machine that cannot run it is told now, not minutes on.
            peers::check(&peers::Args::default(), &settings)?;
            eprintln!("iomux bench: running E1 syscall-rate, E2 idle, E3 sink, E4 echo, E5 peers, uring-features");
            vec![
                syscall_rate::run(&syscall_rate::Args::default(), &settings)?,
                idle::run(&idle::Args::default(), &settings)?,
                sink::run(&sink::Args::default(), &settings, tracer)?,
                echo::run(&echo::Args::default(), &settings, tracer)?,
                peers::run(&peers::Args::default(), &settings, tracer)?,
                uring_features::run(&uring_features::Args::default(), &settings)?,
            ]
        }
    };
    let report = report::write(&settings.out_dir)?;
    for outcome in &outcomes {
        for file in &outcome.files {
            eprintln!("wrote {}", file.display());
        }
    }
    eprintln!("wrote {}", report.display());
    let checks: Vec<&Check> = outcomes.iter().flat_map(|o| &o.checks).collect();
    let unmet: Vec<&&Check> = checks.iter().filter(|c| c.met == Some(false)).collect();
    eprintln!(
        "iomux bench: done in {:.0} s; {} of {} measured checks met ({} not measured){}",
        started.elapsed().as_secs_f64(),
        checks.iter().filter(|c| c.met == Some(true)).count(),
        checks.iter().filter(|c| c.met.is_some()).count(),
        checks.iter().filter(|c| c.met.is_none()).count(),
        if unmet.is_empty() {
            String::new()
        } else {
            format!("; not met: {}", unmet.iter().map(|c| c.claim.as_str()).collect::<Vec<_>>().join("; "))
        }
    );
    Ok(ExitCode::SUCCESS)
}
