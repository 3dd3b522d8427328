//! The rounds added after the first ones: looked at only at the round
//! counts in [`LOOKS`], within the budget, for the claims that rounds may
//! still decide.

use super::{Measured, Spec, Trial, AS_NEEDED_GROWTH, FREE_ROUNDS, LOOKS, MAX_ROUNDS, MIN_ROUNDS};
use crate::lab::harness::claim;
use crate::lab::harness::stats::Estimate;
use crate::CliResult;
use std::time::{Duration, Instant};

impl<K: Clone + PartialEq + std::fmt::Display, S> Trial<'_, K, S> {
    fn decided(&self, spec: &Spec<K, S>) -> bool {
        let (quiet, _) = self.values(spec);
        spec.arms.iter().any(|a| self.note_of(a).is_some())
            || Estimate::of(&quiet).is_some_and(|e| quiet.len() >= MIN_ROUNDS && spec.needed.decide(&e).is_some())
    }

    /// Whether rounds a run can add may decide `spec`, so that a claim at
    /// its threshold does not spend the budget that claims a few rounds
    /// would decide need. Not once decided; else yes while it has too few
    /// quiet rounds, when its verdict says at most [`MAX_ROUNDS`] would
    /// decide it, or when its quiet values repeated to [`MAX_ROUNDS`]
    /// rounds would (that reads ties the verdict's estimate cannot: a count
    /// at 0 in five of six rounds has its median on the threshold).
    fn rounds_may_decide(&self, spec: &Spec<K, S>) -> bool {
        if self.decided(spec) {
            return false;
        }
        let (quiet, _) = self.values(spec);
        if quiet.len() < MIN_ROUNDS {
            return true;
        }
        let hopeful = match self.judge(spec).undecided {
            Some(claim::Undecided::AtThreshold { .. }) => false,
            Some(claim::Undecided::MoreRounds { rounds }) => rounds <= MAX_ROUNDS,
            _ => true,
        };
        let repeated: Vec<f64> = quiet.iter().copied().cycle().take(MAX_ROUNDS.max(quiet.len())).collect();
        hopeful || Estimate::of(&repeated).is_some_and(|e| spec.needed.decide(&e).is_some())
    }

    /// Adds rounds of the arms that undecided claims rest on, until every
    /// claim is decided, or the budget or [`MAX_ROUNDS`] is spent. Claims
    /// are looked at only at the round counts in [`LOOKS`], not after every
    /// round: stopping at the first of many looks that happens to decide
    /// would make a wrong decision likelier than the intervals say. First,
    /// whatever the budget, every claim gets [`MIN_ROUNDS`] quiet rounds
    /// (noisy ones made up, up to [`FREE_ROUNDS`] rounds in all); then a
    /// look whose rounds would likely end past the budget is not begun, and
    /// a begun one is finished, so no round is run that no look reads.
    /// The looks run only the arms of claims that their rounds may decide
    /// ([`Trial::rounds_may_decide`], asked again at every look).
    pub fn until_decided(&mut self, specs: &[Spec<K, S>], measure: &mut dyn FnMut(&K) -> Measured<S>) -> CliResult<()> {
        // Time of the rounds the looks add: the budget's.
        let mut spent = Duration::ZERO;
        // Time per take in the last round: the next look may run fewer arms.
        let mut per_take = Duration::ZERO;
        let mut pending: Vec<usize> = (0..specs.len()).filter(|&i| !self.decided(&specs[i])).collect();
        // The rounds up to MIN_ROUNDS quiet ones are not a budget's to
        // refuse (without them no claim can be decided at all), and a noisy
        // round is made up, up to FREE_ROUNDS in all; a budget of zero asks
        // for the first rounds alone.
        while self.rounds < FREE_ROUNDS && !self.budget.is_zero() && !self.swamped() {
            let short: Vec<K> = self.arms_of(specs, &pending, |t, spec| t.values(spec).0.len() < MIN_ROUNDS);
            if short.is_empty() {
                break;
            }
            let took = self.timed_round(&short, measure)?;
            per_take = took / short.len() as u32;
        }
        let (timed, measured_s) = self.takes.iter().filter_map(|t| t.took_s).fold((0, 0.0), |(n, s), t| (n + 1, s + t));
        if self.as_needed && !self.budget.is_zero() {
            self.budget = self.budget.max(Duration::from_secs_f64(measured_s * AS_NEEDED_GROWTH));
        }
        // No round above (the first rounds sufficed): a take's mean time.
        if per_take.is_zero() && timed > 0 {
            per_take = Duration::from_secs_f64(measured_s / f64::from(timed));
        }
        let looks: Vec<usize> = LOOKS.iter().copied().filter(|&l| l > self.rounds).collect();
        for look in looks {
            pending = (0..specs.len()).filter(|&i| self.rounds_may_decide(&specs[i])).collect();
            if pending.is_empty() || self.swamped() {
                break;
            }
            let arms = self.arms_of(specs, &pending, |_, _| true);
            if arms.is_empty() {
                break;
            }
            // A look's rounds count only if all are run: a look begins
            // only when all its rounds likely fit, and once begun it is
            // finished.
            let rest = per_take * (arms.len() * (look - self.rounds)) as u32;
            if self.budget.is_zero() || spent + rest > self.budget {
                return Ok(());
            }
            while self.rounds < look {
                let took = self.timed_round(&arms, measure)?;
                per_take = took / arms.len() as u32;
                spent += took;
            }
        }
        Ok(())
    }

    /// A round, and the time it spent measuring: waits for the CPUs'
    /// placement are left out (they have their own bound, and would make a
    /// look that fits seem not to).
    fn timed_round(&mut self, arms: &[K], measure: &mut dyn FnMut(&K) -> Measured<S>) -> CliResult<Duration> {
        let (start, waited) = (Instant::now(), self.waited);
        self.round(arms, measure)?;
        Ok(start.elapsed().saturating_sub(self.waited - waited))
    }

    /// The arms, each once, of the claims in `pending` that `want`, and
    /// that can be measured.
    fn arms_of(&self, specs: &[Spec<K, S>], pending: &[usize], want: impl Fn(&Self, &Spec<K, S>) -> bool) -> Vec<K> {
        let mut arms: Vec<K> = Vec::new();
        for spec in pending.iter().map(|&i| &specs[i]).filter(|spec| want(self, spec)) {
            if spec.arms.iter().any(|a| self.note_of(a).is_some()) {
                continue;
            }
            for a in &spec.arms {
                if !arms.contains(a) {
                    arms.push(a.clone());
                }
            }
        }
        arms
    }
}
