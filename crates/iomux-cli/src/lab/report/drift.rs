//! How the machine's speed moved, within a run and between two: what
//! `iomux report A B` takes out before it calls a change.
//!
//! On a shared machine one cell can run 10-25% faster or slower from one
//! minute to the next. Two quick runs of one commit here: every server of
//! E6 and E7, nginx and redis as much as iomux's, 10-15% slower in the
//! second; E2's first round 13% slower than its later rounds.
//! - Round effects, within a run: a round that ran slow for every arm
//!   shows in the figures measured in several rounds. A figure measured in
//!   few rounds is steadied by those rounds' effects before comparison.
//! - The machine's drift, between two runs: figures of reference programs
//!   (nginx, redis, a bare syscall: `Experiment::reference`) move only
//!   with the machine. How far they moved, and how far apart, says how
//!   far a figure may move without a change of its own.

use crate::lab::harness::envelope::Figure;
use crate::lab::harness::stats::median;
use crate::lab::harness::stats::pooled::{t_quantile, Takes};
use std::collections::BTreeMap;

/// Fewest repeated figures measured in a round for its effect to be read.
const MIN_FIGURES_PER_ROUND: usize = 3;

/// Fewest reference figures of a kind that give the machine's drift (with
/// three, t has 2 degrees of freedom and the interval is too wide to use).
pub const MIN_REFERENCES: usize = 4;

/// One run's round effects for one kind of figure.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundEffects {
    /// Per round: the factor by which the repeated figures measured in it
    /// stood above their own medians (their median), and how many.
    by_round: BTreeMap<usize, (f64, usize)>,
}

impl RoundEffects {
    /// Read from the repeated figures among `figures` (one kind, one run);
    /// rounds with fewer than [`MIN_FIGURES_PER_ROUND`] are left out.
    pub fn read<'a>(figures: impl IntoIterator<Item = &'a Figure>) -> RoundEffects {
        let mut logs: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for f in figures {
            let usable = f.samples.len() >= 2 && aligned(f) && f.samples.iter().all(|&x| x > 0.0);
            let Some(m) = median(&f.samples).filter(|_| usable) else { continue };
            for (&round, &x) in f.rounds.iter().zip(&f.samples) {
                logs.entry(round).or_default().push((x / m).ln());
            }
        }
        let by_round = logs
            .into_iter()
            .filter(|(_, v)| v.len() >= MIN_FIGURES_PER_ROUND)
            .filter_map(|(round, v)| Some((round, (median(&v)?.exp(), v.len()))))
            .collect();
        RoundEffects { by_round }
    }

    /// How many effects were read: each cost the spread a degree of freedom.
    pub fn count(&self) -> usize {
        self.by_round.len()
    }

    /// `f`'s samples, each divided by its round's effect (as measured
    /// where none was read, or the rounds are not known). A median of k
    /// values has about pi/2 times the variance of their mean: the effect
    /// adds pi/(2k) of a take's variance to the take it steadies.
    pub fn steady(&self, f: &Figure) -> Takes {
        if !aligned(f) {
            return Takes::as_measured(&f.samples);
        }
        let (values, extra_variance) = f
            .samples
            .iter()
            .zip(&f.rounds)
            .map(|(&x, round)| match self.by_round.get(round) {
                Some(&(effect, k)) => (x / effect, std::f64::consts::FRAC_PI_2 / k as f64),
                None => (x, 0.0),
            })
            .unzip();
        Takes { values, extra_variance }
    }
}

/// Whether `f` knows the round of each of its samples.
fn aligned(f: &Figure) -> bool {
    f.rounds.len() == f.samples.len()
}

/// How the reference programs' figures of one kind moved from A to B.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drift {
    /// Their geometric mean ratio B/A.
    pub ratio: f64,
    /// The standard deviation of their log ratios: how far apart figures
    /// that changed only with the machine moved.
    pub log_sd: f64,
    pub n: usize,
}

impl Drift {
    /// From the log ratios B/A of the reference figures; None below
    /// [`MIN_REFERENCES`].
    pub fn of(log_ratios: &[f64]) -> Option<Drift> {
        let n = log_ratios.len();
        if n < MIN_REFERENCES || log_ratios.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mean = log_ratios.iter().sum::<f64>() / n as f64;
        let var = log_ratios.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        Some(Drift { ratio: mean.exp(), log_sd: var.sqrt(), n })
    }

    /// Whether the machine moved at all: the 95% t interval of the
    /// references' mean log ratio leaves out 0. Where it did not, figures
    /// are judged as measured (references scattered widely around 1 must
    /// not excuse a figure's own change).
    pub fn moved(&self) -> bool {
        self.ratio.ln().abs() > t_quantile(self.n - 1) * self.log_sd / (self.n as f64).sqrt()
    }

    /// Half the width, in logs, of the 95% prediction interval of where one
    /// more figure falls that changed only with the machine:
    /// t(n - 1) x sd x sqrt(1 + 1/n).
    pub fn half_width(&self) -> f64 {
        t_quantile(self.n - 1) * self.log_sd * (1.0 + 1.0 / self.n as f64).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::harness::stats::Estimate;

    fn figure(samples: &[f64], rounds: &[usize]) -> Figure {
        Figure {
            name: "a: f".into(),
            arm: "a".into(),
            metric: "f".into(),
            unit: "s".into(),
            higher_is_better: false,
            estimate: Estimate::of(samples),
            samples: samples.to_vec(),
            rounds: rounds.to_vec(),
            reference: false,
        }
    }

    #[test]
    fn a_round_slow_for_every_repeated_figure_steadies_the_one_measured_once() {
        // Round 0 ran 20% slow for the three repeated figures.
        let rounds = [0, 1, 2, 3];
        let repeated: Vec<Figure> = [1.0, 2.0, 4.0].iter().map(|&m| figure(&[1.2 * m, m, m, m], &rounds)).collect();
        let once = figure(&[6.0], &[0]);
        let effects = RoundEffects::read(repeated.iter().chain([&once]));
        assert_eq!(effects.count(), 4);
        let steadied = effects.steady(&once);
        assert!((steadied.values[0] - 5.0).abs() < 1e-12, "{steadied:?}");
        assert!((steadied.extra_variance[0] - std::f64::consts::FRAC_PI_2 / 3.0).abs() < 1e-12);
        // Two repeated figures are too few to read a round by.
        assert_eq!(RoundEffects::read(&repeated[..2]).count(), 0);
        // Results without rounds are left as measured.
        let bare = figure(&[6.0], &[]);
        assert_eq!(effects.steady(&bare), Takes::as_measured(&[6.0]));
    }

    #[test]
    fn the_drift_is_where_the_references_moved_and_how_far_apart() {
        let logs: Vec<f64> = [0.88, 0.9, 0.86, 0.89].iter().map(|x: &f64| x.ln()).collect();
        let d = Drift::of(&logs).unwrap();
        assert!((d.ratio - 0.8824).abs() < 1e-3 && d.n == 4, "{d:?}");
        // t(3) 3.182 x sd x sqrt(1.25).
        let sd = d.log_sd;
        assert!((d.half_width() - 3.182 * sd * 1.25f64.sqrt()).abs() < 1e-2 * sd, "{d:?}");
        assert!(Drift::of(&logs[..3]).is_none(), "three references are too few");
        assert!(d.moved(), "four references 12% slower, 2% apart: {d:?}");
        let scattered: Vec<f64> = [0.62, 1.0, 1.1, 1.35].iter().map(|x: &f64| x.ln()).collect();
        assert!(!Drift::of(&scattered).unwrap().moved(), "around 1, widely apart: not the machine");
    }
}
