//! One-shot timers for handlers: a min-heap of deadlines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    seq: u64,
}

impl Timers {
    pub fn add(&mut self, at: Instant, token: u64) {
        // The sequence number keeps equal deadlines in the order set.
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, token)));
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The next timer due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<u64> {
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= now => self.heap.pop().map(|Reverse((_, _, token))| token),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// The wait timeout that ends at the earliest of `deadlines`, rounded up
/// to whole milliseconds, or None when there is no deadline.
pub fn timeout_until(now: Instant, deadlines: impl IntoIterator<Item = Option<Instant>>) -> Option<Duration> {
    deadlines.into_iter().flatten().min().map(|d| d.saturating_duration_since(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_deadline_order() {
        let now = Instant::now();
        let mut t = Timers::default();
        t.add(now + Duration::from_millis(20), 2);
        t.add(now + Duration::from_millis(10), 1);
        t.add(now + Duration::from_millis(10), 3);
        assert_eq!(t.next_deadline(), Some(now + Duration::from_millis(10)));
        assert_eq!(t.pop_due(now), None);
        let later = now + Duration::from_millis(15);
        assert_eq!(t.pop_due(later), Some(1));
        assert_eq!(t.pop_due(later), Some(3));
        assert_eq!(t.pop_due(later), None);
        assert_eq!(t.pop_due(now + Duration::from_millis(20)), Some(2));
        assert!(t.is_empty());
    }

    #[test]
    fn timeout_is_the_earliest_deadline() {
        let now = Instant::now();
        assert_eq!(timeout_until(now, [None, None]), None);
        let d = timeout_until(now, [Some(now + Duration::from_millis(5)), None, Some(now + Duration::from_millis(3))]);
        assert_eq!(d, Some(Duration::from_millis(3)));
        assert_eq!(timeout_until(now, [Some(now - Duration::from_millis(1))]), Some(Duration::ZERO));
    }
}
