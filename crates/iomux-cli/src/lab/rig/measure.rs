//! Timing loops shared by every experiment: one harness for the library's
//! calls and for the raw baselines, so their ratio measures only the code
//! under test.

use std::time::{Duration, Instant};

/// Calls per second of `op`, run back to back for about `duration`.
///
/// The clock is read once per batch, and batches grow to about 1/100 of
/// the duration, so reading the clock (~20 ns) costs well under 1% even
/// for an operation as cheap as an empty syscall.
pub fn calls_per_sec(duration: Duration, mut op: impl FnMut()) -> (f64, u64) {
    let start = Instant::now();
    let target_batch_time = duration / 100;
    let mut batch: u64 = 1;
    let mut calls: u64 = 0;
    loop {
        for _ in 0..batch {
            op();
        }
        calls += batch;
        let elapsed = start.elapsed();
        if elapsed >= duration {
            return (calls as f64 / elapsed.as_secs_f64(), calls);
        }
        let per_call = elapsed.as_secs_f64() / calls as f64;
        batch = ((target_batch_time.as_secs_f64() / per_call) as u64).clamp(1, 1 << 22);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_counts_every_call() {
        let mut n = 0u64;
        let (rate, calls) = calls_per_sec(Duration::from_millis(20), || n += 1);
        assert_eq!(calls, n);
        assert!(rate > 0.0);
    }
}
