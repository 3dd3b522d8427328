//! A machine with nothing else running, for tests of what reads results
//! and of experiments' claims.

use super::{Measured, Meter, Spec, Trial, MIN_ROUNDS};
use crate::lab::harness::claim::Claim;
use std::time::{Duration, Instant};

/// A machine with nothing else running, for tests of what reads results.
pub struct Quiet;

impl Meter for Quiet {
    fn others_since(&self, _: Instant) -> Option<f64> {
        Some(0.0)
    }
}

/// Tests of an experiment's claims: `specs` judged after [`MIN_ROUNDS`]
/// quiet rounds of `arms`, each take what `value` gives.
pub fn judged_quiet<K: Clone + PartialEq + std::fmt::Display, S>(
    specs: &[Spec<K, S>],
    arms: &[K],
    mut value: impl FnMut(&K) -> Measured<S>,
) -> Vec<Claim> {
    let mut trial = Trial::new(&Quiet, "test", Duration::ZERO);
    for _ in 0..MIN_ROUNDS {
        if let Err(e) = trial.round(arms, &mut value) {
            panic!("a round of made-up takes failed: {e:#}");
        }
    }
    specs.iter().map(|s| trial.judge(s)).collect()
}
