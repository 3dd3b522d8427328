//! Connection storage: slots reused through a free list, each with a
//! generation so that a [`ConnId`] of a closed connection stays dead.

use super::ConnId;

pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

struct Slot<T> {
    gen: u32,
    value: Option<T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { slots: Vec::new(), free: Vec::new(), len: 0 }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, value: T) -> ConnId {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.gen = slot.gen.wrapping_add(1);
            slot.value = Some(value);
            return ConnId { index, gen: slot.gen };
        }
        let index = self.slots.len() as u32;
        self.slots.push(Slot { gen: 0, value: Some(value) });
        ConnId { index, gen: 0 }
    }

    pub fn get(&self, id: ConnId) -> Option<&T> {
        let slot = self.slots.get(id.index as usize)?;
        if slot.gen == id.gen {
            slot.value.as_ref()
        } else {
            None
        }
    }

    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut T> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.gen == id.gen {
            slot.value.as_mut()
        } else {
            None
        }
    }

    pub fn remove(&mut self, id: ConnId) -> Option<T> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.gen != id.gen {
            return None;
        }
        let value = slot.value.take()?;
        self.free.push(id.index);
        self.len -= 1;
        Some(value)
    }

    /// The id of the live value in slot `index`, if any.
    pub fn id_at(&self, index: u32) -> Option<ConnId> {
        let slot = self.slots.get(index as usize)?;
        slot.value.as_ref().map(|_| ConnId { index, gen: slot.gen })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every live id (a snapshot, so the slab can change while it is used).
    pub fn ids(&self) -> Vec<ConnId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.value.is_some())
            .map(|(i, s)| ConnId { index: i as u32, gen: s.gen })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_do_not_reach_a_reused_slot() {
        let mut s = Slab::default();
        let a = s.insert("a");
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b");
        assert_eq!(a.index, b.index, "the slot is reused");
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 1);
        assert_eq!(s.ids(), vec![b]);
    }
}
