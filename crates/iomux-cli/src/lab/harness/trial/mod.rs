//! How an experiment samples: arms measured in rounds, in a balanced
//! (Williams) order, every sample with the noise reading of its own window (measured again
//! when other processes used the CPU during it), and more rounds, within a
//! time budget, until every claim's interval decides.

use crate::lab::harness::claim::{self, Claim, Rounds, Source};
use crate::lab::harness::stats::Needed;
use crate::progress::Progress;
use crate::CliResult;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Others' mean CPU use during one sample (1.0 = a whole CPU) above which
/// the sample is taken again. Light background work (a browser, an editor:
/// a tenth of a CPU) is left to the intervals, which widen with it; a
/// sample that shared its CPUs with a quarter of a CPU of someone else's
/// work is not kept.
pub const SAMPLE_THRESHOLD: f64 = 0.25;

/// How many times a busy sample is taken again before its round is left
/// out.
pub const MAX_RETAKES: usize = 2;

/// Takes of an experiment before it can be judged swamped by other
/// processes (see [`Trial::swamped`]).
pub const SWAMPED_AFTER: usize = 12;

/// Rounds a claim needs before it can be decided: the fewest samples that
/// give a 95% interval for a median (see `stats`).
pub const MIN_ROUNDS: usize = 6;

/// The round counts at which undecided claims are looked at again: about
/// 1.5 times apart, so the sequence has few looks (each a chance to decide
/// wrongly) and the last, 40, bounds an experiment's rounds.
pub const LOOKS: [usize; 6] = [MIN_ROUNDS, 9, 13, 19, 28, MAX_ROUNDS];

/// With `--full` and no `--budget` ([`Trial::budget_as_needed`]), the rounds
/// added for undecided claims may take this many times what the first
/// rounds took to measure: a budget in seconds fits quick takes, but at
/// full size (5-10 s a take) one look's rounds cost more than it, and a
/// full run left claims inconclusive that said 7 more rounds would decide them.
pub const AS_NEEDED_GROWTH: f64 = 1.0;

/// Rounds run whatever the budget: enough for MIN_ROUNDS quiet ones with a
/// few noisy ones made up.
pub const FREE_ROUNDS: usize = MIN_ROUNDS + MIN_ROUNDS / 2;

/// Rounds of one experiment never exceed this, whatever the budget.
pub const MAX_ROUNDS: usize = 40;

/// A cross-CPU round trip above this many times the run's close reference
/// (the 10th percentile of its readings) means the two CPUs are placed
/// apart (see `lab::rig::placement`): a sample taken then is measured again.
/// Close readings are 50-70 ns, apart ones 290-340.
pub const APART: f64 = 2.5;

/// How long a take waits, before it starts, for CPUs found apart to be
/// placed close again; and the most one experiment waits in all. Waiting
/// costs less than measuring through a spell: with the machine idle the
/// CPUs were apart in spells of 0.5-2.5 s (a reading every 0.5 s for two
/// minutes), while under a server and its load spells last 10-40 s; so a
/// take that measures through one prolongs it, and with 5 s per take (30 s
/// per experiment) E5 lost 99 of 296 takes to spells and 5 of its 9 rounds.
const PLACEMENT_WAIT: Duration = Duration::from_secs(20);
const PLACEMENT_WAIT_TOTAL: Duration = Duration::from_secs(90);

/// A reading of the two CPUs' placement.
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    /// Nanoseconds per cache-line round trip now.
    pub ns: f64,
    /// The run's close reference: the 10th percentile of its readings.
    pub closest_ns: f64,
}

impl Placement {
    pub fn apart(&self) -> bool {
        self.ns > APART * self.closest_ns
    }
}

/// What other processes used of the CPUs since a moment, and where the
/// CPUs are placed: the lab's noise monitor, or a scripted one in tests.
pub trait Meter {
    /// Others' mean CPU share (1.0 = a whole CPU) from `since` to now.
    fn others_since(&self, since: Instant) -> Option<f64>;

    /// The CPUs' placement now; None where it cannot be read.
    fn placement(&self) -> Option<Placement> {
        None
    }
}

mod looks;
#[cfg(test)]
mod quiet;
#[cfg(test)]
pub use quiet::{judged_quiet, Quiet};

/// One measurement of one arm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Take<K, S> {
    pub arm: K,
    pub round: usize,
    /// Others' mean CPU share during this take; None when unreadable.
    pub others: Option<f64>,
    /// The slower of the CPUs' round trips read before and after the
    /// take, in ns; None when unreadable (and in results before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_cpu_ns: Option<f64>,
    /// The CPUs were placed apart before or after the take.
    #[serde(default)]
    pub apart: bool,
    /// Quiet enough to count: others below the threshold, CPUs close.
    pub kept: bool,
    /// Seconds the take measured for (its wait for the CPUs' placement
    /// left out): where an experiment's time goes. None in results before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_s: Option<f64>,
    pub value: S,
}

/// A claim to decide, and how to compute its quantity from one round.
pub struct Spec<K, S> {
    pub quantity: String,
    pub statement: String,
    pub source: Source,
    pub needed: Needed,
    /// The arms the quantity reads; a round counts when all were measured.
    pub arms: Vec<K>,
    /// The quantity from one round's samples of `arms`.
    pub value: Quantity<K, S>,
    /// Why the quantity may have no value although its arms were
    /// measured (the value function refuses some rounds).
    pub refused: Option<String>,
    /// A count that others' load and the CPUs' placement do not change
    /// (errors, messages lost): every round decides it, noisy ones too.
    pub counted: bool,
}

/// A claim's quantity from one round's samples.
pub type Quantity<K, S> = Box<dyn Fn(&RoundView<K, S>) -> Option<f64>>;

/// Arms that could not be measured, with why.
pub type Unmeasurable<K> = Vec<(K, String)>;

/// One round's samples of a claim's arms.
pub struct RoundView<'r, K, S> {
    picked: Vec<(&'r K, &'r S)>,
}

impl<'r, K: PartialEq, S> RoundView<'r, K, S> {
    /// The sample of `arm` in this round.
    pub fn get(&self, arm: &K) -> Option<&'r S> {
        self.picked.iter().find(|p| p.0 == arm).map(|p| p.1)
    }

    /// Every arm of the claim with its sample in this round, in the
    /// claim's order.
    pub fn samples(&self) -> &[(&'r K, &'r S)] {
        &self.picked
    }
}

impl<K, S> Spec<K, S> {
    /// A goal of iomux's own.
    pub fn iomux(
        quantity: impl Into<String>,
        needed: Needed,
        arms: Vec<K>,
        value: impl Fn(&RoundView<K, S>) -> Option<f64> + 'static,
    ) -> Spec<K, S> {
        Spec {
            quantity: quantity.into(),
            statement: String::new(),
            source: Source::Iomux,
            needed,
            arms,
            value: Box::new(value),
            refused: None,
            counted: false,
        }
    }

    /// Marks its quantity as a count that noise does not change (see
    /// [`Spec::counted`]): a round with a busy or misplaced sample still
    /// decides it.
    pub fn counted(mut self) -> Spec<K, S> {
        self.counted = true;
        self
    }

    /// Says why a round's value may be refused, for the claim's reason
    /// when every round was.
    pub fn refusing(mut self, why: &str) -> Spec<K, S> {
        self.refused = Some(why.into());
        self
    }

    /// Marks it as what the machine allows, not a goal of iomux's.
    pub fn machine(mut self) -> Spec<K, S> {
        self.source = Source::Machine;
        self
    }

    /// Marks it as testing the documents' `statement`.
    pub fn documents(mut self, statement: &str) -> Spec<K, S> {
        self.source = Source::Documents;
        self.statement = statement.into();
        self
    }
}

/// What a measurement gives: a sample, or why this arm cannot be measured
/// on this machine (it is then not tried again).
pub type Measured<S> = CliResult<Result<S, String>>;

/// Measures one arm once: an experiment's rig, as the driver runs it.
pub type Measure<'a, K, S> = Box<dyn FnMut(&K) -> Measured<S> + 'a>;

/// The arms' order in round `round`: row `round` of a Williams design.
/// Row r is 0, 1, n-1, 2, n-2, 3, ... each plus r (mod n); for an odd n
/// the next n rows are those reversed. So in the first rounds each arm
/// runs first at most ceil(rounds / n) times, and over n rounds (2n for an
/// odd n) each runs directly after every other equally often: no arm
/// always runs first, or always follows the same one.
pub fn order(n: usize, round: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let period = if n.is_multiple_of(2) { n } else { 2 * n };
    let r = round % period;
    let base = (0..n).map(|j| if j % 2 == 1 { j.div_ceil(2) } else { (n - j / 2) % n });
    let mut row: Vec<usize> = base.map(|b| (b + r) % n).collect();
    if r >= n {
        row.reverse();
    }
    row
}

/// A meter that counts the kernel's network work as the sample's own, and
/// the arms it reads.
type NetworkMeter<'a, K> = (&'a dyn Meter, fn(&K) -> bool);

/// Every take of one experiment, and the arms it could not measure.
pub struct Trial<'a, K, S> {
    meter: &'a dyn Meter,
    pub takes: Vec<Take<K, S>>,
    pub unmeasurable: Unmeasurable<K>,
    rounds: usize,
    budget: Duration,
    /// The budget grows to [`AS_NEEDED_GROWTH`] times the first rounds' time.
    as_needed: bool,
    progress: Progress,
    /// Arms with the same key run one after another within a round.
    group: Option<fn(&K) -> u64>,
    /// Arms whose figures do not depend on where the CPUs are placed.
    placement_free: fn(&K) -> bool,
    /// The meter for arms whose traffic makes the kernel's network work,
    /// and which arms those are.
    network: Option<NetworkMeter<'a, K>>,
    /// Time spent waiting for the CPUs to be placed close.
    waited: Duration,
    /// Takes that ran with others above [`SAMPLE_THRESHOLD`].
    busy_takes: usize,
}

impl<'a, K: Clone + PartialEq + std::fmt::Display, S> Trial<'a, K, S> {
    /// `budget`: time measuring the rounds that [`Trial::until_decided`]
    /// adds beyond the [`MIN_ROUNDS`] a 95% interval needs (waits for the
    /// CPUs' placement are bounded apart).
    pub fn new(meter: &'a dyn Meter, name: &str, budget: Duration) -> Self {
        Trial {
            meter,
            takes: Vec::new(),
            unmeasurable: Vec::new(),
            rounds: 0,
            budget,
            as_needed: false,
            progress: Progress::new(name, 0),
            group: None,
            placement_free: |_| false,
            network: None,
            waited: Duration::ZERO,
            busy_takes: 0,
        }
    }

    /// Lets the rounds added for undecided claims take up to
    /// [`AS_NEEDED_GROWTH`] times what the first rounds (those run
    /// whatever the budget included) took to measure, when that is more
    /// than the budget: `--full` without `--budget`.
    pub fn budget_as_needed(&mut self) {
        self.as_needed = true;
    }

    /// Keeps the arms of one `key` together within each round (their
    /// groups, and the arms within each, still in a Williams order): for
    /// arms that share a costly set-up, such as E1's N registered fds, or
    /// that a claim compares, so that they run close together in time.
    pub fn group_by(&mut self, key: fn(&K) -> u64) {
        self.group = Some(key);
    }

    /// Takes of arms for which `free` holds neither wait for the CPUs to be
    /// placed close nor are measured again when they were apart: their
    /// figures (a count, resident memory, a keepalive timer) do not depend
    /// on a cross-CPU round trip.
    pub fn placement_free(&mut self, free: fn(&K) -> bool) {
        self.placement_free = free;
    }

    /// Reads the noise of arms for which `own` holds with `meter`, which
    /// counts the kernel's network work as theirs.
    pub fn count_network_as_own(&mut self, meter: &'a dyn Meter, own: fn(&K) -> bool) {
        self.network = Some((meter, own));
    }

    /// The meter that reads `arm`'s noise.
    fn meter_of(&self, arm: &K) -> &'a dyn Meter {
        match self.network {
            Some((meter, own)) if own(arm) => meter,
            _ => self.meter,
        }
    }

    /// The arms of round `round`, in the order they run.
    fn in_order<'k>(&self, arms: &'k [K], round: usize) -> Vec<&'k K> {
        let Some(key) = self.group else { return order(arms.len(), round).into_iter().map(|i| &arms[i]).collect() };
        let mut groups: Vec<(u64, Vec<&K>)> = Vec::new();
        for arm in arms {
            match groups.iter_mut().find(|g| g.0 == key(arm)) {
                Some(g) => g.1.push(arm),
                None => groups.push((key(arm), vec![arm])),
            }
        }
        let mut out = Vec::with_capacity(arms.len());
        for g in order(groups.len(), round) {
            let members = &groups[g].1;
            out.extend(order(members.len(), round).into_iter().map(|i| members[i]));
        }
        out
    }

    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// Time spent waiting for the CPUs to be placed close.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    fn note_of(&self, arm: &K) -> Option<&str> {
        self.unmeasurable.iter().find(|(k, _)| k == arm).map(|(_, n)| n.as_str())
    }

    /// Measures each arm once more, in the order of row `round` of a
    /// Williams design ([`order`]), so a slow spell of a shared machine, or
    /// a warm or cold start, falls on different arms in different rounds.
    pub fn round(&mut self, arms: &[K], measure: &mut dyn FnMut(&K) -> Measured<S>) -> CliResult<()> {
        let round = self.rounds;
        self.rounds += 1;
        for arm in self.in_order(arms, round) {
            if self.note_of(arm).is_some() {
                continue;
            }
            let mut again = "";
            let tries = if self.swamped() { 1 } else { MAX_RETAKES + 1 };
            for _ in 0..tries {
                let label = format!("round {}: {arm}{again}", round + 1);
                let free = (self.placement_free)(arm);
                let before = if free { None } else { self.placed_close(&label) };
                self.progress.step(&label);
                let start = Instant::now();
                let value = match measure(arm)? {
                    Ok(v) => v,
                    Err(why) => {
                        self.unmeasurable.push((arm.clone(), why));
                        break;
                    }
                };
                let took_s = Some(start.elapsed().as_secs_f64());
                let others = self.meter_of(arm).others_since(start);
                let after = if free { None } else { self.meter.placement() };
                let apart = before.is_some_and(|p| p.apart()) || after.is_some_and(|p| p.apart());
                let cross_cpu_ns = [before, after].iter().flatten().map(|p| p.ns).reduce(f64::max);
                let busy = !others.is_some_and(|o| o <= SAMPLE_THRESHOLD);
                self.busy_takes += usize::from(busy);
                let kept = !busy && !apart;
                self.takes.push(Take { arm: arm.clone(), round, others, cross_cpu_ns, apart, kept, took_s, value });
                if kept {
                    break;
                }
                // With no wait left, a take that began and ended with the
                // CPUs apart would be taken again in the same spell (10-40 s
                // under load): the round is lost either way, the retakes'
                // time need not be. One that ended close is taken again.
                let in_a_spell = before.is_some_and(|p| p.apart()) && after.is_some_and(|p| p.apart());
                if in_a_spell && self.waited >= PLACEMENT_WAIT_TOTAL {
                    break;
                }
                again = if busy { " (again: the machine was busy)" } else { " (again: the CPUs were placed apart)" };
            }
        }
        Ok(())
    }

    /// Whether other processes keep the CPUs busy: most of this
    /// experiment's takes so far (at least [`SWAMPED_AFTER`]) ran with
    /// others above the threshold. Retakes and made-up rounds wait for a
    /// quiet moment; on a machine that has none they would only triple the
    /// run's time, so they stop and the claims say the machine was noisy.
    pub fn swamped(&self) -> bool {
        self.takes.len() >= SWAMPED_AFTER && 2 * self.busy_takes > self.takes.len()
    }

    /// The placement before a take: while the CPUs are apart, waits (up to
    /// [`PLACEMENT_WAIT`], and [`PLACEMENT_WAIT_TOTAL`] per experiment) for
    /// them to be placed close again, reading every quarter second.
    fn placed_close(&mut self, label: &str) -> Option<Placement> {
        let mut reading = self.meter.placement()?;
        let start = Instant::now();
        // A busy machine has no quiet moment to wait for either.
        let patience = if self.swamped() { Duration::ZERO } else { PLACEMENT_WAIT };
        while reading.apart() && start.elapsed() < patience && self.waited < PLACEMENT_WAIT_TOTAL {
            self.progress.step(&format!(
                "{label} (waiting: CPUs {} and {} placed apart, {:.0} ns a round trip against {:.0} ns usually)",
                crate::lab::harness::facts::CPUS.0,
                crate::lab::harness::facts::CPUS.1,
                reading.ns,
                reading.closest_ns
            ));
            let nap = Duration::from_millis(250);
            std::thread::sleep(nap);
            self.waited += nap;
            reading = self.meter.placement()?;
        }
        Some(reading)
    }

    /// The take that stands for `arm` in `round`: its kept one, else its
    /// last (busy) one; and whether it was kept.
    fn in_round(&self, arm: &K, round: usize) -> Option<(&S, bool)> {
        let mut last = None;
        for t in self.takes.iter().filter(|t| t.round == round && &t.arm == arm) {
            if t.kept {
                return Some((&t.value, true));
            }
            last = Some((&t.value, false));
        }
        last
    }

    /// The quantity of `spec` in each round: the quiet rounds, and all.
    fn values(&self, spec: &Spec<K, S>) -> (Vec<f64>, Vec<f64>) {
        let (mut quiet, mut all) = (Vec::new(), Vec::new());
        for round in 0..self.rounds {
            let picked: Vec<(&K, Option<(&S, bool)>)> =
                spec.arms.iter().map(|a| (a, self.in_round(a, round))).collect();
            if picked.iter().any(|p| p.1.is_none()) {
                continue;
            }
            let quiet_round = picked.iter().all(|p| p.1.is_some_and(|x| x.1));
            let view = RoundView { picked: picked.iter().filter_map(|(k, p)| Some((*k, p.as_ref()?.0))).collect() };
            let Some(v) = (spec.value)(&view).filter(|v| v.is_finite()) else { continue };
            all.push(v);
            if quiet_round || spec.counted {
                quiet.push(v);
            }
        }
        (quiet, all)
    }

    /// The claim of `spec` with its interval and verdict.
    pub fn judge(&self, spec: &Spec<K, S>) -> Claim {
        let (quiet, all) = self.values(spec);
        let note = spec.arms.iter().find_map(|a| self.note_of(a).map(|n| format!("{a}: {n}")));
        let note = note.or_else(|| spec.refused.clone().filter(|_| !spec.arms.is_empty() && self.rounds > 0));
        let claim::Judgement { estimate, mut verdict, mut why, mut undecided } =
            claim::judge(spec.needed, &Rounds { quiet: &quiet, all: &all, unmeasurable: note.as_deref() });
        // Every round refused while the machine was noisy (an open loop
        // short of its rate with the CPUs busy): the noise, not the
        // machine's abilities, may be why.
        let noisy = self.takes.iter().filter(|t| !t.kept && spec.arms.contains(&t.arm)).count();
        if verdict == claim::Verdict::NotMeasurable && spec.refused.as_deref() == note.as_deref() && noisy > 0 {
            verdict = claim::Verdict::Inconclusive;
            why = format!(
                "machine noisy: {why}; {noisy} of its samples ran while other processes used the CPU or \
                           the CPUs were placed apart: a quieter machine would decide it"
            );
            undecided = Some(claim::Undecided::Noise);
        }
        // Rounds that would decide it were not added because others kept
        // the CPUs busy: a quieter machine decides it, not a longer run.
        if self.swamped() && matches!(undecided, Some(claim::Undecided::TooFewRounds { .. })) {
            why = format!(
                "machine noisy: most samples ran while other processes used the CPUs, so no round was added; {why}"
            );
            undecided = Some(claim::Undecided::Noise);
        }
        Claim {
            quantity: spec.quantity.clone(),
            statement: spec.statement.clone(),
            source: spec.source,
            needed: spec.needed,
            estimate,
            excluded: all.len() - quiet.len(),
            verdict,
            why,
            undecided,
        }
    }

    /// The kept samples of one arm.
    pub fn kept<'s>(&'s self, arm: &'s K) -> impl Iterator<Item = &'s S> + 's {
        self.takes.iter().filter(move |t| t.kept && &t.arm == arm).map(|t| &t.value)
    }

    pub fn finish(self) -> (Vec<Take<K, S>>, Unmeasurable<K>) {
        self.progress.finish();
        (self.takes, self.unmeasurable)
    }
}

#[cfg(test)]
mod tests;
