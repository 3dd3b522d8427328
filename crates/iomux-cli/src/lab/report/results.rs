//! A results folder as typed data: each registered experiment's JSON (its
//! claims, figures and noise) and, for results of this schema, its page.
//! What `iomux report DIR`, `iomux report A B` and the end of a bench read.

use crate::lab::harness::claim::Undecided;
use crate::lab::harness::envelope::Header;
use crate::lab::harness::experiment::Entry;
use crate::lab::harness::facts::Machine;
use crate::lab::registry;
use crate::lab::render::view::View;
use crate::CliResult;
use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};

/// One experiment's results.
pub struct Result {
    pub entry: &'static Entry,
    pub header: Header,
    /// Results of an older schema get only their plot (the SVG file beside
    /// the JSON); their tables are in the Markdown file.
    pub view: Option<View>,
    pub older: bool,
}

/// An experiment that failed in the run: its error, as `iomux bench`
/// wrote it to `NAME.error.txt` in place of results.
pub struct Failed {
    pub entry: &'static Entry,
    pub error: String,
}

/// Every experiment found in a folder, in the registry's order.
pub struct Folder {
    pub dir: PathBuf,
    pub results: Vec<Result>,
    pub failed: Vec<Failed>,
}

/// The file that says experiment `name` failed, and why.
pub fn error_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.error.txt"))
}

/// What `bench --resume` finds in its folder.
#[derive(Debug, PartialEq)]
pub struct Resumed<'n> {
    /// The experiments it holds no results of yet.
    pub left: Vec<&'n str>,
    /// The results files it holds of the others, each with the commit that
    /// measured it.
    pub kept: Vec<(PathBuf, String)>,
}

/// For `bench --resume`: of `names`, which `dir` holds results of. A result
/// measured with other settings (quick against `--full`), or on another
/// machine than `here`, is refused, since one report would mix them.
pub fn unfinished<'n>(names: &[&'n str], dir: &Path, full: bool, here: &Machine) -> CliResult<Resumed<'n>> {
    #[derive(serde::Deserialize)]
    struct Measured {
        #[serde(default)]
        full: bool,
        #[serde(default)]
        commit: String,
        #[serde(default)]
        machine: Machine,
    }
    let settings = |full: bool| if full { "--full" } else { "quick" };
    let (mut left, mut kept) = (Vec::new(), Vec::new());
    for &name in names {
        let path = dir.join(format!("{name}.json"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                left.push(name);
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("--resume: cannot read {}", path.display())),
        };
        let measured: Measured =
            serde_json::from_str(&text).with_context(|| format!("--resume: {} is not results", path.display()))?;
        if measured.full != full {
            bail!(
                "--resume: {} was measured with {} settings and this run has {}: resume a run with its own settings",
                path.display(),
                settings(measured.full),
                settings(full)
            );
        }
        let there = &measured.machine;
        if (there.cpus, &there.cpu_model, &there.kernel) != (here.cpus, &here.cpu_model, &here.kernel) {
            bail!(
                "--resume: {} was measured on another machine ({}) than this one ({}): one report is of one machine",
                path.display(),
                there.summary(),
                here.summary()
            );
        }
        kept.push((path, measured.commit));
    }
    Ok(Resumed { left, kept })
}

impl Folder {
    /// Reads `dir`. A folder that cannot be read, or holds no experiment's
    /// JSON, is an error; so is a JSON file that does not parse.
    pub fn read(dir: &Path) -> CliResult<Folder> {
        std::fs::read_dir(dir).with_context(|| format!("cannot read the results folder {}", dir.display()))?;
        let mut results = Vec::new();
        let mut failed = Vec::new();
        for entry in registry::ENTRIES {
            if let Ok(error) = std::fs::read_to_string(error_file(dir, entry.name)) {
                failed.push(Failed { entry, error: error.trim_end().to_string() });
            }
            let path = dir.join(format!("{}.json", entry.name));
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
            };
            let mut header = Header::parse(&text).with_context(|| path.display().to_string())?;
            if header.experiment != entry.name {
                bail!("{} holds results of {:?}, not {}", path.display(), header.experiment, entry.name);
            }
            let older = header.schema < 2;
            let view = if older {
                let svg = std::fs::read_to_string(dir.join(format!("{}.svg", entry.name))).ok();
                Some(View { svg, ..View::default() })
            } else {
                let read = registry::read_json(entry.name, &text).with_context(|| path.display().to_string())?;
                read.map(|(view, figures)| {
                    header.figures = figures;
                    view
                })
            };
            results.push(Result { entry, header, view, older });
        }
        if results.is_empty() && failed.is_empty() {
            bail!("{} holds no experiment results (*.json from iomux bench)", dir.display());
        }
        Ok(Folder { dir: dir.to_path_buf(), results, failed })
    }

    /// The first machine description found.
    pub fn machine(&self) -> Option<&crate::lab::rig::machine::Machine> {
        self.results.iter().find_map(|r| r.header.machine.as_ref())
    }

    pub fn get(&self, name: &str) -> Option<&Result> {
        self.results.iter().find(|r| r.entry.name == name)
    }

    /// What the machine cost the experiments `names`: seconds waiting for
    /// the CPUs to be placed close, and seconds measuring samples left
    /// out (taken while they were apart or others were busy).
    pub fn machine_seconds(&self, names: &[&str]) -> (f64, f64) {
        let noise =
            self.results.iter().filter(|r| names.contains(&r.entry.name)).filter_map(|r| r.header.noise.as_ref());
        noise.fold((0.0, 0.0), |(w, l), n| (w + n.waited_s, l + n.left_out_s))
    }
}

impl Folder {
    /// Whether the machine's noise left any verdict undecided, and one
    /// sentence on it for the top of the report and the terminal.
    pub fn noise_line(&self) -> (bool, String) {
        let (mut takes, mut excluded, mut apart, mut unplaced, mut waited_s) = (0, 0, 0, 0, 0.0);
        let mut undecided: Vec<String> = Vec::new();
        let mut older_busy: Vec<String> = Vec::new();
        for r in &self.results {
            if let Some(n) = &r.header.noise {
                takes += n.takes;
                excluded += n.excluded;
                apart += n.apart;
                unplaced += n.unplaced;
                waited_s += n.waited_s;
            }
            let k = r.header.claims.iter().filter(|c| c.undecided == Some(Undecided::Noise)).count();
            if k > 0 {
                undecided.push(format!("{} ({k})", r.entry.label));
            }
            if let Some(n) = r.header.legacy_noise.as_ref().filter(|n| n.busy) {
                older_busy.push(format!(
                    "{} ({:.1}% of a CPU on average, {:.0}% in the busiest second)",
                    r.entry.label,
                    n.other_cpu_share * 100.0,
                    n.peak_other_cpu_share * 100.0
                ));
            }
        }
        let threshold = crate::lab::harness::trial::SAMPLE_THRESHOLD * 100.0;
        let cpus = crate::lab::rig::placement::CPUS;
        let mut text = match (takes, excluded) {
            (0, _) => String::new(),
            (_, 0) if unplaced == takes => format!(
                "None of the {takes} samples ran while other processes used more than {threshold:.0}% of a CPU (the \
                 CPUs' placement was not read)."
            ),
            _ if unplaced == takes => format!(
                "{excluded} of {takes} samples ran while other processes used more than {threshold:.0}% of a CPU \
                 (the CPUs' placement was not read); they were measured again and left out of every figure and \
                 verdict."
            ),
            (_, 0) => format!(
                "None of the {takes} samples ran while other processes used more than {threshold:.0}% of a CPU or \
                 while CPUs {} and {} were placed apart.",
                cpus.0, cpus.1
            ),
            _ => format!(
                "{} of {takes} samples ran while other processes used more than {threshold:.0}% of a CPU and {apart} \
                 while CPUs {} and {} were placed apart; they were measured again and left out of every figure and \
                 verdict.",
                excluded - apart.min(excluded),
                cpus.0,
                cpus.1
            ),
        };
        if waited_s >= 0.5 {
            text += &format!(
                " The run waited {waited_s:.0} s in all for CPUs {} and {} to be placed close again before samples.",
                cpus.0, cpus.1
            );
        }
        if !undecided.is_empty() {
            text += &format!(
                "{}The machine was noisy: claims of {} are inconclusive because only noisy samples would decide \
                 them. Re-run on a quieter machine for those.",
                if text.is_empty() { "" } else { " " },
                undecided.join(", ")
            );
        }
        if !older_busy.is_empty() {
            text += &format!(
                "{}Measured by an older iomux while the machine was busy (its verdicts inconclusive): {}.",
                if text.is_empty() { "" } else { " " },
                older_busy.join(", ")
            );
        }
        if text.is_empty() {
            text = "No sample records the machine's noise (results written by an older iomux).".into();
        }
        (!undecided.is_empty() || !older_busy.is_empty(), text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_run_keeps_results_of_its_own_settings_and_machine_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let here = Machine { cpus: 2, cpu_model: "AMD EPYC".into(), kernel: "6.18".into(), ..Machine::default() };
        let machine = r#""machine": {"cpus": 2, "cpu_model": "AMD EPYC", "kernel": "6.18"}"#;
        let idle = format!(r#"{{"experiment": "idle", "full": true, "commit": "abc", {machine}}}"#);
        std::fs::write(dir.path().join("idle.json"), idle).unwrap();
        // Written before settings were recorded: quick.
        std::fs::write(dir.path().join("sink.json"), format!(r#"{{"experiment": "sink", {machine}}}"#)).unwrap();
        let found = unfinished(&["syscall-rate", "idle"], dir.path(), true, &here).unwrap();
        let kept = vec![(dir.path().join("idle.json"), "abc".to_string())];
        assert_eq!(found, Resumed { left: vec!["syscall-rate"], kept });
        let mixed = unfinished(&["idle", "sink"], dir.path(), true, &here).unwrap_err().to_string();
        assert!(mixed.contains("sink.json was measured with quick settings and this run has --full"), "{mixed}");
        let intel = Machine { cpu_model: "Intel Xeon".into(), ..here.clone() };
        let elsewhere = unfinished(&["idle"], dir.path(), true, &intel).unwrap_err().to_string();
        assert!(
            elsewhere.contains("idle.json was measured on another machine (Linux 6.18, 2 x AMD EPYC"),
            "{elsewhere}"
        );
        std::fs::write(dir.path().join("echo.json"), "not json").unwrap();
        let broken = format!("{:#}", unfinished(&["echo"], dir.path(), false, &here).unwrap_err());
        assert!(broken.contains("echo.json is not results: expected"), "serde's reason too: {broken}");
    }
}
