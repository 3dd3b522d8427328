//! Where the hypervisor placed the two CPUs the lab pins to: the time a
//! cache line takes to go from CPU 0 to CPU 1 and back.
//!
//! Why: on the 2-vCPU machines this lab was built on, that round trip is
//! 50-70 ns most of the time (the two vCPUs on one physical core) and
//! 320-340 ns in spells of 10-40 s (on two cores). In such a spell every
//! cell whose server and load talk across the two CPUs costs about 35%
//! more CPU per echo, server and load alike (5.2 against 7.1 us per echo
//! from `iomux load` on CPU 1 against `iomux serve` on CPU 0, in 150
//! back-to-back 0.5 s runs), while no other process runs, steal is nil and
//! a single-CPU probe (a spin loop, a syscall loop, a one-thread loopback
//! TCP ping-pong) does not move. A round that straddles the start of a
//! spell turns a ratio of two servers into nonsense, so the trial reads
//! the placement before and after every sample, but those of arms whose
//! figures do not depend on it (memory, perf's counts) and a smoke run's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The two CPUs the lab's experiments pin their servers and loads to.
pub use crate::lab::harness::facts::CPUS;

/// Round trips per batch: about 30 us when close, 170 us when apart.
const TRIPS: u64 = 500;

/// Batches per reading; the fastest stands for the reading, so a batch
/// in which either thread was preempted does not count.
const BATCHES: usize = 3;

/// A batch that takes longer than this (a thread not scheduled at all)
/// is given up.
const BATCH_LIMIT: Duration = Duration::from_millis(20);

/// A reading above this says that a thread was preempted, not where the
/// CPUs are (apart is 290-340 ns): with a CPU burner on each CPU every
/// batch read about 16,000 ns. Such a reading is no reading.
const PREEMPTED_NS: f64 = 2_000.0;

/// Every reading of this run, in order of size. Process-wide, so that every experiment of a
/// run judges against the same reference.
static READINGS: Mutex<Vec<f64>> = Mutex::new(Vec::new());

/// A reading, and the run's close reference: the 10th percentile of its
/// readings so far (this one included). Not the minimum: one reading of
/// 27 ns among thousands of 55-70 once made every ordinary reading look
/// apart.
pub fn read() -> Option<(f64, f64)> {
    let ns = round_trip_ns()?;
    // Kept sorted: the percentile is an index, with no copy per reading.
    let mut sorted = READINGS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let at = sorted.partition_point(|&x| x < ns);
    sorted.insert(at, ns);
    Some((ns, sorted[(sorted.len() - 1) / 10]))
}

/// Nanoseconds per cache-line round trip between [`CPUS`], the fastest
/// of a few batches; None when the machine has one CPU, the threads
/// cannot be pinned, or no batch finished in time or unpreempted.
pub fn round_trip_ns() -> Option<f64> {
    if crate::os::cpus() < 2 {
        return None;
    }
    let line = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let pong = s.spawn(|| -> Option<()> {
            crate::os::pin_to_cpu(CPUS.1).ok()?;
            let mut seen = 0;
            // Answers every odd value with the next even one until told to stop.
            while !stop.load(Ordering::Relaxed) {
                let v = line.load(Ordering::Acquire);
                if v != seen && v % 2 == 1 {
                    line.store(v + 1, Ordering::Release);
                    seen = v + 1;
                }
                std::hint::spin_loop();
            }
            Some(())
        });
        let best = s
            .spawn(|| -> Option<f64> {
                crate::os::pin_to_cpu(CPUS.0).ok()?;
                let mut next = 1;
                (0..BATCHES).filter_map(|_| batch(&line, &mut next)).reduce(f64::min).filter(|&ns| ns < PREEMPTED_NS)
            })
            .join()
            .ok()
            .flatten();
        stop.store(true, Ordering::Relaxed);
        let ponged = pong.join().ok().flatten();
        ponged.and(best)
    })
}

/// One batch of [`TRIPS`] round trips from the calling thread, starting
/// at the odd value `next`: ns per trip, or None when an answer did not
/// come within [`BATCH_LIMIT`]. `next` is left past every value sent, so
/// a late answer to an abandoned batch is never taken for the next one's.
fn batch(line: &AtomicU64, next: &mut u64) -> Option<f64> {
    let start = Instant::now();
    for _ in 0..TRIPS {
        line.store(*next, Ordering::Release);
        let mut spins = 0u32;
        while line.load(Ordering::Acquire) != *next + 1 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && start.elapsed() > BATCH_LIMIT {
                *next += 2;
                return None;
            }
            std::hint::spin_loop();
        }
        *next += 2;
    }
    Some(start.elapsed().as_nanos() as f64 / TRIPS as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_a_plausible_round_trip() {
        if crate::os::cpus() < 2 {
            assert!(round_trip_ns().is_none(), "one CPU, yet a cross-CPU reading");
            return;
        }
        // A batch gives up when the other thread is not scheduled (the
        // tests beside this one may hold both CPUs); some try gets through.
        let ns = (0..50)
            .find_map(|_| {
                round_trip_ns().or_else(|| {
                    std::thread::sleep(Duration::from_millis(20));
                    None
                })
            })
            .expect("two CPUs and no reading in 50 tries");
        // A cache line cannot cross and come back in under a nanosecond,
        // and a slower reading than PREEMPTED_NS is none.
        assert!((1.0..PREEMPTED_NS).contains(&ns), "{ns} ns");
    }
}
