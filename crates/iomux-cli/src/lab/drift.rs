//! How the machine's speed moved, within a run and between two: what
//! `iomux report A B` takes out before it calls a change.
//!
//! On a shared machine one cell can run 10-25% faster or slower from one
//! minute to the next. Two quick runs of one commit here: every server of
//! E6 and E7, nginx and redis as much as iomux's, 10-15% slower in the
//! second; E2's first round 13% slower than its later rounds.
//! - Round effects, within a run: a round that ran slow for every arm
//!   shows in the figures measured in several rounds. A figure measured in
//!   one round only is steadied by that round's effect before comparison.
//! - The machine's drift, between two runs: figures of programs iomux did
//!   not write (nginx, redis, tokio, a bare syscall) moved only with the
//!   machine. The median of their moves is the drift, and each figure's
//!   change is also read beside it.

use super::harness::envelope::Figure;
use super::harness::stats::{median, Estimate};
use std::collections::BTreeMap;

/// Fewest repeated figures measured in a round for its effect to be read.
const MIN_FIGURES_PER_ROUND: usize = 3;

/// Fewest reference figures of a kind that give the machine's drift.
const MIN_REFERENCES: usize = 3;

/// Per round, the factor by which the repeated figures among `figures`
/// (one kind, one run) stood above their own medians in that round: the
/// median over the figures measured in it. Rounds with fewer than
/// [`MIN_FIGURES_PER_ROUND`] such figures are left out.
pub fn round_effects<'a>(figures: impl IntoIterator<Item = &'a Figure>) -> BTreeMap<usize, f64> {
    let mut logs: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for f in figures {
        let usable = f.samples.len() >= 2 && f.rounds.len() == f.samples.len() && f.samples.iter().all(|&x| x > 0.0);
        let Some(m) = median(&f.samples).filter(|_| usable) else { continue };
        for (&round, &x) in f.rounds.iter().zip(&f.samples) {
            logs.entry(round).or_default().push((x / m).ln());
        }
    }
    logs.into_iter()
        .filter(|(_, v)| v.len() >= MIN_FIGURES_PER_ROUND)
        .filter_map(|(round, v)| Some((round, median(&v)?.exp())))
        .collect()
}

/// `f`'s samples, each divided by its round's effect (as measured where
/// the effect is unknown).
pub fn steadied(f: &Figure, effects: &BTreeMap<usize, f64>) -> Vec<f64> {
    let effect = |i: usize| f.rounds.get(i).and_then(|r| effects.get(r)).copied().unwrap_or(1.0);
    f.samples.iter().enumerate().map(|(i, &x)| x / effect(i)).collect()
}

/// The machine's drift from A to B for one kind of figure: the median of
/// the ratios B/A of the reference figures' medians among `pairs`, with
/// its order-statistics interval (the whole range below six). None with
/// fewer than [`MIN_REFERENCES`].
pub fn machine_drift<'a>(pairs: impl IntoIterator<Item = (&'a Figure, &'a Figure)>) -> Option<Estimate> {
    let logs: Vec<f64> = pairs
        .into_iter()
        .filter(|(a, _)| a.reference)
        .filter_map(|(a, b)| {
            let ratio = median(&b.samples)? / median(&a.samples)?;
            (ratio.is_finite() && ratio > 0.0).then(|| ratio.ln())
        })
        .collect();
    if logs.len() < MIN_REFERENCES {
        return None;
    }
    let e = Estimate::of(&logs)?;
    Some(Estimate { median: e.median.exp(), lo: e.lo.exp(), hi: e.hi.exp(), ..e })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(name: &str, samples: &[f64], rounds: &[usize], reference: bool) -> Figure {
        Figure {
            name: name.into(),
            unit: "s".into(),
            higher_is_better: false,
            estimate: Estimate::of(samples),
            samples: samples.to_vec(),
            rounds: rounds.to_vec(),
            reference,
        }
    }

    #[test]
    fn a_round_slow_for_every_repeated_figure_steadies_the_one_measured_once() {
        // Round 0 ran 20% slow for the three repeated figures.
        let rounds = [0, 1, 2, 3];
        let repeated: Vec<Figure> =
            [1.0, 2.0, 4.0].iter().map(|&m| figure("r", &[1.2 * m, m, m, m], &rounds, false)).collect();
        let once = figure("once", &[6.0], &[0], false);
        let effects = round_effects(repeated.iter().chain([&once]));
        assert!((effects[&0] - 1.2).abs() < 1e-12 && (effects[&1] - 1.0).abs() < 1e-12, "{effects:?}");
        assert!((steadied(&once, &effects)[0] - 5.0).abs() < 1e-12);
        // Two repeated figures are too few to read a round by.
        assert!(round_effects(&repeated[..2]).is_empty());
        // Results without rounds are left as measured.
        let bare = figure("bare", &[6.0], &[], false);
        assert_eq!(steadied(&bare, &effects), vec![6.0]);
    }

    #[test]
    fn the_drift_is_the_median_move_of_the_references_alone() {
        let a: Vec<Figure> = (1..=4).map(|i| figure("ref", &[f64::from(i)], &[0], true)).collect();
        let b: Vec<Figure> = [0.9, 1.8, 2.7, 3.0].iter().map(|&x| figure("ref", &[x], &[0], true)).collect();
        let iomux_a = figure("iomux", &[10.0], &[0], false);
        let iomux_b = figure("iomux", &[20.0], &[0], false);
        let pairs: Vec<(&Figure, &Figure)> = a.iter().zip(&b).chain([(&iomux_a, &iomux_b)]).collect();
        let d = machine_drift(pairs.iter().copied()).unwrap();
        assert!((d.median - 0.9).abs() < 1e-12 && (d.lo - 0.75).abs() < 1e-12 && (d.hi - 0.9).abs() < 1e-12, "{d:?}");
        assert!(machine_drift(pairs[2..].iter().copied()).is_none(), "two references are too few");
    }
}
