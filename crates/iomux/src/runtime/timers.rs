//! Timers: a handler's one-shot timers (cancellable), its per-connection
//! deadlines, and the linger deadlines of closing connections.

use super::ConnId;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A timer set with [`Io::set_timer`](super::Io::set_timer), to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

/// Timers ordered by deadline, then by the order they were set.
#[derive(Default)]
pub struct Timers {
    by_deadline: BTreeMap<(Instant, u64), u64>,
    deadline_of: HashMap<u64, Instant>,
    next: u64,
}

impl Timers {
    pub fn add(&mut self, at: Instant, token: u64) -> TimerId {
        self.next += 1;
        self.by_deadline.insert((at, self.next), token);
        self.deadline_of.insert(self.next, at);
        TimerId(self.next)
    }

    /// Removes a pending timer; false if it fired or was cancelled already.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        match self.deadline_of.remove(&id.0) {
            Some(at) => self.by_deadline.remove(&(at, id.0)).is_some(),
            None => false,
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first_key_value().map(|((at, _), _)| *at)
    }

    /// The id the next timer set will get: timers set from now on have
    /// ids at or above it.
    pub fn next_id(&self) -> u64 {
        self.next + 1
    }

    /// The next timer due at `now` that was set before id `set_before`,
    /// with its token.
    pub fn pop_due(&mut self, now: Instant, set_before: u64) -> Option<(TimerId, u64)> {
        let entry = self.by_deadline.first_entry()?;
        let (at, id) = *entry.key();
        if at > now || id >= set_before {
            return None;
        }
        let ((_, id), token) = entry.remove_entry();
        self.deadline_of.remove(&id);
        Some((TimerId(id), token))
    }

    pub fn is_empty(&self) -> bool {
        self.by_deadline.is_empty()
    }

    /// When a pending timer is due; None once it fired or was cancelled.
    pub fn deadline(&self, id: TimerId) -> Option<Instant> {
        self.deadline_of.get(&id.0).copied()
    }
}

/// The heap of per-connection deadlines
/// ([`Io::set_deadline`](super::Io::set_deadline)). Each connection keeps
/// the deadline it wants beside it (in `io::Conn`), and this heap holds
/// entries that say when to look at it. Moving a deadline later, as a
/// keep-alive connection's idle timeout does after every request, only
/// writes the connection's field: its entry, once due, finds the later
/// deadline and goes back in once. Moving it earlier pushes an entry
/// (O(log n)); clearing it is O(1), the entry left to be skipped when due.
/// So a busy connection costs no heap work per request.
#[derive(Default)]
pub struct ConnDeadlines {
    heap: BinaryHeap<Reverse<(Instant, u64, ConnId)>>,
    next: u64,
}

impl ConnDeadlines {
    pub fn push(&mut self, at: Instant, id: ConnId) {
        self.next += 1;
        self.heap.push(Reverse((at, self.next, id)));
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The sequence number the next entry will get (see `pop_due`).
    pub fn next_seq(&self) -> u64 {
        self.next + 1
    }

    /// The next entry due at `now` that was pushed before `pushed_before`
    /// (a deadline set from `on_deadline` for now waits for the next turn).
    pub fn pop_due(&mut self, now: Instant, pushed_before: u64) -> Option<(Instant, ConnId)> {
        let &Reverse((at, seq, id)) = self.heap.peek()?;
        if at > now || seq >= pushed_before {
            return None;
        }
        self.heap.pop();
        Some((at, id))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Connections waiting, in order, for a deadline that is the same length
/// for all of them (the linger time): a FIFO, no heap needed.
#[derive(Default)]
pub struct Deadlines {
    queue: VecDeque<(Instant, ConnId)>,
}

impl Deadlines {
    pub fn push(&mut self, at: Instant, id: ConnId) {
        self.queue.push_back((at, id));
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.front().map(|d| d.0)
    }

    /// Drops the entries at the front that `stale` says no longer matter
    /// (their connection connected or closed), so they wake nobody.
    pub fn prune_front(&mut self, stale: impl Fn(ConnId) -> bool) {
        while self.queue.front().is_some_and(|&(_, id)| stale(id)) {
            self.queue.pop_front();
        }
    }

    /// The next connection whose deadline has passed at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<ConnId> {
        match self.queue.front() {
            Some(&(at, id)) if at <= now => {
                self.queue.pop_front();
                Some(id)
            }
            _ => None,
        }
    }
}

/// The wait timeout that ends at the earliest of `deadlines`, or None when
/// there is no deadline. The clock is read only when there is one: a loop
/// with no timer pays no clock read per wait.
pub fn timeout_until(
    deadlines: impl IntoIterator<Item = Option<Instant>>,
    now: impl FnOnce() -> Instant,
) -> Option<Duration> {
    deadlines.into_iter().flatten().min().map(|d| d.saturating_duration_since(now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_deadline_order_and_cancelled_ones_never() {
        let now = Instant::now();
        let mut t = Timers::default();
        let two = t.add(now + Duration::from_millis(20), 2);
        let one = t.add(now + Duration::from_millis(10), 1);
        let three = t.add(now + Duration::from_millis(10), 3);
        let four = t.add(now + Duration::from_millis(12), 4);
        assert!(t.cancel(four));
        assert!(!t.cancel(four), "a second cancel finds nothing");
        assert_eq!(t.next_deadline(), Some(now + Duration::from_millis(10)));
        assert_eq!(t.pop_due(now, u64::MAX), None);
        let later = now + Duration::from_millis(15);
        assert_eq!(t.pop_due(later, u64::MAX), Some((one, 1)));
        assert_eq!(t.pop_due(later, u64::MAX), Some((three, 3)));
        assert_eq!(t.pop_due(later, u64::MAX), None);
        assert_eq!(t.pop_due(now + Duration::from_millis(20), u64::MAX), Some((two, 2)));
        assert!(!t.cancel(two), "a fired timer cannot be cancelled");
        let limit = t.next_id();
        t.add(now, 9);
        assert_eq!(t.pop_due(later, limit), None, "set during the phase: next phase");
        assert!(t.pop_due(later, u64::MAX).is_some());
        assert!(t.is_empty());
    }

    #[test]
    fn deadlines_pop_in_order_once_due() {
        let now = Instant::now();
        let (a, b) = (ConnId::from_u64(1), ConnId::from_u64(2));
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
    fn connection_deadlines_pop_when_due_and_pushed_before_the_phase() {
        let now = Instant::now();
        let (a, b) = (ConnId::from_u64(1), ConnId::from_u64(2));
        let mut d = ConnDeadlines::default();
        d.push(now + Duration::from_millis(9), a);
        d.push(now + Duration::from_millis(5), b);
        assert_eq!(d.next_deadline(), Some(now + Duration::from_millis(5)));
        let phase = d.next_seq();
        d.push(now, a); // pushed during the phase: next phase
        assert_eq!(d.pop_due(now + Duration::from_millis(9), phase), None);
        assert_eq!(d.pop_due(now, u64::MAX), Some((now, a)));
        assert_eq!(d.pop_due(now + Duration::from_millis(9), phase), Some((now + Duration::from_millis(5), b)));
        assert_eq!(d.pop_due(now + Duration::from_millis(9), phase), Some((now + Duration::from_millis(9), a)));
        assert_eq!(d.len(), 0);
    }

    #[test]
    fn timeout_is_the_earliest_deadline() {
        let now = Instant::now();
        let no_clock = || -> Instant { panic!("no deadline, so no clock read") };
        assert_eq!(timeout_until([None, None], no_clock), None);
        let d =
            timeout_until([Some(now + Duration::from_millis(5)), None, Some(now + Duration::from_millis(3))], || now);
        assert_eq!(d, Some(Duration::from_millis(3)));
        assert_eq!(timeout_until([Some(now - Duration::from_millis(1))], || now), Some(Duration::ZERO));
    }
}
