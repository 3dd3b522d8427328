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

/// Connections waiting, in order, for a deadline that is the same length
/// for all of them (the linger time): a FIFO, no heap needed.
#[derive(Default)]
pub struct Deadlines {
    queue: std::collections::VecDeque<(Instant, super::ConnId)>,
}

impl Deadlines {
    pub fn push(&mut self, at: Instant, id: super::ConnId) {
        self.queue.push_back((at, id));
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.front().map(|d| d.0)
    }

    /// The next connection whose deadline has passed at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<super::ConnId> {
        match self.queue.front() {
            Some(&(at, id)) if at <= now => {
                self.queue.pop_front();
                Some(id)
            }
            _ => None,
        }
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
    fn deadlines_pop_in_order_once_due() {
        let now = Instant::now();
        let (a, b) = (super::super::ConnId::from_u64(1), super::super::ConnId::from_u64(2));
        let mut d = Deadlines::default();
        d.push(now + Duration::from_millis(5), a);
        d.push(now + Duration::from_millis(9), b);
        assert_eq!(d.next_deadline(), Some(now + Duration::from_millis(5)));
        assert_eq!(d.pop_due(now), None);
        assert_eq!(d.pop_due(now + Duration::from_millis(9)), Some(a));
        assert_eq!(d.pop_due(now + Duration::from_millis(9)), Some(b));
        assert_eq!(d.pop_due(now + Duration::from_millis(9)), None);
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
