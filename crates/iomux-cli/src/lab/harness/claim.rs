//! A claim an experiment tests, and its verdict: the one record that the
//! JSON holds and every renderer (terminal, Markdown, HTML, `report A B`)
//! reads.

use super::stats::{short, Estimate, Needed};
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
        super::super::table::thousands(v)
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

/// The verdict and its reason, from the quiet rounds' interval. Noisy
/// rounds never decide: when the quiet ones leave the claim open but all
/// the rounds would settle it, the verdict is inconclusive and says so.
pub fn judge(needed: Needed, rounds: &Rounds) -> (Option<Estimate>, Verdict, String) {
    let excluded = rounds.all.len() - rounds.quiet.len();
    let quiet = Estimate::of(rounds.quiet);
    let Some(e) = quiet.or_else(|| Estimate::of(rounds.all)) else {
        let why = rounds.unmeasurable.unwrap_or("not measured in this run");
        return (None, Verdict::NotMeasurable, why.to_string());
    };
    let interval = format!("95% interval [{}, {}] of {} rounds", number(e.lo), number(e.hi), e.n);
    let noisy = if excluded > 0 {
        format!("; {excluded} noisy round{} left out", if excluded == 1 { "" } else { "s" })
    } else {
        String::new()
    };
    match quiet.and_then(|q| needed.decide(&q)) {
        Some(true) => (Some(e), Verdict::Holds, format!("{interval} is {}{noisy}", needed.describe())),
        Some(false) => (Some(e), Verdict::DoesNotHold, format!("{interval} is not {}{noisy}", needed.describe())),
        None => {
            let quiet_n = quiet.map_or(0, |q| q.n);
            let confident = quiet.is_some_and(|q| q.is_confident());
            let all_decide = excluded > 0 && Estimate::of(rounds.all).is_some_and(|a| needed.decide(&a).is_some());
            let why = if !confident && excluded > 0 {
                format!(
                    "machine noisy: {excluded} of {} rounds ran while other processes used the CPU or the CPUs \
                     were placed apart; the {quiet_n} quiet ones are too few for a 95% interval (6 needed)",
                    rounds.all.len()
                )
            } else if !confident {
                format!("only {quiet_n} rounds: too few for a 95% interval (6 needed)")
            } else if all_decide {
                format!(
                    "machine noisy: {interval} straddles {}; only the {excluded} noisy rounds would decide it",
                    short_bounds(needed)
                )
            } else {
                format!("{interval} straddles {}{noisy}", short_bounds(needed))
            };
            (Some(e), Verdict::Inconclusive, why)
        }
    }
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
        let (e, verdict, why) = judge(Needed::AtLeast(1.1), &rounds(&v, &v));
        assert_eq!(verdict, Verdict::Holds, "{why}");
        assert!(e.is_some_and(|e| e.lo == 1.2));
        let (_, verdict, why) = judge(Needed::AtLeast(1.5), &rounds(&v, &v));
        assert_eq!(verdict, Verdict::DoesNotHold, "{why}");
        assert!(why.contains("is not >= 1.5"), "{why}");
    }

    #[test]
    fn a_straddling_interval_is_inconclusive() {
        let v = [0.9, 1.1, 1.0, 0.95, 1.05, 1.02];
        let (_, verdict, why) = judge(Needed::AtLeast(1.0), &rounds(&v, &v));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(why.contains("straddles 1"), "{why}");
    }

    #[test]
    fn noisy_rounds_never_decide() {
        // Three quiet rounds cannot give a 95% interval; with the three
        // busy ones the claim would fail: inconclusive, naming the noise.
        let quiet = [1.2, 1.3, 1.25];
        let all = [1.2, 1.3, 1.25, 0.5, 0.6, 0.55];
        let (_, verdict, why) = judge(Needed::AtLeast(1.0), &rounds(&quiet, &all));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(why.starts_with("machine noisy: 3 of 6 rounds"), "{why}");
        // No quiet round at all: the same.
        let (e, verdict, _) = judge(Needed::AtLeast(1.0), &rounds(&[], &all));
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(e.is_some(), "the busy rounds' figure is still shown");
    }

    #[test]
    fn quiet_rounds_decide_despite_noisy_ones() {
        let quiet = [1.2, 1.3, 1.25, 1.22, 1.28, 1.24];
        let mut all = quiet.to_vec();
        all.extend([0.1, 0.2]);
        let (_, verdict, why) = judge(Needed::AtLeast(1.0), &rounds(&quiet, &all));
        assert_eq!(verdict, Verdict::Holds);
        assert!(why.ends_with("2 noisy rounds left out"), "{why}");
    }

    #[test]
    fn nothing_measured_says_why() {
        let r = Rounds { quiet: &[], all: &[], unmeasurable: Some("select cannot watch fd 2000") };
        let (e, verdict, why) = judge(Needed::AtMost(1.0), &r);
        assert_eq!((e, verdict, why.as_str()), (None, Verdict::NotMeasurable, "select cannot watch fd 2000"));
    }
}
