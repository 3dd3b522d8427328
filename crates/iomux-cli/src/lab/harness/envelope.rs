//! One experiment's results as the JSON file holds them: the envelope
//! every experiment writes, read back by the report, the summary and
//! `iomux report A B` through types, never by key.

use crate::lab::harness::claim::{Claim, Source, Verdict};
use crate::lab::harness::facts::{Machine, Noise, CPUS};
use crate::lab::harness::stats::{Estimate, Needed};
use crate::lab::harness::trial::{Take, MAX_RETAKES, SAMPLE_THRESHOLD};
use crate::CliResult;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The envelope's layout. 1: before the envelope (a `checks` list with one
/// value per check and one noise reading per experiment); 2: this.
pub const SCHEMA: u32 = 2;

/// One figure of the run, as `iomux report A B` compares it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figure {
    /// Unique within the experiment: "epoll, Z = 0: seconds".
    pub name: String,
    /// The arm it measures, as the arm prints: "epoll, Z = 0".
    #[serde(default)]
    pub arm: String,
    /// What it measures of the arm: "seconds".
    #[serde(default)]
    pub metric: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub estimate: Option<Estimate>,
    /// Every kept sample.
    pub samples: Vec<f64>,
    /// The round of each sample, in the same order (empty in results
    /// written before it): `report A B` reads from the repeated figures
    /// how much faster or slower each round ran.
    #[serde(default)]
    pub rounds: Vec<usize>,
    /// The arm runs a program iomux did not write (nginx, redis, tokio, a
    /// bare syscall): `report A B` reads the machine's drift between two
    /// runs from these.
    #[serde(default)]
    pub reference: bool,
}

impl Figure {
    /// Results written before figures carried their arm and metric name
    /// them "ARM: METRIC"; those fields are read from the name once, here.
    fn with_arm_and_metric(mut self) -> Figure {
        if self.metric.is_empty() {
            let (arm, metric) = self.name.rsplit_once(": ").unwrap_or(("", &self.name));
            (self.arm, self.metric) = (arm.to_string(), metric.to_string());
        }
        self
    }
}

/// How the samples fared against the noise guard.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NoiseSummary {
    pub rounds: usize,
    pub takes: usize,
    /// Takes measured again or left out because other processes used more
    /// than `threshold` of a CPU during them, or the CPUs were apart.
    pub excluded: usize,
    /// Of those, the takes with the CPUs placed apart (`lab::rig::placement`).
    #[serde(default)]
    pub apart: usize,
    /// Takes for which the CPUs' placement was not read (an arm whose
    /// figures do not depend on it, a smoke run, a machine that cannot).
    #[serde(default)]
    pub unplaced: usize,
    /// Seconds spent waiting, before takes, for the CPUs to be placed
    /// close again.
    #[serde(default)]
    pub waited_s: f64,
    /// Seconds from the first take to the last, waits included.
    #[serde(default)]
    pub measured_s: f64,
    /// Seconds spent measuring the takes left out: with `waited_s`, what
    /// the machine's noise and the CPUs' placement cost the experiment.
    #[serde(default)]
    pub left_out_s: f64,
    /// Most takes ran with other processes busy, so retakes and made-up
    /// rounds stopped (`Trial::swamped`).
    #[serde(default)]
    pub swamped: bool,
    pub threshold: f64,
    pub max_retakes: usize,
    /// Others' use over the whole experiment, for scale.
    pub whole: Option<Noise>,
}

impl NoiseSummary {
    /// `whole` is dropped when nothing was measured: a reading over a run
    /// that only found its tools missing says nothing of any figure.
    pub fn of<K, S>(rounds: usize, takes: &[Take<K, S>], whole: Option<Noise>) -> NoiseSummary {
        let whole = whole.filter(|_| !takes.is_empty());
        NoiseSummary {
            rounds,
            takes: takes.len(),
            excluded: takes.iter().filter(|t| !t.kept).count(),
            apart: takes.iter().filter(|t| t.apart).count(),
            unplaced: takes.iter().filter(|t| t.cross_cpu_ns.is_none()).count(),
            waited_s: 0.0,
            measured_s: 0.0,
            // A fold from +0: an empty f64 sum is -0, written as "-0.0".
            left_out_s: takes.iter().filter(|t| !t.kept).filter_map(|t| t.took_s).fold(0.0, |a, s| a + s),
            swamped: false,
            threshold: SAMPLE_THRESHOLD,
            max_retakes: MAX_RETAKES,
            whole,
        }
    }

    /// One sentence for an experiment's page and the terminal.
    pub fn sentence(&self) -> String {
        if self.takes == 0 {
            return "Nothing was measured, so there is no noise reading.".into();
        }
        let whole = self.whole.as_ref().map_or(String::new(), |n| format!(" Over the whole run: {}.", n.describe()));
        let (cpus, busy) = (CPUS, self.excluded - self.apart.min(self.excluded));
        let read = self.unplaced < self.takes;
        let excluded = match (busy, self.apart) {
            (0, 0) if !read => format!(
                "none ran while other processes used more than {:.0}% of a CPU (the CPUs' placement was not read)",
                self.threshold * 100.0
            ),
            (busy, _) if !read => format!(
                "{busy} ran while other processes used more than {:.0}% of a CPU (the CPUs' placement was not \
                 read), and were left out (each measured again, up to {} times)",
                self.threshold * 100.0,
                self.max_retakes
            ),
            (0, 0) => format!(
                "none ran while other processes used more than {:.0}% of a CPU or CPUs {} and {} were placed apart",
                self.threshold * 100.0,
                cpus.0,
                cpus.1
            ),
            (busy, apart) => format!(
                "{busy} ran while other processes used more than {:.0}% of a CPU and {apart} while CPUs {} and {} \
                 were placed apart (a cross-CPU round trip over {} times the usual), and were left out (each \
                 measured again, up to {} times)",
                self.threshold * 100.0,
                cpus.0,
                cpus.1,
                crate::lab::harness::trial::APART,
                self.max_retakes
            ),
        };
        let waited = if self.waited_s >= 0.5 {
            format!(
                " Before takes, {:.0} s went to waiting for CPUs {} and {} to be placed close again.",
                self.waited_s, cpus.0, cpus.1
            )
        } else {
            String::new()
        };
        let waited = match self.left_out_s {
            s if s >= 0.5 => format!("{waited} Measuring the samples left out took {s:.0} s."),
            _ => waited,
        };
        let swamped = if self.swamped {
            " Most samples ran while other processes used the CPUs, so once that was clear none was measured \
             again and no round was added: a busy machine has no quiet moment to wait for."
        } else {
            ""
        };
        let unplaced = match self.unplaced {
            n if n == 0 || n == self.takes => String::new(),
            n => format!(" The CPUs' placement was not read for {n} of them, whose figures do not depend on it."),
        };
        format!("{} samples in {} rounds; {excluded}.{unplaced}{swamped}{waited}{whole}", self.takes, self.rounds)
    }
}

/// What every experiment writes: `P` its parameters, `K` its arms, `S`
/// its sample.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<P, K, S> {
    pub experiment: String,
    pub schema: u32,
    /// Measured with `--full`; false for quick settings, and in results
    /// written before it was recorded. `bench --resume` keeps a result
    /// only with the settings it was measured with.
    #[serde(default)]
    pub full: bool,
    /// The commit of the binary that measured it ("unknown" outside a git
    /// checkout; empty in results written before it was recorded).
    #[serde(default)]
    pub commit: String,
    pub machine: Machine,
    pub params: P,
    /// The documents' published finding, in words.
    pub published: String,
    pub claims: Vec<Claim>,
    pub figures: Vec<Figure>,
    pub noise: NoiseSummary,
    /// Every take, kept or not.
    pub takes: Vec<Take<K, S>>,
    /// Arms this machine could not measure, and why.
    pub unmeasurable: Vec<(K, String)>,
}

/// The part of any experiment's JSON that the report, the summary and the
/// comparison read, whatever the experiment.
#[derive(Clone, Debug)]
pub struct Header {
    pub experiment: String,
    pub machine: Option<Machine>,
    /// The documents' published finding, in words (empty if none).
    pub published: String,
    pub schema: u32,
    pub claims: Vec<Claim>,
    pub figures: Vec<Figure>,
    pub noise: Option<NoiseSummary>,
    /// Schema 1 only: the experiment's one noise reading.
    pub legacy_noise: Option<Noise>,
}

#[derive(Deserialize)]
struct HeaderV2 {
    experiment: String,
    machine: Option<Machine>,
    published: String,
    schema: u32,
    claims: Vec<Claim>,
    figures: Vec<Figure>,
    noise: NoiseSummary,
}

/// A check as schema 1 wrote it. Folders older than verdicts lack the last
/// four fields.
#[derive(Deserialize)]
struct CheckV1 {
    claim: String,
    value: Option<f64>,
    #[serde(default)]
    needed: String,
    #[serde(default)]
    threshold: f64,
    met: Option<bool>,
    #[serde(default)]
    detail: String,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    statement: String,
    #[serde(default)]
    verdict: Option<Verdict>,
    #[serde(default)]
    why: Option<String>,
}

#[derive(Deserialize)]
struct HeaderV1 {
    experiment: String,
    #[serde(default)]
    machine: Option<Machine>,
    #[serde(default)]
    checks: Vec<CheckV1>,
    #[serde(default)]
    noise: Option<Noise>,
}

impl CheckV1 {
    /// Schema 1 had one value per check and no interval: it shows as an
    /// interval of zero width from no known number of rounds. Results older
    /// than the noise guard have no verdict: a measured claim of theirs is
    /// inconclusive, since "does not hold" needed a machine known quiet.
    fn into_claim(self) -> Claim {
        let needed = match self.needed.as_str() {
            "<=" => Needed::AtMost(self.threshold),
            _ => Needed::AtLeast(self.threshold),
        };
        let verdict = self.verdict.unwrap_or(match self.met {
            Some(_) => Verdict::Inconclusive,
            None => Verdict::NotMeasurable,
        });
        let why = match (self.why, self.met) {
            (Some(why), _) => why,
            (None, Some(met)) => format!(
                "noise not recorded (results older than the noise guard); the value would {} the claim",
                if met { "support" } else { "not support" }
            ),
            (None, None) => self.detail,
        };
        Claim {
            quantity: self.claim,
            statement: self.statement,
            source: self.source.unwrap_or(Source::Iomux),
            needed,
            estimate: self.value.map(|v| Estimate { median: v, lo: v, hi: v, n: 0, confidence: 0.0 }),
            excluded: 0,
            verdict,
            why,
            undecided: None,
        }
    }
}

impl Header {
    pub fn parse(text: &str) -> Result<Header, serde_json::Error> {
        #[derive(Deserialize)]
        struct Schema {
            #[serde(default = "one")]
            schema: u32,
        }
        fn one() -> u32 {
            1
        }
        let Schema { schema } = serde_json::from_str(text)?;
        if schema >= 2 {
            let h: HeaderV2 = serde_json::from_str(text)?;
            return Ok(Header {
                experiment: h.experiment,
                machine: h.machine,
                published: h.published,
                schema: h.schema,
                claims: h.claims,
                figures: h.figures.into_iter().map(Figure::with_arm_and_metric).collect(),
                noise: Some(h.noise),
                legacy_noise: None,
            });
        }
        let h: HeaderV1 = serde_json::from_str(text)?;
        Ok(Header {
            experiment: h.experiment,
            machine: h.machine,
            published: String::new(),
            schema: 1,
            claims: h.checks.into_iter().map(CheckV1::into_claim).collect(),
            figures: Vec::new(),
            noise: None,
            legacy_noise: h.noise,
        })
    }
}

/// Writes `<dir>/<experiment>.json`.
pub fn write<P: Serialize, K: Serialize, S: Serialize>(
    dir: &Path,
    env: &Envelope<P, K, S>,
) -> CliResult<std::path::PathBuf> {
    let path = dir.join(format!("{}.json", env.experiment));
    std::fs::write(&path, serde_json::to_string_pretty(env)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_noise_sentence_says_where_placement_was_not_read() {
        let take = |cross_cpu_ns| Take {
            arm: "a",
            round: 0,
            others: Some(0.0),
            cross_cpu_ns,
            apart: false,
            kept: true,
            took_s: None,
            value: 1.0,
        };
        let some = NoiseSummary::of(1, &[take(Some(50.0)), take(None)], None).sentence();
        assert!(
            some.contains("or CPUs 0 and 1 were placed apart") && some.contains("not read for 1 of them"),
            "{some}"
        );
        let none = NoiseSummary::of(1, &[take(None), take(None)], None).sentence();
        assert!(none.contains("(the CPUs' placement was not read)") && !none.contains("placed apart"), "{none}");
        let busy = Take { kept: false, others: Some(0.9), ..take(None) };
        let busy = NoiseSummary::of(1, &[busy, take(None)], None).sentence();
        assert!(busy.starts_with("2 samples in 1 rounds; 1 ran while") && !busy.contains("placed apart"), "{busy}");
        let all = NoiseSummary::of(1, &[take(Some(50.0))], None).sentence();
        assert!(!all.contains("not read"), "{all}");
    }

    /// The seconds of the takes left out are summed, the kept ones not.
    #[test]
    fn time_spent_on_samples_left_out_is_told() {
        let take = |kept: bool, took_s: f64| Take {
            arm: "a",
            round: 0,
            others: Some(0.0),
            cross_cpu_ns: Some(300.0),
            apart: !kept,
            kept,
            took_s: Some(took_s),
            value: 1.0,
        };
        let summary = NoiseSummary::of(1, &[take(false, 0.75), take(false, 1.5), take(true, 4.0)], None);
        assert_eq!(summary.left_out_s, 2.25);
        let sentence = summary.sentence();
        assert!(sentence.contains("Measuring the samples left out took 2 s."), "{sentence}");
    }

    #[test]
    fn a_figure_written_before_arm_and_metric_gets_them_from_its_name() {
        let json = r#"{"name": "iomux-epoll closed-100: echoes/s", "unit": "1/s", "higher_is_better": true,
                       "estimate": null, "samples": []}"#;
        let f = serde_json::from_str::<Figure>(json).unwrap().with_arm_and_metric();
        assert_eq!((f.arm.as_str(), f.metric.as_str()), ("iomux-epoll closed-100", "echoes/s"));
    }

    #[test]
    fn schema_1_checks_open_as_claims() {
        let text = r#"{"experiment": "idle", "checks": [
            {"claim": "a", "value": 2.0, "needed": "<=", "threshold": 1.0, "met": false, "detail": "d",
             "source": "documents", "statement": "s", "verdict": "does not hold", "why": "w"},
            {"claim": "b", "value": 2.0, "needed": ">=", "threshold": 1.0, "met": true, "detail": "d"}]}"#;
        let h = Header::parse(text).unwrap();
        assert_eq!(h.schema, 1);
        let (a, b) = (&h.claims[0], &h.claims[1]);
        assert_eq!((a.verdict, a.needed, a.source), (Verdict::DoesNotHold, Needed::AtMost(1.0), Source::Documents));
        assert_eq!((b.verdict, b.source), (Verdict::Inconclusive, Source::Iomux));
        assert!(b.why.contains("older than the noise guard"), "{}", b.why);
        assert_eq!(b.estimate.map(|e| e.median), Some(2.0));
    }

    #[test]
    fn schema_2_reads_claims_and_figures() {
        let env = Envelope {
            experiment: "x".into(),
            schema: SCHEMA,
            full: false,
            commit: String::new(),
            machine: Machine::describe(),
            params: (),
            published: String::new(),
            claims: vec![],
            figures: vec![Figure {
                name: "a: f".into(),
                arm: "a".into(),
                metric: "f".into(),
                unit: "s".into(),
                higher_is_better: false,
                estimate: Estimate::of(&[1.0]),
                samples: vec![1.0],
                rounds: vec![0],
                reference: false,
            }],
            noise: NoiseSummary::of::<u8, f64>(1, &[], None),
            takes: Vec::<Take<u8, f64>>::new(),
            unmeasurable: vec![],
        };
        let h = Header::parse(&serde_json::to_string(&env).unwrap()).unwrap();
        assert_eq!((h.schema, h.figures.len()), (2, 1));
        assert!(h.noise.is_some() && h.legacy_noise.is_none());
    }
}
