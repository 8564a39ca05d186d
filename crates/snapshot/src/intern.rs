//! A string interner: one text buffer, ids are `u32`, content-addressed.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use crate::hash::IdBuild;

const NIL: u32 = u32::MAX;

/// Interned strings. Equal contents always get the same id, so ids can be
/// compared instead of strings. Hashing uses std's keyed SipHash so a hostile
/// file cannot force collisions.
#[derive(Clone, Default)]
pub(crate) struct Interner {
    text: String,
    /// `ends[i]` is the end of string `i` in `text`; it starts at `ends[i-1]`.
    ends: Vec<usize>,
    /// content hash → newest id with that hash.
    map: HashMap<u64, u32, IdBuild>,
    /// id → previous id with the same hash (or `NIL`).
    prev: Vec<u32>,
    state: RandomState,
}

impl std::fmt::Debug for Interner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Interner({} strings)", self.ends.len())
    }
}

impl Interner {
    /// The string for `id`; `""` for an id that is not in this table.
    pub(crate) fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let Some(&end) = self.ends.get(i) else {
            return "";
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..end).unwrap_or("")
    }

    /// How many strings are interned (ids `0..len`).
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Id of `s` if it was interned.
    pub(crate) fn lookup(&self, s: &str) -> Option<u32> {
        let h = self.state.hash_one(s);
        let mut id = *self.map.get(&h)?;
        while id != NIL {
            if self.get(id) == s {
                return Some(id);
            }
            id = self.prev[id as usize];
        }
        None
    }

    /// Interns `s`; `None` only when more than `u32::MAX - 1` strings exist.
    pub(crate) fn intern(&mut self, s: &str) -> Option<u32> {
        let h = self.state.hash_one(s);
        let head = self.map.get(&h).copied().unwrap_or(NIL);
        let mut id = head;
        while id != NIL {
            if self.get(id) == s {
                return Some(id);
            }
            id = self.prev[id as usize];
        }
        let new = u32::try_from(self.ends.len()).ok().filter(|&n| n != NIL)?;
        self.text.push_str(s);
        self.ends.push(self.text.len());
        self.prev.push(head);
        self.map.insert(h, new);
        Some(new)
    }

    /// Approximate heap bytes in use.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * 8
            + self.prev.capacity() * 4
            + self.map.capacity() * 16
    }
}
