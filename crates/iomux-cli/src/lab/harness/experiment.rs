//! The experiment contract: what an experiment provides, and the one
//! driver that runs any of them, from checked flags to written files.
//!
//! An experiment names its arms (the configurations it measures), its
//! sample (what one measurement of an arm gives), the metrics of that
//! sample, its claims (each a quantity computed from one round's samples),
//! and a view of its results. The driver measures the first rounds, adds
//! rounds until the claims decide, judges them, and writes the envelope;
//! Markdown, HTML, SVG and the terminal are drawn from the envelope alone.

use crate::lab::harness::claim::{Claim, Undecided};
use crate::lab::harness::envelope::{Envelope, Figure};
use crate::lab::harness::stats::Estimate;
use crate::lab::harness::trial::{Measure, Spec, Trial, MAX_ROUNDS};
use crate::lab::Settings;
use crate::CliResult;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Display;

/// How the lab lists an experiment.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// The subcommand and file name: "idle".
    pub name: &'static str,
    /// As the documents number it: "E2".
    pub label: &'static str,
    /// The heading of its page.
    pub title: &'static str,
    /// Flags for CI's smoke run, split at spaces: small sizes, every code
    /// path.
    pub smoke: &'static str,
    /// Programs it drives that `iomux bench` brings when missing
    /// (see `lab::tools`).
    pub needs: &'static [&'static str],
}

impl Entry {
    /// An entry with no smoke flags and no programs needed.
    pub const fn new(name: &'static str, label: &'static str, title: &'static str) -> Entry {
        Entry { name, label, title, smoke: "", needs: &[] }
    }

    pub const fn smoke(self, smoke: &'static str) -> Entry {
        Entry { smoke, ..self }
    }

    pub const fn needs(self, needs: &'static [&'static str]) -> Entry {
        Entry { needs, ..self }
    }
}

/// One number a sample carries, by which runs are compared.
pub struct Metric<S> {
    pub name: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
    pub get: fn(&S) -> f64,
}

/// An [`Experiment`] impl's four types in one line:
/// `experiment_types!(Args, Params, Arm, Sample);`. With `, rounds:
/// params.rounds` also its `rounds`, read from the params' field.
macro_rules! experiment_types {
    ($args:ty, $params:ty, $arm:ty, $sample:ty) => {
        type Args = $args;
        type Params = $params;
        type Arm = $arm;
        type Sample = $sample;
    };
    ($args:ty, $params:ty, $arm:ty, $sample:ty, rounds: params.rounds) => {
        experiment_types!($args, $params, $arm, $sample);
        fn rounds(params: &$params) -> $crate::lab::harness::Rounds {
            params.rounds
        }
    };
}
pub(crate) use experiment_types;

pub trait Experiment {
    type Args: Default + clap::Args;
    /// The checked flags and what the machine allows; written to the JSON.
    type Params: Serialize + DeserializeOwned;
    type Arm: Clone + PartialEq + Display + Serialize + DeserializeOwned;
    type Sample: Serialize + DeserializeOwned;

    const ENTRY: Entry;
    /// The documents' published finding, in words.
    const PUBLISHED: &'static str;

    /// Checks the flags and the machine before anything is measured.
    fn plan(args: &Self::Args, settings: &Settings) -> CliResult<Self::Params>;

    /// The first rounds, and the time more rounds may take for claims
    /// still undecided.
    fn rounds(params: &Self::Params) -> super::Rounds;

    fn claims(params: &Self::Params) -> Vec<Spec<Self::Arm, Self::Sample>>;

    fn metrics() -> Vec<Metric<Self::Sample>>;

    /// The arms of first round `round`; `trial` holds what the rounds
    /// before it measured (an arm too slow to repeat may be left out).
    fn first_arms(params: &Self::Params, round: usize, trial: &Trial<Self::Arm, Self::Sample>) -> Vec<Self::Arm>;

    /// What measures one arm once, set up once for the run: it may keep
    /// what it learnt between arms (a server that cannot start is not
    /// tried again), and may group the trial's arms. The driver runs the
    /// first rounds with it, then the rounds that undecided claims need.
    fn rig<'a>(
        params: &'a Self::Params,
        trial: &mut Trial<Self::Arm, Self::Sample>,
        settings: &'a Settings,
    ) -> CliResult<Measure<'a, Self::Arm, Self::Sample>>;

    /// Whether the kernel's softirq time counts as this arm's own in the
    /// noise reading of its samples (its traffic causes it: an emulated
    /// link's work runs in softirq, charged to no process). Per arm: E2's
    /// and E3's loopback cells beside their LAN ones count it as others'.
    fn network_is_own(_arm: &Self::Arm) -> bool {
        false
    }

    /// Whether this arm's figures are free of the CPUs' placement (a count,
    /// resident memory, a timer's seconds), so that its takes neither wait
    /// for the CPUs to be placed close nor are measured again when apart.
    fn placement_free(_arm: &Self::Arm) -> bool {
        false
    }

    /// Whether `iomux report A B` compares this arm's metrics: not for an
    /// arm run only for a count whose times mean nothing (E5's perf runs).
    fn compared(_arm: &Self::Arm) -> bool {
        true
    }

    /// Whether this arm's figures move only with the machine, whatever
    /// iomux's code does (nginx or redis measured by their own clients, a
    /// bare syscall; not E5's peers, which iomux's load drives): `iomux
    /// report A B` reads the machine's drift between two runs from them.
    fn reference(_arm: &Self::Arm) -> bool {
        false
    }

    /// The unit of `metric`'s figure for `arm`, where it depends on the
    /// arm (the report pools the spread of figures of one unit).
    fn unit(_arm: &Self::Arm, metric: &Metric<Self::Sample>) -> &'static str {
        metric.unit
    }
}

impl<P, K: PartialEq, S> Envelope<P, K, S> {
    /// The kept samples of `arm`.
    pub fn kept<'s>(&'s self, arm: &'s K) -> impl Iterator<Item = &'s S> + 's {
        self.takes.iter().filter(move |t| t.kept && &t.arm == arm).map(|t| &t.value)
    }

    /// The median and interval of `field` over the kept samples of `arm`.
    pub fn estimate(&self, arm: &K, field: impl Fn(&S) -> f64) -> Option<Estimate> {
        Estimate::of(&self.kept(arm).map(field).collect::<Vec<_>>())
    }

    /// Why `arm` could not be measured, if it could not.
    pub fn note(&self, arm: &K) -> Option<&str> {
        self.unmeasurable.iter().find(|(k, _)| k == arm).map(|(_, n)| n.as_str())
    }
}

/// Every arm measured, in the order first measured (an arm whose every
/// sample was busy has figures without an estimate).
fn arms<K: Clone + PartialEq, S>(env: &Envelope<impl Sized, K, S>) -> Vec<K> {
    let mut arms: Vec<K> = Vec::new();
    for t in &env.takes {
        if !arms.contains(&t.arm) {
            arms.push(t.arm.clone());
        }
    }
    arms
}

/// One figure per arm and metric, for `iomux report A B`.
pub fn figures<E: Experiment>(env: &Envelope<E::Params, E::Arm, E::Sample>) -> Vec<Figure> {
    let mut out = Vec::new();
    for arm in arms(env).into_iter().filter(E::compared) {
        for m in E::metrics() {
            let kept = env.takes.iter().filter(|t| t.kept && t.arm == arm);
            let (rounds, samples): (Vec<usize>, Vec<f64>) =
                kept.map(|t| (t.round, (m.get)(&t.value))).filter(|(_, v)| v.is_finite()).unzip();
            out.push(Figure {
                name: format!("{arm}: {}", m.name),
                arm: arm.to_string(),
                metric: m.name.to_string(),
                unit: E::unit(&arm, &m).into(),
                higher_is_better: m.higher_is_better,
                estimate: Estimate::of(&samples),
                samples,
                rounds,
                reference: E::reference(&arm),
            });
        }
    }
    out
}

/// Ends the reason of a claim that more rounds would decide with what they
/// cost at this run's pace (`pace`: seconds a round of every arm) and the
/// command that spends them: `--budget` buys rounds up to [`MAX_ROUNDS`],
/// `--reps` any number.
pub fn say_how_to_decide<A: clap::Args>(claim: &mut Claim, name: &'static str, pace: f64) {
    let Some(Undecided::MoreRounds { rounds }) = claim.undecided else { return };
    let quiet = claim.estimate.map_or(0, |e| e.n);
    let seconds = rounds.saturating_sub(quiet) as f64 * pace;
    let flags = A::augment_args(clap::Command::new(name));
    let has = |flag: &str| flags.get_arguments().any(|a| a.get_long() == Some(flag));
    let command = if rounds <= MAX_ROUNDS && has("budget") {
        format!(": `iomux bench {name} --budget {:.0}`", (seconds * 1.25).ceil())
    } else if has("reps") {
        format!(": `iomux bench {name} --reps {rounds}`")
    } else {
        String::new()
    };
    let minutes = (seconds / 60.0).ceil();
    let unit = if minutes == 1.0 { "minute" } else { "minutes" };
    claim.why += &format!(", about {minutes:.0} {unit} more at this run's pace{command}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::harness::claim::{Source, Verdict};
    use crate::lab::harness::stats::Needed;

    #[derive(clap::Args, Debug, Default)]
    struct WithBudget {
        #[arg(long)]
        budget: Option<f64>,
        #[arg(long)]
        reps: Option<usize>,
    }

    fn undecided(rounds: usize) -> Claim {
        Claim {
            quantity: "q".into(),
            statement: String::new(),
            source: Source::Iomux,
            needed: Needed::AtLeast(1.0),
            estimate: Some(Estimate { median: 1.03, lo: 0.99, hi: 1.06, n: 6, confidence: 0.97 }),
            excluded: 0,
            verdict: Verdict::Inconclusive,
            why: "w".into(),
            undecided: Some(Undecided::MoreRounds { rounds }),
        }
    }

    #[test]
    fn an_undecided_claim_names_the_time_and_the_command_that_decide_it() {
        // 14 more rounds at 30 s a round: 7 minutes, a budget of 525 s.
        let mut c = undecided(20);
        say_how_to_decide::<WithBudget>(&mut c, "echo", 30.0);
        assert_eq!(c.why, "w, about 7 minutes more at this run's pace: `iomux bench echo --budget 525`");
        // Past what a budget buys, --reps.
        let mut c = undecided(60);
        say_how_to_decide::<WithBudget>(&mut c, "echo", 30.0);
        assert!(c.why.ends_with("`iomux bench echo --reps 60`"), "{}", c.why);
        // An experiment with neither flag: the time alone.
        let mut c = undecided(20);
        say_how_to_decide::<crate::lab::experiments::toy::Args>(&mut c, "toy", 30.0);
        assert_eq!(c.why, "w, about 7 minutes more at this run's pace");
    }
}
