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

use super::stats::{Change, CONFIDENCE};

/// Fewest degrees of freedom behind a pooled spread: with fewer, the
/// spread itself is too uncertain to lend.
pub const MIN_POOLED_DF: usize = 10;

/// The spread of one kind of figure over repeated takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Standard deviation of the natural logarithm of one take.
    pub log_sd: f64,
    /// Degrees of freedom: takes less one, summed over the figures.
    pub df: usize,
}

impl Spread {
    /// Pooled over `groups` (each the takes of one figure on one side); a
    /// group counts when it has two or more takes, all positive. None
    /// below [`MIN_POOLED_DF`].
    pub fn pooled<'a>(groups: impl IntoIterator<Item = &'a [f64]>) -> Option<Spread> {
        let (mut squares, mut df) = (0.0, 0);
        for g in groups {
            let logs: Option<Vec<f64>> = g.iter().map(|&x| (x.is_finite() && x > 0.0).then(|| x.ln())).collect();
            let Some(logs) = logs.filter(|l| l.len() >= 2) else { continue };
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            squares += logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>();
            df += logs.len() - 1;
        }
        (df >= MIN_POOLED_DF).then(|| Spread { log_sd: (squares / df as f64).sqrt(), df })
    }
}

impl Change {
    /// The change from `a` to `b` as the ratio of their geometric means,
    /// with a 95% t interval whose spread is `spread`'s; None when a side
    /// has no sample or a sample is not positive.
    pub fn from_spread(a: &[f64], b: &[f64], spread: Spread) -> Option<Change> {
        let logs = |v: &[f64]| -> Option<Vec<f64>> {
            let l: Option<Vec<f64>> = v.iter().map(|&x| (x.is_finite() && x > 0.0).then(|| x.ln())).collect();
            l.filter(|l| !l.is_empty())
        };
        let (la, lb) = (logs(a)?, logs(b)?);
        let mean = |l: &[f64]| l.iter().sum::<f64>() / l.len() as f64;
        let shift = mean(&lb) - mean(&la);
        let half = t_quantile(spread.df) * spread.log_sd * (1.0 / la.len() as f64 + 1.0 / lb.len() as f64).sqrt();
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
/// of freedom, from the normal's by the Cornish-Fisher expansion (within
/// 0.2% of the tables from 10 degrees of freedom on). Written out: no
/// maintained crate offers it without a statistics library around it.
fn t_quantile(df: usize) -> f64 {
    let z = normal_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0);
    let v = df as f64;
    z + (z.powi(3) + z) / (4.0 * v) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
}

/// The standard normal's quantile at `p` (Acklam's rational
/// approximation, relative error under 1.2e-9; only the upper tail is
/// used here).
fn normal_quantile(p: f64) -> f64 {
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
        // Student's t, 97.5th percentile: 10 df 2.228, 30 df 2.042, 120 df 1.980.
        for (df, table) in [(10, 2.228), (30, 2.042), (120, 1.980)] {
            let t = t_quantile(df);
            assert!((t - table).abs() / table < 0.002, "{df} df: {t} against {table}");
        }
        assert!((normal_quantile(0.975) - 1.959964).abs() < 1e-6);
    }

    #[test]
    fn the_spread_pools_repeated_figures_and_needs_enough_of_them() {
        // Two figures of five takes each: 8 degrees of freedom, too few.
        let a = [1.0, 1.1, 0.9, 1.05, 0.95];
        let b = [2.0, 2.2, 1.8, 2.1, 1.9];
        assert!(Spread::pooled([&a[..], &b[..]]).is_none());
        // Three: 12; b is a scaled a, so every figure has a's spread.
        let c = [4.0, 4.4, 3.6, 4.2, 3.8];
        let s = Spread::pooled([&a[..], &b[..], &c[..], &[7.0][..]]).unwrap();
        assert_eq!(s.df, 12);
        let logs: Vec<f64> = a.iter().map(|x: &f64| x.ln()).collect();
        let mean = logs.iter().sum::<f64>() / 5.0;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
        assert!((s.log_sd - sd).abs() < 1e-12, "{s:?} against {sd}");
        // A group with a zero (a count) says nothing of relative spread.
        assert_eq!(Spread::pooled([&a[..], &b[..], &c[..], &[0.0, 1.0][..]]).unwrap().df, 12);
    }

    #[test]
    fn one_take_a_side_is_judged_by_the_pooled_spread() {
        let spread = Spread { log_sd: 0.05, df: 40 };
        // Half-width: t(40) 2.021 x 0.05 x sqrt(2) = 0.143 in logs.
        let same = Change::from_spread(&[100.0], &[104.0], spread).unwrap();
        assert!(same.pooled && same.told() && same.within_noise(), "{same:?}");
        assert!(same.lo < 1.0 && same.hi > 1.0, "{same:?}");
        let slower = Change::from_spread(&[100.0], &[130.0], spread).unwrap();
        assert!((slower.ratio - 1.3).abs() < 1e-12 && slower.lo > 1.0, "{slower:?}");
        assert!(!slower.within_noise(), "30% against a 14% half-width is a change: {slower:?}");
        assert!(Change::from_spread(&[0.0], &[1.0], spread).is_none(), "a zero has no logarithm");
        assert!(Change::from_spread(&[], &[1.0], spread).is_none());
    }
}
