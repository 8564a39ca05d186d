//! The iteration order of `ska::flat_hash_set<MempoolId_t, MempoolIdHash>`
//! (`c10/util/flat_hash_map.h`): `use_on_oom_pools`, which
//! `try_mempool_fallback` walks in its slot order, so which of several
//! `use_on_oom` pools serves a request is the one this order names first.
//!
//! Robin Hood open addressing with Fibonacci hashing (`fibonacci_hash_policy`),
//! `max_load_factor` 0.5, `grow` to `max(4, 2 x buckets)`, `max_lookups`
//! extra slots past the last bucket, backward-shift erase: emulated slot for
//! slot for the keys' hash (`MempoolIdHash`: the id's first element, or its
//! second where the first is 0).

/// `detailv3::min_lookups`.
const MIN_LOOKUPS: i8 = 4;
/// `fibonacci_hash_policy::index_for_hash`'s multiplier.
const FIB: u64 = 11_400_714_819_323_198_485;

/// A set of pool keys in `ska::flat_hash_set`'s slot order.
#[derive(Debug, Clone, Default)]
pub struct SkaSet {
    /// (distance from desired slot, key); distance -1 is an empty slot.
    slots: Vec<(i8, u64)>,
    /// `num_slots_minus_one` (0: no table yet).
    buckets: usize,
    shift: u32,
    max_lookups: i8,
    len: usize,
}

impl SkaSet {
    fn index(&self, key: u64) -> usize {
        (key.wrapping_mul(FIB) >> self.shift) as usize
    }

    /// `emplace`: true if `key` was not there.
    pub fn insert(&mut self, key: u64) -> bool {
        loop {
            if self.buckets > 0 {
                let mut i = self.index(key);
                let mut dist: i8 = 0;
                while self.slots[i].0 >= dist {
                    if self.slots[i].1 == key {
                        return false;
                    }
                    i += 1;
                    dist += 1;
                }
                // `emplace_new_key`
                let full =
                    dist == self.max_lookups || (self.len + 1) as f64 > self.buckets as f64 * 0.5;
                if !full && self.place(i, dist, key) {
                    return true;
                }
            }
            self.grow();
        }
    }

    /// The Robin Hood insertion from slot `i` at distance `dist`; false if a
    /// displaced key ran out of lookups (the table then grows and the
    /// caller inserts `key` again, as `emplace_new_key` does).
    fn place(&mut self, mut i: usize, mut dist: i8, key: u64) -> bool {
        if self.slots[i].0 < 0 {
            self.slots[i] = (dist, key);
            self.len += 1;
            return true;
        }
        let result = i;
        let mut carry = key;
        std::mem::swap(&mut dist, &mut self.slots[i].0);
        std::mem::swap(&mut carry, &mut self.slots[i].1);
        dist += 1;
        i += 1;
        loop {
            if self.slots[i].0 < 0 {
                self.slots[i] = (dist, carry);
                self.len += 1;
                return true;
            } else if self.slots[i].0 < dist {
                std::mem::swap(&mut dist, &mut self.slots[i].0);
                std::mem::swap(&mut carry, &mut self.slots[i].1);
                dist += 1;
            } else {
                dist += 1;
                if dist == self.max_lookups {
                    // `swap(to_insert, result.current->value)`: the key carried
                    // takes the new key's slot; grow, then insert the new key again
                    self.slots[result].1 = carry;
                    return false;
                }
            }
            i += 1;
        }
    }

    /// `grow`: `rehash(max(4, 2 x bucket_count))`, old keys reinserted in slot order.
    fn grow(&mut self) {
        let want = (2 * self.buckets).max(4);
        let num = want
            .max((self.len as f64 / 0.5).ceil() as usize)
            .next_power_of_two();
        let old = std::mem::take(&mut self.slots);
        self.buckets = num;
        self.shift = 64 - num.trailing_zeros();
        self.max_lookups = MIN_LOOKUPS.max(num.trailing_zeros() as i8);
        self.slots = vec![(-1, 0); num + self.max_lookups as usize];
        self.len = 0;
        for (d, k) in old {
            if d >= 0 {
                self.insert(k);
            }
        }
    }

    /// `erase`: backward-shift deletion. True if `key` was there.
    pub fn remove(&mut self, key: u64) -> bool {
        if self.buckets == 0 {
            return false;
        }
        let mut i = self.index(key);
        let mut dist: i8 = 0;
        while self.slots[i].0 >= dist {
            if self.slots[i].1 == key {
                self.slots[i] = (-1, 0);
                while i + 1 < self.slots.len() && self.slots[i + 1].0 > 0 {
                    let (d, k) = self.slots[i + 1];
                    self.slots[i] = (d - 1, k);
                    self.slots[i + 1] = (-1, 0);
                    i += 1;
                }
                self.len -= 1;
                return true;
            }
            i += 1;
            dist += 1;
        }
        false
    }

    /// The keys in iteration (slot) order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().filter(|s| s.0 >= 0).map(|s| s.1)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_pools_iterate_by_their_fibonacci_slot_not_by_insertion() {
        // 4 buckets, shift 62: key 1 -> slot 2, key 2 -> slot 0
        let mut s = SkaSet::default();
        assert!(s.insert(1));
        assert!(s.insert(2));
        assert!(!s.insert(1));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![2, 1]);
        assert!(s.remove(2));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1]);
        assert!(!s.remove(2));
    }

    #[test]
    fn many_keys_are_all_kept_once() {
        let mut s = SkaSet::default();
        for k in 1..200 {
            s.insert(k);
        }
        let mut v: Vec<u64> = s.iter().collect();
        assert_eq!(v.len(), 199);
        v.sort_unstable();
        assert_eq!(v, (1..200).collect::<Vec<_>>());
        for k in (1..200).step_by(2) {
            assert!(s.remove(k));
        }
        assert_eq!(s.iter().count(), 99);
        assert!(s.iter().all(|k| k % 2 == 0));
    }
}
