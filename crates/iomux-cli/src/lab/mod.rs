//! The lab: `iomux bench [EXPERIMENT]` reproduces the documents'
//! experiments on this machine, prints the published figures beside fresh
//! ones, and writes JSON, Markdown and SVG for each.

pub mod browser;
mod cell;
mod child;
pub mod compare;
mod echo;
mod echo_large;
pub mod harness;
mod http;
mod http_clients;
mod idle;
mod kernel_memory;
mod machine;
mod measure;
mod nginx;
mod noise;
mod output;
mod peer_cell;
mod peers;
mod plot;
mod raw;
pub mod registry;
pub mod render;
pub mod results;
mod sampler;
mod sink;
mod syscall_rate;
mod syscount;
mod table;
mod tools;
mod uring_features;
mod wait_peers;

pub use table::thousands;

use crate::CliResult;
use machine::Machine;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = false)]
pub struct BenchArgs {
    #[command(subcommand)]
    experiment: Option<registry::Which>,
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
    /// Every experiment at the small sizes CI's smoke run uses.
    #[arg(long, hide = true, conflicts_with = "full")]
    smoke: bool,
    /// Print the experiments' names, one per line, in the order a full
    /// run takes them, and exit.
    #[arg(long)]
    list: bool,
    /// Do not install missing tools (wrk, h2load, nginx for E6; Chromium
    /// for report.png); say what to run instead. Without it, a root run
    /// on a machine with apt-get installs them through scripts/install-*,
    /// printing each command first.
    #[arg(long, global = true, env = "IOMUX_NO_INSTALL", value_parser = clap::builder::FalseyValueParser::new())]
    no_install: bool,
}

/// What every experiment is given.
pub struct Settings {
    pub full: bool,
    /// perf or strace, to count a server's syscalls from outside.
    pub tracer: Option<child::Tracer>,
    pub out_dir: PathBuf,
    pub machine: Machine,
    pub noise: noise::Monitor,
    /// When the running experiment started: its noise is counted from here.
    experiment_started: std::cell::Cell<Instant>,
}

impl Settings {
    /// The running experiment's checks, judged against what other
    /// processes used since it started, and that use.
    pub fn judge(&self, checks: Vec<Check>) -> (Vec<Check>, Option<noise::Noise>) {
        let noise = self.noise.since(self.experiment_started.get());
        (noise::judge(checks, noise.as_ref()), noise)
    }
}

/// What an experiment hands back: the files it wrote (its verdicts are in
/// its JSON, where the summary reads them).
pub struct Outcome {
    pub files: Vec<PathBuf>,
}

pub use harness::claim::{Source, Verdict};

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
    pub source: Source,
    /// The claim in words, for the summary; empty for iomux's goals,
    /// whose `claim` says it.
    pub statement: String,
    /// Set by [`noise::judge`] once the experiment's noise is known.
    pub verdict: Verdict,
    pub why: String,
}

impl Check {
    fn measured(claim: &str, value: f64, needed: &'static str, threshold: f64, met: bool, detail: String) -> Check {
        Check {
            claim: claim.into(),
            value: Some(value),
            needed,
            threshold,
            met: Some(met),
            why: "not judged against the machine's noise yet".into(),
            detail,
            source: Source::Iomux,
            statement: String::new(),
            // Only noise::judge gives a final verdict: a path that skipped
            // it must not write an unguarded "does not hold".
            verdict: Verdict::Inconclusive,
        }
    }
    /// The value must be at least `threshold`.
    pub fn new(claim: &str, value: f64, threshold: f64, detail: String) -> Check {
        Check::measured(claim, value, ">=", threshold, value >= threshold, detail)
    }
    /// The value must be at most `threshold`.
    pub fn at_most(claim: &str, value: f64, threshold: f64, detail: String) -> Check {
        Check::measured(claim, value, "<=", threshold, value <= threshold, detail)
    }
    pub fn not_measured(claim: &str, threshold: f64) -> Check {
        Check {
            claim: claim.into(),
            value: None,
            needed: "",
            threshold,
            met: None,
            detail: "not measured in this run".into(),
            source: Source::Iomux,
            statement: String::new(),
            verdict: Verdict::NotMeasurable,
            why: "not measured in this run".into(),
        }
    }
    /// Marks the check as testing the documents' `statement`.
    pub fn documents(mut self, statement: &str) -> Check {
        self.source = Source::Documents;
        self.statement = statement.into();
        self
    }
}

/// The checks' table, after a paragraph on the machine's noise.
pub fn render_checks(checks: &[Check], noise: Option<&noise::Noise>) -> String {
    let mut t = table::Table::new(["check (ratio from this run)", "measured", "needed", "verdict", "why"]);
    for c in checks {
        let value = c.value.map_or("-".into(), |v| if v >= 100.0 { table::thousands(v) } else { format!("{v:.3}") });
        t.row([
            c.claim.clone(),
            value,
            format!("{} {}", c.needed, c.threshold),
            c.verdict.as_str().into(),
            c.why.clone(),
        ]);
    }
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    format!(
        "{}{}\nVerdicts: {} hold, {} do not hold, {} inconclusive, {} not measurable.\n",
        noise::Noise::markdown(noise),
        t.render(),
        count(Verdict::Holds),
        count(Verdict::DoesNotHold),
        count(Verdict::Inconclusive),
        count(Verdict::NotMeasurable)
    )
}

pub fn run(args: BenchArgs) -> CliResult<ExitCode> {
    if args.list {
        for e in registry::ENTRIES {
            println!("{}", e.name);
        }
        return Ok(ExitCode::SUCCESS);
    }
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
    let settings = Settings {
        full: args.full && !args.quick,
        tracer: child::Tracer::detect(),
        out_dir,
        machine: Machine::describe(),
        noise: noise::Monitor::start(),
        experiment_started: std::cell::Cell::new(Instant::now()),
    };
    eprintln!(
        "iomux bench: {} settings; results in {}",
        if args.smoke {
            "smoke"
        } else if settings.full {
            "full"
        } else {
            "quick"
        },
        settings.out_dir.display()
    );
    let started = Instant::now();
    let experiments = match args.experiment {
        Some(e) => vec![e],
        None if args.smoke => registry::ENTRIES.iter().map(smoke_of).collect::<CliResult<Vec<_>>>()?,
        None => registry::Which::all(),
    };
    // Every experiment's flags and limits before the first runs: a machine
    // that cannot run one is told now, not minutes on.
    for e in &experiments {
        e.check(&settings)?;
    }
    if experiments.len() > 1 {
        let names: Vec<String> =
            experiments.iter().map(|e| format!("{} {}", e.entry().label, e.entry().name)).collect();
        eprintln!("iomux bench: running {}", names.join(", "));
    }
    let mut needs: Vec<&str> = experiments.iter().flat_map(|e| e.entry().needs.iter().copied()).collect();
    needs.push("chromium");
    tools::bring(&needs, !args.no_install);
    warn_if_busy(&settings);
    let mut outcomes = Vec::new();
    for experiment in &experiments {
        settings.experiment_started.set(Instant::now());
        outcomes.push(experiment.run(&settings)?);
    }
    let folder = results::Folder::read(&settings.out_dir)?;
    let report = render::html::write_report(&folder)?;
    for outcome in &outcomes {
        for file in &outcome.files {
            eprintln!("wrote {}", file.display());
        }
    }
    eprintln!("wrote {}", report.display());
    for line in browser::screenshot_and_check(&report) {
        eprintln!("{line}");
    }
    eprintln!("iomux bench: done in {:.0} s", started.elapsed().as_secs_f64());
    // Each experiment printed its page as it finished; the verdicts come
    // last, so the answer is what the screen shows when the run ends.
    print!("{}", render::terminal::verdicts(&folder));
    Ok(ExitCode::SUCCESS)
}

/// `iomux report DIR`: writes DIR/report.html from the JSON in DIR, and
/// returns its path and the verdicts for the terminal.
pub fn report(dir: &std::path::Path) -> CliResult<(PathBuf, String)> {
    let folder = results::Folder::read(dir)?;
    Ok((render::html::write_report(&folder)?, render::terminal::verdicts(&folder)))
}

/// An experiment with its smoke flags, parsed as the command line would be.
fn smoke_of(entry: &harness::experiment::Entry) -> CliResult<registry::Which> {
    #[derive(clap::Parser)]
    struct Line {
        #[command(subcommand)]
        which: registry::Which,
    }
    let line = std::iter::once("bench").chain(std::iter::once(entry.name)).chain(entry.smoke.iter().copied());
    let parsed = <Line as clap::Parser>::try_parse_from(line)
        .map_err(|e| format!("{}'s smoke flags {:?}: {e}", entry.name, entry.smoke))?;
    Ok(parsed.which)
}

/// Says so before the first experiment if other processes are busy now.
fn warn_if_busy(settings: &Settings) {
    let now = Instant::now();
    std::thread::sleep(std::time::Duration::from_secs(1));
    if let Some(n) = settings.noise.since(now).filter(|n| n.busy) {
        eprintln!(
            "iomux bench: warning: the machine is busy ({}). Verdicts of experiments measured while it stays \
             busy will be inconclusive; for verdicts, run on a quiet machine.",
            n.describe()
        );
    }
}
