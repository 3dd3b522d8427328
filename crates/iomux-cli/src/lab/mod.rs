//! The lab: `iomux bench [EXPERIMENT]` reproduces the documents'
//! experiments on this machine, prints the published figures beside fresh
//! ones, and writes JSON, Markdown and SVG for each.

pub mod experiments;
pub mod harness;
pub mod registry;
pub mod render;
pub mod report;
pub mod rig;

use crate::CliResult;
use anyhow::Context as _;
use report::results;
use rig::machine::Machine;
use rig::{browser, child, noise, output, tools};
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
    /// CI's smoke run: every experiment at its small sizes (or the one
    /// named, with its own flags), reading no CPU placement, as its
    /// figures are not measurements.
    #[arg(long, hide = true, conflicts_with = "full")]
    smoke: bool,
    /// Go on with the run in --out DIR: keep the experiments whose results
    /// it holds (measured with the same settings) and run the others, then
    /// write the report of them all. A --full run can take more than one
    /// sitting.
    #[arg(long, requires = "out")]
    resume: bool,
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
}

#[cfg(test)]
impl Settings {
    /// Quick settings writing to `out_dir`, for tests that run an experiment.
    pub fn for_test(out_dir: PathBuf) -> Settings {
        Settings { full: false, tracer: None, out_dir, machine: Machine::default(), noise: noise::Monitor::start() }
    }
}

/// What an experiment hands back: the files it wrote (its verdicts are in
/// its JSON, where the summary reads them).
pub struct Outcome {
    /// The experiment's name.
    pub name: &'static str,
    pub files: Vec<PathBuf>,
}

pub fn run(args: BenchArgs) -> CliResult<ExitCode> {
    if args.list {
        for e in registry::ENTRIES {
            println!("{}", e.name);
        }
        return Ok(ExitCode::SUCCESS);
    }
    // A signal from now on ends the run with what it started.
    rig::interrupt::install();
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
    crate::os::raise_nofile_limit().context("raising RLIMIT_NOFILE")?;
    let settings = Settings {
        full: args.full && !args.quick,
        tracer: child::Tracer::detect(),
        out_dir,
        machine: Machine::describe(),
        noise: if args.smoke { noise::Monitor::start().without_placement() } else { noise::Monitor::start() },
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
    let experiments = match args.resume {
        true => resumed(experiments, &settings)?,
        false => experiments,
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
    let runs = experiments.iter().map(|e| (e.entry(), Box::new(|| e.run(&settings)) as Run<'_>));
    let (outcomes, failed) = run_each(runs, &settings.out_dir);
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
    // What this run measured: not an experiment kept by --resume, nor the
    // results a failed one left in the folder from an earlier run.
    let names: Vec<&str> = outcomes.iter().map(|o| o.name).collect();
    eprintln!("iomux bench: {}", done_line(started.elapsed().as_secs_f64(), folder.machine_seconds(&names)));
    // Each experiment printed its page as it finished; the verdicts come
    // last, so the answer is what the screen shows when the run ends.
    print!("{}", render::terminal::verdicts(&folder));
    if failed > 0 {
        eprintln!("iomux bench: {failed} experiment{} failed (see above and the report)", plural(failed));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The run's time, and how much of it the machine took: waits for the
/// CPUs' placement and samples measured only to be left out, which a
/// quiet machine whose CPUs stay put does not spend.
fn done_line(total_s: f64, (waited_s, left_out_s): (f64, f64)) -> String {
    // Whole seconds, so that the parts add up to the total as printed.
    let (total, waited, left_out) = (total_s.round(), waited_s.round(), left_out_s.round());
    if waited + left_out == 0.0 {
        return format!("done in {total} s");
    }
    let cpus = harness::facts::CPUS;
    format!(
        "done in {total} s: {waited} s waiting for CPUs {} and {} to be placed close again and {left_out} s measuring \
         samples left out (the machine's), {} s the lab's own",
        cpus.0,
        cpus.1,
        (total - waited - left_out).max(0.0)
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// One experiment's run, deferred.
type Run<'a> = Box<dyn FnOnce() -> CliResult<Outcome> + 'a>;

/// Runs every experiment in turn. One that fails is reported, its error
/// written to `NAME.error.txt` for the report, and the others still run.
/// Returns the outcomes and how many failed.
fn run_each<'a>(
    runs: impl Iterator<Item = (&'static harness::experiment::Entry, Run<'a>)>,
    out_dir: &std::path::Path,
) -> (Vec<Outcome>, usize) {
    let (mut outcomes, mut failed) = (Vec::new(), 0);
    for (entry, run) in runs {
        match run() {
            Ok(outcome) => {
                // A failure of an earlier run (--resume) no longer stands.
                let _ = std::fs::remove_file(results::error_file(out_dir, entry.name));
                outcomes.push(outcome)
            }
            Err(e) => {
                failed += 1;
                let e = crate::one_line(e);
                eprintln!("iomux bench: {} {} failed: {e}; going on with the others", entry.label, entry.name);
                let file = results::error_file(out_dir, entry.name);
                if let Err(w) = std::fs::write(&file, format!("{e}\n")) {
                    eprintln!("iomux bench: cannot write {}: {w}", file.display());
                }
            }
        }
    }
    (outcomes, failed)
}

/// `iomux report DIR`: writes DIR/report.html from the JSON in DIR, and
/// returns its path and the verdicts for the terminal.
pub fn report(dir: &std::path::Path) -> CliResult<(PathBuf, String)> {
    let folder = results::Folder::read(dir)?;
    Ok((render::html::write_report(&folder)?, render::terminal::verdicts(&folder)))
}

/// The experiments the output folder holds no results of yet; the others
/// are named, kept.
fn resumed(experiments: Vec<registry::Which>, settings: &Settings) -> CliResult<Vec<registry::Which>> {
    let names: Vec<&str> = experiments.iter().map(|e| e.entry().name).collect();
    let results::Resumed { left, kept } =
        results::unfinished(&names, &settings.out_dir, settings.full, &settings.machine)?;
    let this = env!("IOMUX_COMMIT");
    for (path, commit) in &kept {
        let measured = match commit.as_str() {
            c if c == this => String::new(),
            "" => format!(" (its commit not recorded; this build is {this})"),
            c => format!(" (measured at commit {c}; this build is {this})"),
        };
        eprintln!("iomux bench: --resume: kept {}{measured}", path.display());
    }
    Ok(experiments.into_iter().filter(|e| left.contains(&e.entry().name)).collect())
}

/// An experiment with its smoke flags, parsed as the command line would be.
fn smoke_of(entry: &harness::experiment::Entry) -> CliResult<registry::Which> {
    #[derive(clap::Parser)]
    struct Line {
        #[command(subcommand)]
        which: registry::Which,
    }
    let line = std::iter::once("bench").chain(std::iter::once(entry.name)).chain(entry.smoke.split_whitespace());
    let parsed = <Line as clap::Parser>::try_parse_from(line)
        .with_context(|| format!("{}'s smoke flags {:?}", entry.name, entry.smoke))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::experiments::toy::{self, Toy};
    use crate::lab::harness::experiment::Experiment;
    use crate::lab::registry::execute;

    /// The time a spell of the CPUs apart or a busy neighbour cost is told
    /// apart from the lab's own; a run that lost none says only its time.
    #[test]
    fn the_done_line_parts_the_machines_time_from_the_labs() {
        assert_eq!(done_line(600.2, (0.0, 0.2)), "done in 600 s");
        let line = done_line(999.6, (277.6, 32.6));
        assert!(
            line.starts_with("done in 1000 s: 278 s waiting for CPUs 0 and 1")
                && line.contains("and 33 s measuring samples left out")
                && line.ends_with(", 689 s the lab's own"),
            "{line}"
        );
    }

    #[test]
    fn a_failing_experiment_leaves_the_others_measured_and_the_report_written() {
        let out = std::env::temp_dir().join(format!("iomux-run-each-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let settings = Settings::for_test(out.clone());
        let echo = registry::ENTRIES.iter().find(|e| e.name == "echo").unwrap();
        let runs: Vec<(&'static harness::experiment::Entry, Run<'_>)> = vec![
            // Its cause must reach the report, not only the outer context.
            (echo, Box::new(|| Err(anyhow::anyhow!("connection refused").context("the server would not start")))),
            (&Toy::ENTRY, Box::new(|| execute::<Toy>(&toy::Args::default(), &settings))),
        ];
        let (outcomes, failed) = run_each(runs.into_iter(), &out);
        assert_eq!((outcomes.len(), failed), (1, 1));
        assert!(out.join("toy.json").exists(), "the experiment after the failure was measured");
        let folder = results::Folder::read(&out).unwrap();
        assert_eq!(folder.failed.len(), 1);
        assert_eq!(
            (folder.failed[0].entry.name, folder.failed[0].error.as_str()),
            ("echo", "the server would not start: connection refused")
        );
        let report = std::fs::read_to_string(render::html::write_report(&folder).unwrap()).unwrap();
        let said = "so its claims are not judged: the server would not start: connection refused";
        assert!(report.contains(&format!("E4 echo failed</b>, {said}")));
        let terminal = render::terminal::verdicts(&folder);
        assert!(terminal.contains(&format!("E4 echo failed, {said}")));
        std::fs::remove_dir_all(&out).ok();
    }
}
