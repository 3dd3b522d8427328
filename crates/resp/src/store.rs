//! The keyspace: strings with optional expiry, in milliseconds of a clock
//! the caller gives (so tests and the server agree on time). Expired keys
//! are removed when touched, and before each batch of commands from a heap
//! of expiries (redis samples keys in the background instead; either way
//! DBSIZE does not count a key long expired).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    /// Milliseconds on the caller's clock; None: no expiry.
    expires_at: Option<u64>,
}

/// String keys and their values.
#[derive(Default, Debug)]
pub struct Store {
    keys: HashMap<Vec<u8>, Entry>,
    /// Every expiry set, by time; an entry whose key has since changed
    /// expiry (or gone) is skipped when it comes due.
    expiries: BinaryHeap<Reverse<(u64, Vec<u8>)>>,
}

impl Store {
    /// An empty keyspace.
    pub fn new() -> Store {
        Store::default()
    }

    fn live(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        // No expiry pending (the heap keeps one per expiry set until it
        // comes due): one lookup.
        if self.expiries.is_empty() {
            return self.keys.get_mut(key);
        }
        let expired = self.keys.get(key)?.expires_at.is_some_and(|at| at <= now_ms);
        if expired {
            self.keys.remove(key);
            return None;
        }
        self.keys.get_mut(key)
    }

    /// The value of a live key.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&[u8]> {
        self.live(key, now_ms).map(|e| e.value.as_slice())
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
        match self.keys.get_mut(key) {
            Some(entry) => {
                entry.expires_at = expires_at;
                overwrite(&mut entry.value, value);
            }
            None => {
                self.keys.insert(key.to_vec(), Entry { value: value.to_vec(), expires_at });
            }
        }
    }

    /// Removes the keys whose expiry has passed at `now_ms`.
    pub fn purge(&mut self, now_ms: u64) {
        while let Some(Reverse((at, _))) = self.expiries.peek() {
            if *at > now_ms {
                break;
            }
            let Some(Reverse((at, key))) = self.expiries.pop() else { break };
            if self.keys.get(&key).is_some_and(|e| e.expires_at == Some(at)) {
                self.keys.remove(&key);
            }
        }
    }

    /// Replaces a live key's value, keeping its expiry (INCR, DECR).
    pub fn replace(&mut self, key: &[u8], value: &[u8], now_ms: u64) {
        match self.live(key, now_ms) {
            Some(e) => overwrite(&mut e.value, value),
            None => self.set(key, value, None),
        }
    }

    /// Removes a key; whether it was live.
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.live(key, now_ms).is_some() && self.keys.remove(key).is_some()
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
        self.keys.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.keys.clear();
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
