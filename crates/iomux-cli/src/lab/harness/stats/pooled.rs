//! Intervals for figures measured too few times to have their own.
//!
//! A quick run measures most cells once (the first round) and repeats only
//! the arms its claims rest on, so two thirds of its figures have one
//! sample a side: no rank interval exists for them. Their uncertainty is
//! read instead from the figures of the same kind in the same experiment
//! that were repeated: the pooled standard deviation of a take's logarithm
//! (an analysis of variance does the same for cells measured once). It
//! assumes a kind's relative spread is alike in every cell of the
//! experiment; `iomux report A B` marks each interval that rests on it.

use crate::lab::harness::stats::{Change, CONFIDENCE};

/// Fewest degrees of freedom behind a pooled spread: with fewer, the
/// spread itself is too uncertain to lend.
pub const MIN_POOLED_DF: usize = 10;

/// The spread of one kind of figure over repeated takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Standard deviation of the natural logarithm of one take.
    pub log_sd: f64,
    /// Degrees of freedom: takes less one, summed over the figures, less
    /// the round effects fitted to the same takes.
    pub df: usize,
}

/// One figure's takes on one side, as compared: each divided by its
/// round's effect where one was read (`lab::report::drift`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Takes {
    pub values: Vec<f64>,
    /// Per take, the variance its round effect's own error adds, in units
    /// of the spread's variance (0 where the take was left as measured).
    pub extra_variance: Vec<f64>,
}

impl Takes {
    /// Takes left as measured.
    pub fn as_measured(values: &[f64]) -> Takes {
        Takes { values: values.to_vec(), extra_variance: vec![0.0; values.len()] }
    }
}

impl Spread {
    /// Pooled over `groups` (each the takes of one figure on one side); a
    /// group counts when it has two or more takes, all positive. `fitted`
    /// effects were estimated from the same takes, each costing a degree
    /// of freedom. None below [`MIN_POOLED_DF`].
    pub fn pooled<'a>(groups: impl IntoIterator<Item = &'a [f64]>, fitted: usize) -> Option<Spread> {
        let (mut squares, mut df) = (0.0, 0);
        for g in groups {
            let Some(logs) = logs(g).filter(|l| l.len() >= 2) else { continue };
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            squares += logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>();
            df += logs.len() - 1;
        }
        let df = df.saturating_sub(fitted);
        (df >= MIN_POOLED_DF).then(|| Spread { log_sd: (squares / df as f64).sqrt(), df })
    }
}

/// Natural logarithms of `v`; None when a value is not positive and
/// finite, or there is none.
fn logs(v: &[f64]) -> Option<Vec<f64>> {
    let l: Option<Vec<f64>> = v.iter().map(|&x| (x.is_finite() && x > 0.0).then(|| x.ln())).collect();
    l.filter(|l| !l.is_empty())
}

impl Change {
    /// The change from `a` to `b` as the ratio of their geometric means,
    /// with a 95% t interval whose spread is `spread`'s (each take's
    /// variance raised by its round effect's error); None when a side has
    /// no take or a take is not positive.
    pub fn from_spread(a: &Takes, b: &Takes, spread: Spread) -> Option<Change> {
        let (la, lb) = (logs(&a.values)?, logs(&b.values)?);
        let mean = |l: &[f64]| l.iter().sum::<f64>() / l.len() as f64;
        let shift = mean(&lb) - mean(&la);
        // Var(mean of n logs) = sigma^2 * sum(1 + extra_i) / n^2.
        let units = |t: &Takes| t.extra_variance.iter().map(|e| 1.0 + e).sum::<f64>() / (t.values.len() as f64).powi(2);
        let half = t_quantile(spread.df) * spread.log_sd * (units(a) + units(b)).sqrt();
        Some(Change {
            ratio: shift.exp(),
            lo: (shift - half).exp(),
            hi: (shift + half).exp(),
            samples: (la.len(), lb.len()),
            pooled: true,
        })
    }
}

/// The two-sided [`CONFIDENCE`] quantile of Student's t with `df` degrees
/// of freedom, from the normal's by the Cornish-Fisher expansion to its
/// fourth term (within 0.15% of the tables from 3 degrees of freedom on).
/// Written out: no maintained crate offers it without a statistics
/// library around it.
pub fn t_quantile(df: usize) -> f64 {
    let z = normal_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0);
    let v = df as f64;
    z + (z.powi(3) + z) / (4.0 * v)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v.powi(2))
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * v.powi(3))
        + (79.0 * z.powi(9) + 776.0 * z.powi(7) + 1482.0 * z.powi(5) - 1920.0 * z.powi(3) - 945.0 * z)
            / (92160.0 * v.powi(4))
}

/// The standard normal's quantile at `p` (Acklam's rational
/// approximation, relative error under 1.2e-9).
fn normal_quantile(p: f64) -> f64 {
    if p < 0.5 {
        return -normal_quantile(1.0 - p);
    }
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.38357751867269e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] =
        [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    if p > 0.97575 {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_tables() {
        // Student's t, 97.5th percentile.
        for (df, table) in [(3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)] {
            let t = t_quantile(df);
            assert!((t - table).abs() / table < 0.002, "{df} df: {t} against {table}");
        }
        assert!((normal_quantile(0.975) - 1.959964).abs() < 1e-6);
        assert!((normal_quantile(0.025) + 1.959964).abs() < 1e-6);
    }

    #[test]
    fn the_spread_pools_repeated_figures_and_needs_enough_of_them() {
        // Two figures of five takes each: 8 degrees of freedom, too few.
        let a = [1.0, 1.1, 0.9, 1.05, 0.95];
        let b = [2.0, 2.2, 1.8, 2.1, 1.9];
        assert!(Spread::pooled([&a[..], &b[..]], 0).is_none());
        // Three: 12; b is a scaled a, so every figure has a's spread.
        let c = [4.0, 4.4, 3.6, 4.2, 3.8];
        let s = Spread::pooled([&a[..], &b[..], &c[..], &[7.0][..]], 0).unwrap();
        assert_eq!(s.df, 12);
        let logs: Vec<f64> = a.iter().map(|x: &f64| x.ln()).collect();
        let mean = logs.iter().sum::<f64>() / 5.0;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
        assert!((s.log_sd - sd).abs() < 1e-12, "{s:?} against {sd}");
        // A group with a zero (a count) says nothing of relative spread.
        assert_eq!(Spread::pooled([&a[..], &b[..], &c[..], &[0.0, 1.0][..]], 0).unwrap().df, 12);
        // Round effects fitted to the same takes cost their degrees of freedom.
        assert!(Spread::pooled([&a[..], &b[..], &c[..]], 3).is_none());
    }

    #[test]
    fn one_take_a_side_is_judged_by_the_pooled_spread() {
        let once = |x: f64| Takes::as_measured(&[x]);
        // An 8% move: within a 5% spread's noise, a change against 0.5%.
        let wide = Spread { log_sd: 0.05, df: 40 };
        let c = Change::from_spread(&once(100.0), &once(108.0), wide).unwrap();
        assert!(c.pooled && c.told() && c.within_noise() && c.lo < 1.0, "{c:?}");
        let narrow = Spread { log_sd: 0.005, df: 40 };
        let c = Change::from_spread(&once(100.0), &once(108.0), narrow).unwrap();
        assert!((c.ratio - 1.08).abs() < 1e-12 && c.lo > 1.05 && !c.within_noise(), "{c:?}");
        // Half-width t(40) 2.021 x 0.05 x sqrt(2) = 0.143 in logs, and
        // with a round effect's error on one side, sqrt(2.5) instead.
        let c = Change::from_spread(&once(100.0), &once(100.0), wide).unwrap();
        assert!((c.hi.ln() - 2.021 * 0.05 * 2f64.sqrt()).abs() < 1e-3, "{c:?}");
        let steadied = Takes { values: vec![100.0], extra_variance: vec![0.5] };
        let c = Change::from_spread(&once(100.0), &steadied, wide).unwrap();
        assert!((c.hi.ln() - 2.021 * 0.05 * 2.5f64.sqrt()).abs() < 1e-3, "{c:?}");
        assert!(Change::from_spread(&once(0.0), &once(1.0), wide).is_none(), "a zero has no logarithm");
        assert!(Change::from_spread(&Takes::default(), &once(1.0), wide).is_none());
    }
}
