//! A slowdown switched on at build time (`--features slowdown`) and set at
//! run time (`IOMUX_SLOWDOWN_NS`): `iomux serve` spins that many
//! nanoseconds per batch of echo input. It exists so that `iomux report A B`
//! can be shown a change whose size is known (see docs/lab.md); a build
//! without the feature has no trace of it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The spin per batch, read once from `IOMUX_SLOWDOWN_NS` (absent or not
/// a number: none).
fn per_batch() -> Duration {
    static NS: OnceLock<Duration> = OnceLock::new();
    *NS.get_or_init(|| {
        let ns = std::env::var("IOMUX_SLOWDOWN_NS").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Duration::from_nanos(ns)
    })
}

/// Spins for the configured time.
pub fn spin() {
    let spin = per_batch();
    if spin.is_zero() {
        return;
    }
    let start = Instant::now();
    while start.elapsed() < spin {
        std::hint::spin_loop();
    }
}
