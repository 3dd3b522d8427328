//! The keyspace: strings with optional expiry, in milliseconds of a clock
//! the caller gives (so tests and the server agree on time). Expired keys
//! are removed when touched, and before each batch of commands from a heap
//! of expiries (redis samples keys in the background instead; either way
//! DBSIZE does not count a key long expired).

use bytes::Bytes;
use hashbrown::hash_table::{Entry as Slot, OccupiedEntry};
use hashbrown::HashTable;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, Hasher, RandomState};

/// Values this long or longer are kept shared, so that a GET can send one
/// without copying it ([`Resp::share_values`](crate::Resp::share_values)).
pub const SHARED_MIN: usize = 16 << 10;

/// A value, stored once.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// A small one: a SET of the key overwrites it in place.
    Inline(Vec<u8>),
    /// A large one, followed by CRLF (a bulk reply's tail, so that the
    /// reply is its head and this), shared with the replies that send it.
    Shared(Bytes),
}

impl Value {
    fn new(value: &[u8], shared_min: usize) -> Value {
        if value.len() < shared_min {
            return Value::Inline(value.to_vec());
        }
        let mut tail = Vec::with_capacity(value.len() + 2);
        tail.extend_from_slice(value);
        tail.extend_from_slice(b"\r\n");
        Value::Shared(Bytes::from(tail))
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Value::Inline(v) => v,
            Value::Shared(tail) => &tail[..tail.len() - 2],
        }
    }

    /// Replaces the value, in place when it stays small.
    fn replace(&mut self, new: &[u8], shared_min: usize) {
        match self {
            Value::Inline(old) if new.len() < shared_min => overwrite(old, new),
            slot => *slot = Value::new(new, shared_min),
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    /// Milliseconds on the caller's clock; None: no expiry.
    expires_at: Option<u64>,
}

/// Keys and their entries, hashed with SipHash under a random key per
/// process (std's `RandomState`; redis keys its SipHash the same way), so
/// that clients cannot craft colliding keys. Hashed over the key's bytes
/// alone: std's `HashMap` hashes a byte string's length first, one more
/// round of SipHash per lookup that a map of byte strings does not need.
#[derive(Debug, Default)]
struct Keys {
    table: HashTable<(Vec<u8>, Entry)>,
    state: RandomState,
}

fn hash(state: &RandomState, key: &[u8]) -> u64 {
    let mut h = state.build_hasher();
    h.write(key);
    h.finish()
}

impl Keys {
    fn find(&mut self, key: &[u8]) -> Option<OccupiedEntry<'_, (Vec<u8>, Entry)>> {
        self.table.find_entry(hash(&self.state, key), |(k, _)| k == key).ok()
    }

    /// A key's entry unless it expired at `now_ms` (then it goes): one
    /// hash per lookup, expired or not.
    fn live(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let found = self.find(key)?;
        if found.get().1.expires_at.is_some_and(|at| at <= now_ms) {
            found.remove();
            return None;
        }
        Some(&mut found.into_mut().1)
    }

    /// Sets a key's entry: `update` changes an existing one in place,
    /// `new` makes one for an absent key.
    fn upsert(&mut self, key: &[u8], update: impl FnOnce(&mut Entry), new: impl FnOnce() -> Entry) {
        let state = &self.state;
        let slot = self.table.entry(hash(state, key), |(k, _)| k == key, |(k, _)| hash(state, k));
        match slot {
            Slot::Occupied(mut found) => update(&mut found.get_mut().1),
            Slot::Vacant(absent) => {
                absent.insert((key.to_vec(), new()));
            }
        }
    }
}

/// String keys and their values.
#[derive(Debug)]
pub struct Store {
    keys: Keys,
    /// Every expiry set, by time; an entry whose key has since changed
    /// expiry (or gone) is skipped when it comes due.
    expiries: BinaryHeap<Reverse<(u64, Vec<u8>)>>,
    /// Values at least this long are kept shared.
    shared_min: usize,
}

impl Default for Store {
    fn default() -> Store {
        Store::sharing_from(SHARED_MIN)
    }
}

impl Store {
    /// An empty keyspace; values of [`SHARED_MIN`] bytes or more are kept
    /// shared.
    pub fn new() -> Store {
        Store::default()
    }

    /// An empty keyspace that keeps values of `shared_min` bytes or more
    /// shared (tests share small ones too).
    pub fn sharing_from(shared_min: usize) -> Store {
        Store { keys: Keys::default(), expiries: BinaryHeap::new(), shared_min }
    }

    fn live(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.keys.live(key, now_ms)
    }

    /// The value of a live key.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&[u8]> {
        self.live(key, now_ms).map(|e| e.value.as_slice())
    }

    /// The stored value of a live key.
    pub(crate) fn value(&mut self, key: &[u8], now_ms: u64) -> Option<&Value> {
        self.live(key, now_ms).map(|e| &e.value)
    }

    /// Whether the key is live.
    pub fn exists(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.live(key, now_ms).is_some()
    }

    /// Sets a value; `keep_ttl` keeps a live key's expiry, else
    /// `expires_at` replaces it.
    pub fn set(&mut self, key: &[u8], value: &[u8], expires_at: Option<u64>) {
        if let Some(at) = expires_at {
            self.expiries.push(Reverse((at, key.to_vec())));
        }
        let shared_min = self.shared_min;
        self.keys.upsert(
            key,
            |entry| {
                entry.expires_at = expires_at;
                entry.value.replace(value, shared_min);
            },
            || Entry { value: Value::new(value, shared_min), expires_at },
        );
    }

    /// Removes the keys whose expiry has passed at `now_ms`.
    pub fn purge(&mut self, now_ms: u64) {
        while let Some(Reverse((at, _))) = self.expiries.peek() {
            if *at > now_ms {
                break;
            }
            let Some(Reverse((at, key))) = self.expiries.pop() else { break };
            if let Some(found) = self.keys.find(&key) {
                if found.get().1.expires_at == Some(at) {
                    found.remove();
                }
            }
        }
    }

    /// Replaces a live key's value, keeping its expiry (INCR, DECR).
    pub fn replace(&mut self, key: &[u8], value: &[u8], now_ms: u64) {
        let shared_min = self.shared_min;
        match self.live(key, now_ms) {
            Some(e) => e.value.replace(value, shared_min),
            None => self.set(key, value, None),
        }
    }

    /// Removes a key; whether it was live.
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> bool {
        let Some(found) = self.keys.find(key) else { return false };
        // An expired key goes too, but was not there to remove.
        let live = found.get().1.expires_at.is_none_or(|at| at > now_ms);
        found.remove();
        live
    }

    /// Sets a live key's expiry; false when there is no such key.
    pub fn expire(&mut self, key: &[u8], at: u64, now_ms: u64) -> bool {
        match self.live(key, now_ms) {
            Some(e) => {
                e.expires_at = Some(at);
                self.expiries.push(Reverse((at, key.to_vec())));
                true
            }
            None => false,
        }
    }

    /// A live key's expiry: None for no key, Some(None) for no expiry.
    pub fn expires_at(&mut self, key: &[u8], now_ms: u64) -> Option<Option<u64>> {
        self.live(key, now_ms).map(|e| e.expires_at)
    }

    /// Keys (after `purge`, only live ones).
    pub fn len(&self) -> usize {
        self.keys.table.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.table.is_empty()
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.keys.table.clear();
        self.expiries.clear();
    }
}

/// Replaces `old` with `new` in `old`'s allocation (a SET of a key that
/// exists allocates nothing), unless that allocation is much larger than
/// needed: a small value does not keep a large one's memory.
fn overwrite(old: &mut Vec<u8>, new: &[u8]) {
    if old.capacity() > 2 * new.len() + 64 {
        *old = new.to_vec();
    } else {
        old.clear();
        old.extend_from_slice(new);
    }
}
