//! Estimates with 95% confidence intervals, and the rule that turns an
//! interval into a verdict.
//!
//! Figures are medians with a distribution-free interval from order
//! statistics: the interval between the j-th smallest and the j-th largest
//! of n samples covers the true median with probability
//! 1 - 2 P(Binomial(n, 1/2) < j), whatever the distribution. Timings on a
//! shared machine are skewed and have outliers, so no normal model is
//! assumed. Below six samples no such interval reaches 95% (five give
//! 93.75% at best), so a claim needs at least six measured pairs before it
//! can be decided; the lab adds rounds until it has them.
//!
//! Changes between two runs (`iomux report A B`) are ratios of medians of
//! independent samples, with a rank interval (below); figures with too
//! few samples for one borrow their kind's spread (`pooled`).

pub mod pooled;

use serde::{Deserialize, Serialize};

/// The confidence every decision asks for.
pub const CONFIDENCE: f64 = 0.95;

/// A median and its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    /// Samples it rests on.
    pub n: usize,
    /// The interval's coverage: [`CONFIDENCE`] or more from six samples on,
    /// less below that (the interval is then the whole range).
    pub confidence: f64,
}

impl Estimate {
    /// The median of `samples` (non-finite values left out) with its
    /// order-statistics interval; None when no sample is finite.
    pub fn of(samples: &[f64]) -> Option<Estimate> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let (j, confidence) = order_rank(n);
        Some(Estimate { median, lo: v[j - 1], hi: v[n - j], n, confidence })
    }

    /// Whether the interval is a 95% one.
    pub fn is_confident(&self) -> bool {
        self.confidence >= CONFIDENCE
    }

    /// Half the interval's width relative to the median, e.g. 0.03 for ±3%.
    pub fn relative_half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0 / self.median.abs()
    }
}

/// The largest rank j (1-based) whose interval [x_(j), x_(n+1-j)] still has
/// at least 95% coverage, and that coverage; j = 1 (the whole range) with
/// its lower coverage when n is too small for 95%.
fn order_rank(n: usize) -> (usize, f64) {
    let coverage = |j: usize| 1.0 - 2.0 * binomial_half_cdf(n, j - 1);
    let mut j = 1;
    while j < n.div_ceil(2) && coverage(j + 1) >= CONFIDENCE {
        j += 1;
    }
    (j, coverage(j))
}

/// P(Binomial(n, 1/2) <= k), in logs so large n does not underflow.
fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut sum = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        sum += (ln_choose + ln_half_n).exp();
    }
    sum.min(1.0)
}

/// What a claim needs of the quantity it rests on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Needed {
    AtLeast(f64),
    AtMost(f64),
    /// Between the two bounds, both included ("within 10% of 1").
    Within(f64, f64),
}

impl Needed {
    /// Whether a single value is on the claim's side.
    pub fn met_by(self, v: f64) -> bool {
        match self {
            Needed::AtLeast(t) => v >= t,
            Needed::AtMost(t) => v <= t,
            Needed::Within(a, b) => a <= v && v <= b,
        }
    }

    /// What the interval says: Some(true) when all of it is on the
    /// claim's side, Some(false) when all of it is on the other side, None
    /// when it straddles a bound or is not a 95% interval.
    pub fn decide(self, e: &Estimate) -> Option<bool> {
        if !e.is_confident() {
            return None;
        }
        match (self.met_by(e.lo), self.met_by(e.hi)) {
            (true, true) => Some(true),
            (false, false) => match self {
                // Both ends outside a band may still enclose it.
                Needed::Within(a, b) => (e.hi < a || e.lo > b).then_some(false),
                _ => Some(false),
            },
            _ => None,
        }
    }

    /// ">= 0.95", "<= 1", "in [0.9, 1.1]".
    pub fn describe(self) -> String {
        match self {
            Needed::AtLeast(t) => format!(">= {}", short(t)),
            Needed::AtMost(t) => format!("<= {}", short(t)),
            Needed::Within(a, b) => format!("in [{}, {}]", short(a), short(b)),
        }
    }

    /// How far `v` is on the claim's side: above 1 when it is met, as a
    /// ratio to the nearest bound (for the report's gauges).
    pub fn margin(self, v: f64) -> f64 {
        let m = match self {
            Needed::AtLeast(t) => v / t,
            Needed::AtMost(t) => t / v,
            Needed::Within(a, b) => (v / a).min(b / v),
        };
        // A value of 0 against "at most" is as far inside as can be.
        if m.is_nan() {
            1.0
        } else {
            m
        }
    }
}

/// A threshold as a person writes it: 0.95, 500, 0.1.
pub fn short(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The change from run A to run B of one figure: median(B) / median(A),
/// with a distribution-free 95% interval for the ratio (Hodges-Lehmann's
/// interval from the Mann-Whitney distribution, on the logarithm).
///
/// Why not a bootstrap: with three or four samples a side the bootstrap's
/// "95%" interval is the ratio of the ranges, whose real coverage is 90%
/// (3 and 3) and which calls twice as many changes as it should. The
/// rank interval has its stated coverage at every size, and says when a
/// size cannot reach it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Change {
    pub ratio: f64,
    /// The interval's ends; 0 and infinity when the samples are too few
    /// for a 95% interval.
    pub lo: f64,
    pub hi: f64,
    /// Finite samples on each side (A, B).
    pub samples: (usize, usize),
    /// The interval rests on the spread of other figures of the same kind
    /// (`pooled`), the samples being too few for a rank interval.
    pub pooled: bool,
}

/// The fewest samples a side that give a 95% rank interval: with four and
/// four, the chance that all of B's lie above all of A's by luck alone is
/// 1 in 70 (1.4%, under the 2.5% a side); with three and three it is 1 in
/// 20, so no 95% interval exists.
pub const MIN_CHANGE_SAMPLES: usize = 4;

/// Changes smaller than this are "within noise" even when the interval
/// excludes 1: two runs of one commit on a shared machine drift by a few
/// percent between runs, minutes apart (criterion's default noise
/// threshold is 2%; ours is wider for a machine that is not quiet).
pub const NOISE_THRESHOLD: f64 = 0.05;

impl Change {
    /// None when either side has no finite sample or a zero median.
    pub fn between(a: &[f64], b: &[f64]) -> Option<Change> {
        let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
        let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
        let (ma, mb) = (median(&a)?, median(&b)?);
        let ratio = mb / ma;
        if !ratio.is_finite() {
            return None;
        }
        // Shifts of B against A, as ratios where every value is positive
        // (a shift on the logarithm), else as differences scaled by A's
        // median (counts that can be zero, such as errors).
        let positive = a.iter().chain(&b).all(|&x| x > 0.0);
        let mut shifts: Vec<f64> =
            a.iter().flat_map(|&x| b.iter().map(move |&y| if positive { y / x } else { 1.0 + (y - x) / ma })).collect();
        shifts.sort_by(f64::total_cmp);
        let (lo, hi) = match rank_cut(a.len(), b.len(), (1.0 - CONFIDENCE) / 2.0) {
            Some(k) => (shifts[k], shifts[shifts.len() - 1 - k]),
            None => (0.0, f64::INFINITY),
        };
        Some(Change { ratio, lo, hi, samples: (a.len(), b.len()), pooled: false })
    }

    /// Whether the samples were enough for a 95% interval.
    pub fn told(&self) -> bool {
        self.hi.is_finite()
    }

    /// No change: the interval holds 1, or the change itself is within the
    /// noise threshold (criterion's "change within noise threshold": the
    /// interval says whether there is a change, the threshold whether it
    /// is big enough to call one). Two quiet runs of one commit here gave
    /// changes such as +1.9% [+0.0%, +9.1%]: real drift between runs
    /// minutes apart, not a change of the code.
    pub fn within_noise(&self) -> bool {
        (self.lo <= 1.0 && 1.0 <= self.hi) || (self.ratio - 1.0).abs() <= NOISE_THRESHOLD
    }
}

/// How many of the n x m pairwise shifts to cut from each end so that the
/// interval between the rest covers the true shift with probability at
/// least 1 - 2 * tail: the largest c with P(U <= c) <= tail, where U is the
/// Mann-Whitney count of the two samples under no change (the interval's
/// low end is above the true shift exactly when U <= c). None when even
/// the whole range falls short: P(U = 0) above `tail` (too few samples).
fn rank_cut(n: usize, m: usize, tail: f64) -> Option<usize> {
    if n == 0 || m == 0 {
        return None;
    }
    // ways[j][u]: orderings of i A's and j B's with U = u, row by row in
    // i (the recurrence: the largest value is an A, adding j to U, or a
    // B). Counts in f64: C(80, 40) overflows u64, and only their ratios
    // matter.
    let top = n * m;
    let mut ways = vec![vec![0.0f64; top + 1]; m + 1];
    for row in ways.iter_mut() {
        row[0] = 1.0;
    }
    for _i in 1..=n {
        let mut next = vec![vec![0.0f64; top + 1]; m + 1];
        next[0][0] = 1.0;
        for j in 1..=m {
            for u in 0..=top {
                let a_last = if u >= j { ways[j][u - j] } else { 0.0 };
                next[j][u] = a_last + next[j - 1][u];
            }
        }
        ways = next;
    }
    let total: f64 = ways[m].iter().sum();
    let mut below = 0.0;
    let mut cut = None;
    for (c, count) in ways[m].iter().enumerate() {
        below += count / total;
        if below > tail {
            break;
        }
        cut = Some(c);
    }
    cut
}

/// Median of finite values; None when there are none.
pub fn median(v: &[f64]) -> Option<f64> {
    Estimate::of(v).map(|e| e.median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_samples_a_side_cannot_tell_a_change() {
        let c = Change::between(&[1.0], &[2.0]).unwrap();
        assert_eq!(c.ratio, 2.0);
        assert!(!c.told() && c.within_noise(), "one sample a side: {c:?}");
        // Three and three: all of B above all of A happens by luck 1 time
        // in 20, so no 95% interval.
        assert!(!Change::between(&[1.0, 1.1, 0.9], &[2.0, 2.1, 1.9]).unwrap().told());
        // Four and four: 1 in 70; the interval is the range of the ratios.
        let c = Change::between(&[1.0, 1.1, 0.9, 1.05], &[2.0, 2.1, 1.9, 2.05]).unwrap();
        assert!(c.told() && !c.within_noise(), "{c:?}");
        assert_eq!((c.lo, c.hi), (1.9 / 1.1, 2.1 / 0.9));
    }

    #[test]
    fn rank_cuts_match_the_mann_whitney_tables() {
        // Critical values of U at 5% two-sided (the tables' "U <= c
        // rejects"): n = m = 5: 2; 8, 8: 13; 10, 10: 23; 6, 13: 16.
        assert_eq!(rank_cut(3, 3, 0.025), None);
        assert_eq!(rank_cut(4, 4, 0.025), Some(0));
        assert_eq!(rank_cut(5, 5, 0.025), Some(2));
        assert_eq!(rank_cut(8, 8, 0.025), Some(13));
        assert_eq!(rank_cut(10, 10, 0.025), Some(23));
        assert_eq!(rank_cut(6, 13, 0.025), Some(16));
        assert!(rank_cut(40, 40, 0.025).is_some(), "large sizes do not overflow");
    }

    #[test]
    fn unchanged_samples_are_no_change_and_zeros_compare_by_difference() {
        let a = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2];
        let c = Change::between(&a, &a).unwrap();
        assert!(c.told() && c.within_noise() && c.lo < 1.0 && c.hi > 1.0, "{c:?}");
        let errors = Change::between(&[0.0, 0.0, 1.0, 0.0], &[0.0, 0.0, 0.0, 0.0]);
        assert!(errors.is_none(), "a zero median has no ratio");
        let c = Change::between(&[2.0, 0.0, 2.0, 2.0], &[4.0, 4.0, 4.0, 4.0]).unwrap();
        assert!(c.told() && c.lo.is_finite(), "{c:?}");
    }

    #[test]
    fn six_samples_give_the_first_95_percent_interval() {
        // n = 5: the whole range covers 1 - 2/32 = 93.75%.
        let e5 = Estimate::of(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!((e5.median, e5.lo, e5.hi), (3.0, 1.0, 5.0));
        assert!((e5.confidence - 0.9375).abs() < 1e-12 && !e5.is_confident());
        // n = 6: 1 - 2/64 = 96.9%.
        let e6 = Estimate::of(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!((e6.median, e6.lo, e6.hi), (3.5, 1.0, 6.0));
        assert!((e6.confidence - 0.96875).abs() < 1e-12 && e6.is_confident());
    }

    #[test]
    fn intervals_narrow_with_more_samples() {
        // n = 20: the known ranks are 6 and 15 (coverage 95.9%).
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        let e = Estimate::of(&v).unwrap();
        assert_eq!((e.lo, e.hi), (6.0, 15.0));
        assert!((e.confidence - 0.9586).abs() < 1e-3, "{e:?}");
        // Large n must not underflow.
        let big: Vec<f64> = (0..2000).map(f64::from).collect();
        let e = Estimate::of(&big).unwrap();
        assert!(e.is_confident() && e.lo > 900.0 && e.hi < 1100.0, "{e:?}");
    }

    #[test]
    fn non_finite_samples_are_left_out() {
        let e = Estimate::of(&[f64::NAN, 2.0, f64::INFINITY]).unwrap();
        assert_eq!((e.n, e.median), (1, 2.0));
        assert!(Estimate::of(&[f64::NAN]).is_none());
    }

    fn est(lo: f64, hi: f64) -> Estimate {
        Estimate { median: (lo + hi) / 2.0, lo, hi, n: 10, confidence: 0.98 }
    }

    #[test]
    fn a_claim_is_decided_only_by_an_interval_wholly_on_one_side() {
        let at_least = Needed::AtLeast(1.0);
        assert_eq!(at_least.decide(&est(1.01, 1.2)), Some(true));
        assert_eq!(at_least.decide(&est(0.8, 0.99)), Some(false));
        assert_eq!(at_least.decide(&est(0.95, 1.05)), None);
        let at_most = Needed::AtMost(0.1);
        assert_eq!(at_most.decide(&est(0.01, 0.09)), Some(true));
        assert_eq!(at_most.decide(&est(0.11, 0.2)), Some(false));
        let band = Needed::Within(0.9, 1.1);
        assert_eq!(band.decide(&est(0.95, 1.05)), Some(true));
        assert_eq!(band.decide(&est(1.2, 1.3)), Some(false));
        assert_eq!(band.decide(&est(0.5, 0.8)), Some(false));
        // Wider than the band on both sides: straddles both bounds.
        assert_eq!(band.decide(&est(0.8, 1.2)), None);
        assert_eq!(band.decide(&est(1.05, 1.2)), None);
        // Too few samples for 95%: never decided, however far out.
        let few = Estimate { confidence: 0.75, ..est(5.0, 6.0) };
        assert_eq!(at_least.decide(&few), None);
    }

    #[test]
    fn thresholds_print_as_written() {
        assert_eq!(Needed::AtLeast(0.95).describe(), ">= 0.95");
        assert_eq!(Needed::AtMost(500.0).describe(), "<= 500");
        assert_eq!(Needed::Within(0.9, 1.1).describe(), "in [0.9, 1.1]");
    }

    #[test]
    fn margins_exceed_one_on_the_claims_side() {
        assert!(Needed::AtLeast(2.0).margin(3.0) > 1.0);
        assert!(Needed::AtMost(2.0).margin(3.0) < 1.0);
        assert!(Needed::Within(0.9, 1.1).margin(1.0) > 1.0);
        assert!(Needed::Within(0.9, 1.1).margin(1.2) < 1.0);
        assert_eq!(Needed::AtMost(0.0).margin(0.0), 1.0);
    }

    #[test]
    fn same_distribution_is_no_change_and_a_slowdown_is_found() {
        let base: Vec<f64> = (0..12).map(|i| 100.0 + (i % 5) as f64).collect();
        let same: Vec<f64> = (0..12).map(|i| 100.0 + ((i + 2) % 5) as f64).collect();
        let c = Change::between(&base, &same).unwrap();
        assert!(c.within_noise(), "{c:?}");
        let slow: Vec<f64> = base.iter().map(|x| x * 1.5).collect();
        let c = Change::between(&base, &slow).unwrap();
        assert!(!c.within_noise() && c.lo > 1.4 && c.hi < 1.6, "{c:?}");
        assert!(Change::between(&[], &base).is_none());
    }

    #[test]
    fn a_small_steady_drift_is_within_the_noise_threshold() {
        let a: Vec<f64> = vec![100.0; 10];
        let b: Vec<f64> = vec![102.0; 10];
        let c = Change::between(&a, &b).unwrap();
        assert!(c.lo > 1.0 && c.within_noise(), "{c:?}");
        // A 6% change is one, however wide its interval.
        let spread: Vec<f64> = (0..10).map(|i| 106.0 + (i % 3) as f64 - 1.0).collect();
        let c = Change::between(&a, &spread).unwrap();
        assert!(c.lo > 1.0 && !c.within_noise(), "{c:?}");
    }
}
