//! A claim an experiment tests, and its verdict: the one record that the
//! JSON holds and every renderer (terminal, Markdown, HTML, `report A B`)
//! reads.

use crate::lab::harness::stats::{short, Estimate, Needed};
pub use crate::numbers::thousands;
use serde::{Deserialize, Serialize};

/// Whose claim it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A finding of the documents this project grew from.
    Documents,
    /// A goal of iomux's own (overheads, peers, defaults).
    Iomux,
    /// What this machine allows: a reference measured beside iomux (a
    /// server that does nothing but the syscalls) whose verdict says
    /// whether a goal is reachable here at all; not a verdict on iomux.
    Machine,
}

/// What a claim's interval says on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The whole 95% interval is on the claim's side.
    #[serde(rename = "holds")]
    Holds,
    /// The whole 95% interval is on the other side.
    #[serde(rename = "does not hold")]
    DoesNotHold,
    /// The interval straddles the threshold, or too few quiet samples.
    #[serde(rename = "inconclusive")]
    Inconclusive,
    /// The run did not measure what the claim needs.
    #[serde(rename = "not measurable")]
    NotMeasurable,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [Verdict::Holds, Verdict::DoesNotHold, Verdict::Inconclusive, Verdict::NotMeasurable];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotMeasurable => "not measurable",
        }
    }
}

/// Why an inconclusive claim is undecided, and so what would decide it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Undecided {
    /// Fewer quiet rounds than a 95% interval needs: more rounds decide it.
    TooFewRounds { quiet: usize },
    /// Other processes' work: only noisy rounds would decide it, or too
    /// few quiet ones were left. A quieter machine decides it.
    Noise,
    /// At the spread measured, about `rounds` quiet rounds in all would
    /// narrow the interval off the threshold.
    MoreRounds { rounds: usize },
    /// The value lies within the noise of the threshold: no practical run
    /// decides it (about `rounds` would). The interval lies within
    /// `margin` of the threshold: equivalent to it within that margin.
    AtThreshold { rounds: usize, margin: f64 },
}

/// The most quiet rounds a practical run spends on one claim: past this,
/// a claim is said to sit at its threshold rather than to need more
/// rounds. Beyond `trial::MAX_ROUNDS` (40, what `--budget` can buy), as
/// `--reps` buys more.
pub const PRACTICAL_ROUNDS: usize = 100;

/// One claim with its measured interval and verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claim {
    /// The quantity, e.g. "poll: time at Z = 10240 / time at Z = 0".
    pub quantity: String,
    /// The claim in words (the documents' finding, or iomux's goal).
    pub statement: String,
    pub source: Source,
    pub needed: Needed,
    /// The quantity's median over quiet rounds, with its interval; None
    /// when nothing was measured.
    pub estimate: Option<Estimate>,
    /// Rounds left out because other processes used the CPU during them,
    /// or the CPUs were placed apart.
    pub excluded: usize,
    pub verdict: Verdict,
    pub why: String,
    /// Inconclusive: why, as data (the same as the end of `why`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecided: Option<Undecided>,
}

impl Claim {
    /// What the summary calls it: the statement, or the quantity.
    pub fn title(&self) -> &str {
        if self.statement.is_empty() {
            &self.quantity
        } else {
            &self.statement
        }
    }

    pub fn is_documents(&self) -> bool {
        self.source == Source::Documents
    }

    /// One of iomux's own goals (not the documents', not the machine's).
    pub fn is_goal(&self) -> bool {
        self.source == Source::Iomux
    }

    /// "1.010 [0.990, 1.030] (needed >= 0.8)", or "-". Results of schema
    /// 1 hold one value and no interval: "1.010, one value (needed ...)".
    pub fn measured(&self) -> String {
        match &self.estimate {
            Some(e) if e.n == 0 => format!("{}, one value (needed {})", number(e.median), self.needed.describe()),
            Some(e) => {
                format!("{} [{}, {}] (needed {})", number(e.median), number(e.lo), number(e.hi), self.needed.describe())
            }
            None => "-".into(),
        }
    }
}

/// A figure as tables print it: thousands separated from 100 up.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        thousands(v)
    } else {
        format!("{v:.3}")
    }
}

/// How a claim's rounds came out, for [`judge`].
pub struct Rounds<'a> {
    /// The quantity's value in each round whose samples were all quiet.
    pub quiet: &'a [f64],
    /// The same with the noisy rounds included.
    pub all: &'a [f64],
    /// Why nothing could be measured, when nothing was.
    pub unmeasurable: Option<&'a str>,
}

/// What [`judge`] decides.
pub struct Judgement {
    pub estimate: Option<Estimate>,
    pub verdict: Verdict,
    pub why: String,
    pub undecided: Option<Undecided>,
}

/// The verdict and its reason, from the quiet rounds' interval. Noisy
/// rounds never decide: when the quiet ones leave the claim open but all
/// the rounds would settle it, the verdict is inconclusive and says so.
/// An inconclusive verdict says what would decide it ([`Undecided`]).
pub fn judge(needed: Needed, rounds: &Rounds) -> Judgement {
    let excluded = rounds.all.len() - rounds.quiet.len();
    let quiet = Estimate::of(rounds.quiet);
    let Some(e) = quiet.or_else(|| Estimate::of(rounds.all)) else {
        let why = rounds.unmeasurable.unwrap_or("not measured in this run");
        return Judgement { estimate: None, verdict: Verdict::NotMeasurable, why: why.to_string(), undecided: None };
    };
    let interval = format!("95% interval [{}, {}] of {} rounds", number(e.lo), number(e.hi), e.n);
    let noisy = if excluded > 0 {
        format!("; {excluded} noisy round{} left out", if excluded == 1 { "" } else { "s" })
    } else {
        String::new()
    };
    let decided = |verdict, why| Judgement { estimate: Some(e), verdict, why, undecided: None };
    match quiet.and_then(|q| needed.decide(&q)) {
        Some(true) => decided(Verdict::Holds, format!("{interval} is {}{noisy}", needed.describe())),
        Some(false) => decided(Verdict::DoesNotHold, format!("{interval} is not {}{noisy}", needed.describe())),
        None => {
            let quiet_n = quiet.map_or(0, |q| q.n);
            let confident = quiet.is_some_and(|q| q.is_confident());
            let all_decide = excluded > 0 && Estimate::of(rounds.all).is_some_and(|a| needed.decide(&a).is_some());
            let (why, undecided) = if !confident && excluded > 0 {
                let why = format!(
                    "machine noisy: {excluded} of {} rounds ran while other processes used the CPU or the CPUs \
                     were placed apart; the {quiet_n} quiet ones are too few for a 95% interval (6 needed): a \
                     quieter machine would decide it",
                    rounds.all.len()
                );
                (why, Undecided::Noise)
            } else if !confident {
                let why =
                    format!("only {quiet_n} rounds: too few for a 95% interval (6 needed): more rounds decide it");
                (why, Undecided::TooFewRounds { quiet: quiet_n })
            } else if all_decide {
                let why = format!(
                    "machine noisy: {interval} straddles {}; only the {excluded} noisy rounds would decide it: a \
                     quieter machine would",
                    short_bounds(needed)
                );
                (why, Undecided::Noise)
            } else {
                let (rounds, margin) = rounds_to_decide(needed, &e);
                let straddles = format!("{interval} straddles {}{noisy}", short_bounds(needed));
                if rounds <= PRACTICAL_ROUNDS {
                    let why = format!("{straddles}: at this spread about {rounds} quiet rounds in all would decide it");
                    (why, Undecided::MoreRounds { rounds })
                } else {
                    let how_many = if rounds == usize::MAX {
                        "the median is on it".to_string()
                    } else {
                        format!("about {rounds} quiet rounds would decide it")
                    };
                    let why = format!(
                        "{straddles}: it lies within the noise of the threshold ({how_many}); equivalent to it \
                         within ±{}",
                        number(margin)
                    );
                    (why, Undecided::AtThreshold { rounds, margin })
                }
            };
            Judgement { estimate: Some(e), verdict: Verdict::Inconclusive, why, undecided: Some(undecided) }
        }
    }
}

/// About how many rounds would take a straddling interval off the
/// threshold it straddles, and the interval's farthest distance from that
/// threshold (the margin within which the value equals it). The median's
/// interval narrows as 1/sqrt(n), so the side facing the threshold, `h`
/// wide, must shrink to the median's distance `d` from it: n (h/d)^2
/// rounds.
fn rounds_to_decide(needed: Needed, e: &Estimate) -> (usize, f64) {
    let threshold = match needed {
        Needed::AtLeast(t) | Needed::AtMost(t) => t,
        // The bound the interval crosses (the nearer to the median).
        Needed::Within(a, b) => {
            if (e.median - a).abs() <= (e.median - b).abs() {
                a
            } else {
                b
            }
        }
    };
    let d = (e.median - threshold).abs();
    let h = if e.median >= threshold { e.median - e.lo } else { e.hi - e.median };
    let margin = (e.lo - threshold).abs().max((e.hi - threshold).abs());
    let rounds = if d <= 0.0 || !d.is_finite() {
        usize::MAX
    } else {
        let n = e.n as f64 * (h / d).powi(2);
        if n.is_finite() && n < 1e9 {
            (n.ceil() as usize).max(e.n + 1)
        } else {
            usize::MAX
        }
    };
    (rounds, margin)
}

fn short_bounds(needed: Needed) -> String {
    match needed {
        Needed::AtLeast(t) | Needed::AtMost(t) => short(t),
        Needed::Within(a, b) => format!("{} or {}", short(a), short(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds<'a>(quiet: &'a [f64], all: &'a [f64]) -> Rounds<'a> {
        Rounds { quiet, all, unmeasurable: None }
    }

    #[test]
    fn quiet_rounds_wholly_on_one_side_decide() {
        let v = [1.2, 1.25, 1.3, 1.22, 1.28, 1.24];
        let Judgement { estimate: e, verdict, why, .. } = judge(Needed::AtLeast(1.1), &rounds(&v, &v));
        assert_eq!(verdict, Verdict::Holds, "{why}");
        assert!(e.is_some_and(|e| e.lo == 1.2));
        let Judgement { verdict, why, .. } = judge(Needed::AtLeast(1.5), &rounds(&v, &v));
        assert_eq!(verdict, Verdict::DoesNotHold, "{why}");
        assert!(why.contains("is not >= 1.5"), "{why}");
    }

    #[test]
    fn a_straddling_interval_is_inconclusive() {
        let v = [0.9, 1.1, 1.0, 0.95, 1.05, 1.02];
        let Judgement { verdict, why, .. } = judge(Needed::AtLeast(1.0), &rounds(&v, &v));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(why.contains("straddles 1"), "{why}");
    }

    #[test]
    fn an_undecided_claim_says_how_many_rounds_would_decide_it() {
        // Median 1.035, interval [0.99, 1.06] of 6 rounds against >= 1:
        // the low side, 0.045 wide, must shrink to 0.035: 6 (0.045/0.035)^2
        // = 9.9, so about 10 rounds.
        let v = [0.99, 1.02, 1.03, 1.04, 1.05, 1.06];
        let j = judge(Needed::AtLeast(1.0), &rounds(&v, &v));
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert_eq!(j.undecided, Some(Undecided::MoreRounds { rounds: 10 }), "{}", j.why);
        assert!(j.why.ends_with("about 10 quiet rounds in all would decide it"), "{}", j.why);
    }

    #[test]
    fn a_value_on_its_threshold_gets_an_equivalence_margin() {
        // Median 1.005 against >= 1 with a ±0.05 spread: about 600 rounds,
        // more than any practical run; equal to 1 within 0.05.
        let v = [0.955, 0.98, 1.0, 1.01, 1.03, 1.055];
        let j = judge(Needed::AtLeast(1.0), &rounds(&v, &v));
        let Some(Undecided::AtThreshold { rounds, margin }) = j.undecided else {
            panic!("{:?}: {}", j.undecided, j.why)
        };
        assert!(rounds > PRACTICAL_ROUNDS, "{rounds}");
        assert!((margin - 0.055).abs() < 1e-9, "{margin}");
        assert!(j.why.contains("within the noise of the threshold"), "{}", j.why);
        assert!(j.why.contains("equivalent to it within ±0.055"), "{}", j.why);
    }

    #[test]
    fn too_few_rounds_say_so() {
        let v = [1.0, 1.1, 1.2];
        let j = judge(Needed::AtLeast(1.05), &rounds(&v, &v));
        assert_eq!(j.undecided, Some(Undecided::TooFewRounds { quiet: 3 }), "{}", j.why);
    }

    #[test]
    fn noisy_rounds_never_decide() {
        // Three quiet rounds cannot give a 95% interval; with the three
        // busy ones the claim would fail: inconclusive, naming the noise.
        let quiet = [1.2, 1.3, 1.25];
        let all = [1.2, 1.3, 1.25, 0.5, 0.6, 0.55];
        let Judgement { verdict, why, .. } = judge(Needed::AtLeast(1.0), &rounds(&quiet, &all));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(why.starts_with("machine noisy: 3 of 6 rounds"), "{why}");
        // No quiet round at all: the same.
        let Judgement { estimate: e, verdict, undecided, .. } = judge(Needed::AtLeast(1.0), &rounds(&[], &all));
        assert_eq!(undecided, Some(Undecided::Noise));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(e.is_some(), "the busy rounds' figure is still shown");
    }

    #[test]
    fn quiet_rounds_decide_despite_noisy_ones() {
        let quiet = [1.2, 1.3, 1.25, 1.22, 1.28, 1.24];
        let mut all = quiet.to_vec();
        all.extend([0.1, 0.2]);
        let Judgement { verdict, why, .. } = judge(Needed::AtLeast(1.0), &rounds(&quiet, &all));
        assert_eq!(verdict, Verdict::Holds);
        assert!(why.ends_with("2 noisy rounds left out"), "{why}");
    }

    #[test]
    fn nothing_measured_says_why() {
        let r = Rounds { quiet: &[], all: &[], unmeasurable: Some("select cannot watch fd 2000") };
        let Judgement { estimate: e, verdict, why, undecided } = judge(Needed::AtMost(1.0), &r);
        assert_eq!((e, verdict, why.as_str()), (None, Verdict::NotMeasurable, "select cannot watch fd 2000"));
        assert_eq!(undecided, None);
    }
}
