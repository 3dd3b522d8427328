//! Tests of the trial: balanced order, retakes, noisy rounds, the looks and the budget.

/// How often arm `b` runs directly after arm `a`, over `rounds`.
fn follows(n: usize, rounds: usize) -> Vec<Vec<usize>> {
    let mut after = vec![vec![0; n]; n];
    for r in 0..rounds {
        for pair in order(n, r).windows(2) {
            after[pair[0]][pair[1]] += 1;
        }
    }
    after
}

#[test]
fn each_round_runs_every_arm_once_in_a_balanced_order() {
    for n in 1..=9 {
        for rounds in 1..=3 * n {
            let mut first = vec![0; n];
            for r in 0..rounds {
                let o = order(n, r);
                let mut sorted = o.clone();
                sorted.sort();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n {n}, round {r}: {o:?}");
                first[o[0]] += 1;
            }
            let most = first.iter().max().copied().unwrap_or(0);
            assert!(most <= rounds.div_ceil(n), "n {n}, {rounds} rounds: first {first:?}");
        }
        // Carry-over balance: over a whole design each arm runs
        // directly after every other equally often.
        let (period, times) = if n % 2 == 0 { (n, 1) } else { (2 * n, 2) };
        let after = follows(n, period);
        for a in 0..n {
            for b in 0..n {
                assert_eq!(after[a][b], if a == b { 0 } else { times }, "n {n}: {b} after {a}: {after:?}");
            }
        }
    }
    assert_eq!(order(8, 0), vec![0, 1, 7, 2, 6, 3, 5, 4]);
    assert_eq!(order(2, 1), vec![1, 0], "two arms alternate: A B, B A");
    assert_eq!(order(1, 5), vec![0]);
    assert!(order(0, 0).is_empty());
}

use super::*;
use std::cell::{Cell, RefCell};

/// A meter that reads busy for the takes numbered in `busy`.
struct Scripted {
    busy: Vec<usize>,
    taken: Cell<usize>,
}

impl Meter for Scripted {
    fn others_since(&self, _: Instant) -> Option<f64> {
        let n = self.taken.get();
        self.taken.set(n + 1);
        Some(if self.busy.contains(&n) { 0.9 } else { 0.01 })
    }
}

fn ratio_spec(needed: Needed) -> Spec<&'static str, f64> {
    Spec::iomux("b / a", needed, vec!["a", "b"], |v| Some(v.get(&"b")? / v.get(&"a")?))
}

#[test]
fn rounds_follow_the_williams_rows() {
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let order = RefCell::new(String::new());
    let mut measure = |k: &&str| -> Measured<f64> {
        order.borrow_mut().push_str(k);
        Ok(Ok(1.0))
    };
    for _ in 0..4 {
        trial.round(&["a", "b", "c"], &mut measure).unwrap();
    }
    assert_eq!(order.into_inner(), "abcbcacabcba");
}

/// A quiet machine whose CPUs' round trips read `readings` in turn.
struct Placed {
    readings: RefCell<std::collections::VecDeque<f64>>,
    closest: Cell<f64>,
}

impl Meter for Placed {
    fn others_since(&self, _: Instant) -> Option<f64> {
        Some(0.0)
    }

    fn placement(&self) -> Option<Placement> {
        let ns = self.readings.borrow_mut().pop_front()?;
        self.closest.set(self.closest.get().min(ns));
        Some(Placement { ns, closest_ns: self.closest.get() })
    }
}

#[test]
fn a_take_with_the_cpus_apart_is_taken_again() {
    // Before and after each take: a close, b apart after, b again close.
    let meter =
        Placed { readings: RefCell::new([50.0, 60.0, 55.0, 330.0, 52.0, 58.0].into()), closest: Cell::new(f64::MAX) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::ZERO);
    trial.round(&["a", "b"], &mut |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) }).unwrap();
    let seen: Vec<(&str, bool, bool, Option<f64>)> =
        trial.takes.iter().map(|t| (t.arm, t.apart, t.kept, t.cross_cpu_ns)).collect();
    assert_eq!(
        seen,
        vec![("a", false, true, Some(60.0)), ("b", true, false, Some(330.0)), ("b", false, true, Some(58.0))]
    );
    let noise = crate::lab::harness::envelope::NoiseSummary::of(1, &trial.takes, None);
    assert_eq!((noise.excluded, noise.apart), (1, 1));
}

#[test]
fn with_no_wait_left_a_take_begun_apart_is_not_taken_again() {
    // "a" begins and ends with the CPUs apart; "b" finds them close.
    let meter =
        Placed { readings: RefCell::new([50.0, 330.0, 320.0, 52.0, 55.0].into()), closest: Cell::new(f64::MAX) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::ZERO);
    assert!(meter.placement().is_some_and(|p| !p.apart()), "the close reference is read first");
    trial.waited = PLACEMENT_WAIT_TOTAL;
    trial.round(&["a", "b"], &mut |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) }).unwrap();
    let seen: Vec<(&str, bool, bool)> = trial.takes.iter().map(|t| (t.arm, t.apart, t.kept)).collect();
    assert_eq!(seen, vec![("a", true, false), ("b", false, true)]);
    assert_eq!(trial.waited, PLACEMENT_WAIT_TOTAL, "no wait was added past the experiment's bound");
}

#[test]
fn a_placement_free_take_neither_waits_nor_is_taken_again() {
    // "m" (memory, say) reads no placement and is kept at once; "t" (a
    // timed arm) reads one before and after, finds the CPUs apart after its
    // first take, and is taken again.
    let meter = Placed { readings: RefCell::new([50.0, 330.0, 52.0, 51.0].into()), closest: Cell::new(f64::MAX) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::ZERO);
    trial.placement_free(|k| *k == "m");
    trial.round(&["m", "t"], &mut |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) }).unwrap();
    let seen: Vec<(&str, bool, bool, Option<f64>)> =
        trial.takes.iter().map(|t| (t.arm, t.apart, t.kept, t.cross_cpu_ns)).collect();
    assert_eq!(seen, vec![("m", false, true, None), ("t", true, false, Some(330.0)), ("t", false, true, Some(52.0))]);
    assert_eq!(meter.readings.borrow().len(), 0, "every reading was taken by the timed arm's takes");
}

#[test]
fn an_arm_whose_network_is_its_own_reads_the_network_meter() {
    // The plain meter reads every take busy (the kernel's network work
    // counted as others'); the network meter reads quiet. "lan" is kept at
    // once; "loopback" is taken three times and never kept.
    let plain = Scripted { busy: vec![0, 1, 2, 3], taken: Cell::new(0) };
    let network = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&plain, "t", Duration::ZERO);
    trial.count_network_as_own(&network, |k| *k == "lan");
    trial.round(&["lan", "loopback"], &mut |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) }).unwrap();
    let seen: Vec<(&str, bool)> = trial.takes.iter().map(|t| (t.arm, t.kept)).collect();
    assert_eq!(seen, vec![("lan", true), ("loopback", false), ("loopback", false), ("loopback", false)]);
    assert_eq!((plain.taken.get(), network.taken.get()), (3, 1));
}

#[test]
fn a_claim_left_short_of_rounds_by_a_busy_machine_says_noise() {
    // Two tries of every three are busy: after two rounds (12 takes, 8
    // busy) the trial is swamped and adds no round.
    let meter = Scripted { busy: (0..100).filter(|n| n % 3 != 2).collect(), taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let spec = ratio_spec(Needed::AtMost(2.0));
    let mut measure = |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) };
    trial.round(&["a", "b"], &mut measure).unwrap();
    trial.round(&["a", "b"], &mut measure).unwrap();
    trial.until_decided(std::slice::from_ref(&spec), &mut measure).unwrap();
    assert!(trial.swamped() && trial.rounds() == 2);
    let claim = trial.judge(&spec);
    assert_eq!(claim.undecided, Some(claim::Undecided::Noise), "{}", claim.why);
    assert!(claim.why.starts_with("machine noisy: most samples ran while"), "{}", claim.why);
}

#[test]
fn grouped_arms_run_together() {
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    trial.group_by(|k| u64::from(k.as_bytes()[0]));
    let order = RefCell::new(Vec::new());
    let mut measure = |k: &&str| -> Measured<f64> {
        order.borrow_mut().push(k.to_string());
        Ok(Ok(1.0))
    };
    for _ in 0..2 {
        trial.round(&["a1", "a2", "b1", "b2"], &mut measure).unwrap();
    }
    assert_eq!(order.into_inner(), ["a1", "a2", "b1", "b2", "b2", "b1", "a2", "a1"]);
}

#[test]
fn a_busy_take_is_taken_again_and_counted() {
    // Takes 1 and 2 (b's first two tries in round 0) read busy.
    let meter = Scripted { busy: vec![1, 2], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let mut measure = |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) };
    trial.round(&["a", "b"], &mut measure).unwrap();
    assert_eq!(trial.takes.len(), 4);
    assert_eq!(trial.takes.iter().filter(|t| !t.kept).count(), 2);
    assert_eq!(trial.kept(&"b").count(), 1);
}

#[test]
fn rounds_are_added_until_the_interval_decides() {
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let n = Cell::new(0u32);
    // b is twice a, with a little jitter.
    let mut measure = |k: &&str| -> Measured<f64> {
        n.set(n.get() + 1);
        let jitter = 1.0 + f64::from(n.get() % 3) * 0.01;
        Ok(Ok(if *k == "b" { 2.0 * jitter } else { jitter }))
    };
    let specs = [ratio_spec(Needed::AtLeast(1.5))];
    trial.round(&["a", "b"], &mut measure).unwrap();
    trial.until_decided(&specs, &mut measure).unwrap();
    assert_eq!(trial.rounds(), MIN_ROUNDS, "stops as soon as six rounds decide");
    let claim = trial.judge(&specs[0]);
    assert_eq!(claim.verdict, claim::Verdict::Holds, "{}", claim.why);
}

/// Measures `a` at 1 and `b` at each of `b_values` in turn, each take
/// sleeping `ms`.
fn cycling(b_values: &'static [f64], ms: u64) -> impl FnMut(&&str) -> Measured<f64> {
    let mut b_taken = 0;
    move |k: &&str| -> Measured<f64> {
        std::thread::sleep(Duration::from_millis(ms));
        if *k == "a" {
            return Ok(Ok(1.0));
        }
        b_taken += 1;
        Ok(Ok(b_values[(b_taken - 1) % b_values.len()]))
    }
}

/// b / a three rounds in four at 1.3, one at 0.9: against at least 1, its
/// interval's low end leaves 0.9 at 19 rounds, the look a budget must buy.
const LATE: &[f64] = &[1.3, 1.3, 1.3, 0.9];

#[test]
fn the_budget_bounds_the_rounds_a_claim_gets() {
    let specs = [ratio_spec(Needed::AtLeast(1.0))];
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    // Takes of 2 ms: the looks at 9 and 13 cost 12 and 16 ms, at 19 24.
    let mut short: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_millis(30));
    short.until_decided(&specs, &mut cycling(LATE, 2)).unwrap();
    assert!(short.rounds() >= MIN_ROUNDS, "the six rounds an interval needs are not the budget's to refuse");
    assert!([9, 13].contains(&short.rounds()), "{} rounds: every round run is read by a look", short.rounds());
    let claim = short.judge(&specs[0]);
    assert!(matches!(claim.undecided, Some(claim::Undecided::MoreRounds { .. })), "{}", claim.why);
    let mut long: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    long.until_decided(&specs, &mut cycling(LATE, 2)).unwrap();
    assert_eq!(long.rounds(), 19, "a minute buys the look that decides");
    assert_eq!(long.judge(&specs[0]).verdict, claim::Verdict::Holds);
}

#[test]
fn a_claim_at_its_threshold_adds_no_rounds() {
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    // Median 1.01 in [0.81, 1.21]: thousands of rounds would be needed.
    let specs = [ratio_spec(Needed::AtLeast(1.0))];
    trial.until_decided(&specs, &mut cycling(&[0.81, 1.21], 0)).unwrap();
    assert_eq!(trial.rounds(), MIN_ROUNDS, "a minute's budget is not spent on it");
    let claim = trial.judge(&specs[0]);
    assert!(matches!(claim.undecided, Some(claim::Undecided::AtThreshold { .. })), "{}", claim.why);
}

#[test]
fn a_count_on_its_threshold_gets_the_rounds_that_decide_it() {
    // Errors in one round of six: median 0 on the threshold, interval [0, 3].
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let errors = Spec::iomux("errors", Needed::AtMost(0.0), vec!["a", "b"], |v| v.get(&"b").copied()).counted();
    let specs = [errors];
    trial.until_decided(&specs, &mut cycling(&[0.0, 0.0, 0.0, 0.0, 0.0, 3.0], 0)).unwrap();
    assert_eq!(trial.rounds(), 9, "at 9 rounds the interval's top is the second largest, 0");
    assert_eq!(trial.judge(&specs[0]).verdict, claim::Verdict::Holds);
}

#[test]
fn a_budget_as_needed_grows_to_the_first_rounds_time() {
    let specs = [ratio_spec(Needed::AtLeast(1.0))];
    // The first rounds' takes (12, before any look) 10 ms each, later ones
    // 2 ms: 120 ms grown, and the look at 9, guessed from the last first
    // round, 60 ms.
    let slow_first = || {
        let (mut inner, mut takes) = (cycling(LATE, 0), 0);
        move |k: &&str| {
            takes += 1;
            std::thread::sleep(Duration::from_millis(if takes <= 12 { 10 } else { 2 }));
            inner(k)
        }
    };
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut fixed: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_millis(1));
    fixed.until_decided(&specs, &mut slow_first()).unwrap();
    assert_eq!(fixed.rounds(), MIN_ROUNDS, "1 ms buys no look");
    let mut grown: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_millis(1));
    grown.budget_as_needed();
    grown.until_decided(&specs, &mut slow_first()).unwrap();
    assert!(grown.rounds() > MIN_ROUNDS, "the first rounds' 120 ms buy the look at 9");
    assert!(LOOKS.contains(&grown.rounds()), "{} rounds", grown.rounds());
}

#[test]
fn an_unmeasurable_arm_is_not_tried_again_and_names_its_claim() {
    let meter = Scripted { busy: vec![], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let tries = Cell::new(0);
    let mut measure = |k: &&str| -> Measured<f64> {
        if *k == "b" {
            tries.set(tries.get() + 1);
            return Ok(Err("cannot here".into()));
        }
        Ok(Ok(1.0))
    };
    let specs = [ratio_spec(Needed::AtLeast(1.0))];
    trial.round(&["a", "b"], &mut measure).unwrap();
    trial.until_decided(&specs, &mut measure).unwrap();
    assert_eq!(tries.get(), 1);
    let claim = trial.judge(&specs[0]);
    assert_eq!(claim.verdict, claim::Verdict::NotMeasurable);
    assert_eq!(claim.why, "b: cannot here");
}

#[test]
fn a_machine_busy_throughout_is_not_measured_again_and_again() {
    let meter = Scripted { busy: (0..1000).collect(), taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let mut measure = |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) };
    let specs = [ratio_spec(Needed::AtLeast(0.5))];
    trial.until_decided(&specs, &mut measure).unwrap();
    // Two rounds of two arms, each taken three times: 12 busy takes,
    // then no retake, no made-up round and no look.
    assert_eq!((trial.rounds(), trial.takes.len()), (2, 2 * 2 * (MAX_RETAKES + 1)));
    assert!(trial.swamped());
    assert_eq!(trial.judge(&specs[0]).verdict, claim::Verdict::Inconclusive);
    trial.round(&["a", "b"], &mut measure).unwrap();
    assert_eq!(trial.takes.len(), 14, "one take per arm once swamped");
}

#[test]
fn rounds_refused_on_a_busy_machine_are_inconclusive_not_unmeasurable() {
    let refusing = || Spec::iomux("b / a", Needed::AtLeast(1.0), vec!["a", "b"], |_| None).refusing("rate short");
    for (busy, verdict) in [(true, claim::Verdict::Inconclusive), (false, claim::Verdict::NotMeasurable)] {
        let meter = Scripted { busy: if busy { (0..1000).collect() } else { vec![] }, taken: Cell::new(0) };
        let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::ZERO);
        trial.round(&["a", "b"], &mut |_: &&str| -> Measured<f64> { Ok(Ok(1.0)) }).unwrap();
        let claim = trial.judge(&refusing());
        assert_eq!(claim.verdict, verdict, "busy {busy}: {}", claim.why);
        assert!(claim.why.contains("rate short"), "{}", claim.why);
    }
}

#[test]
fn a_count_is_decided_by_noisy_rounds_too() {
    // Every take of the first six rounds is busy: a ratio is left short of
    // quiet rounds, an error count is not.
    let meter = Scripted { busy: (0..36).collect(), taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::ZERO);
    let mut measure = |_: &&str| -> Measured<f64> { Ok(Ok(0.0)) };
    for _ in 0..MIN_ROUNDS {
        trial.round(&["a", "b"], &mut measure).unwrap();
    }
    let errors = Spec::iomux("errors", Needed::AtMost(0.0), vec!["a", "b"], |v| Some(v.get(&"a")? + v.get(&"b")?));
    assert_eq!(trial.judge(&errors).verdict, claim::Verdict::Inconclusive, "not counted: noisy rounds only");
    let claim = trial.judge(&errors.counted());
    assert_eq!(claim.verdict, claim::Verdict::Holds, "{}", claim.why);
    assert_eq!(claim.estimate.map(|e| e.n), Some(MIN_ROUNDS));
}

#[test]
fn busy_rounds_are_left_out_of_the_interval() {
    // Every take of round 0 is busy (a, then b three times).
    let meter = Scripted { busy: vec![0, 1, 2, 3, 4, 5], taken: Cell::new(0) };
    let mut trial: Trial<&str, f64> = Trial::new(&meter, "t", Duration::from_secs(60));
    let mut measure = |k: &&str| -> Measured<f64> { Ok(Ok(if *k == "b" { 2.0 } else { 1.0 })) };
    let specs = [ratio_spec(Needed::AtLeast(1.5))];
    trial.until_decided(&specs, &mut measure).unwrap();
    let claim = trial.judge(&specs[0]);
    assert_eq!(claim.verdict, claim::Verdict::Holds, "{}", claim.why);
    assert!(claim.excluded >= 1, "{claim:?}");
    // The busy round is made up: six quiet rounds of seven decide.
    assert_eq!((trial.rounds(), claim.estimate.map(|e| e.n)), (MIN_ROUNDS + 1, Some(MIN_ROUNDS)));
}
