//! The set of free blocks of a pool, in `BlockComparatorSize` order
//! (stream, then size, then address).
//!
//! Layout, and why: a pool holds few free blocks (a training step's working
//! set: tens to hundreds), and every malloc/free does one to three finds,
//! inserts or removes. A sorted vector per stream would pay for each of them
//! a binary search with unpredictable branches plus a `memmove` of half the
//! vector. Here each stream's blocks are segregated by
//! size class into small buckets (TLSF-style: each power of two split in
//! four), with a bitmap of the non-empty ones:
//!
//! - the class of a size is a non-decreasing function of the size, so the
//!   (size, address) order of the whole set is: bucket by bucket, and within
//!   a bucket by (size, address);
//! - a bucket is kept sorted in *descending* (size, address) order, so its
//!   least entry, the one best fit takes, is last: the common lookup reads
//!   one entry and the common removal is a pop. Inserting and removing
//!   elsewhere moves the entries after the spot within one small bucket.
//!   An insert first compares the new entry with the bucket's least: two
//!   inserts in three land there (half of them in an empty bucket) and stop.
//!   Else, into a bucket of up to 32 entries it walks up from the least,
//!   moving each lesser entry down as it goes; into a larger one it takes a
//!   binary search and a `memmove`. A removal finds its entry (the least
//!   first, then walking up from it in buckets of up to 32, by binary
//!   search above) and moves the entries after it up: one by one when at
//!   most 8 follow it, else with a `memmove` (a `memmove` call for a
//!   handful of entries cost more than the moves);
//! - `lower_bound(size)` takes the least (size, address) at or above `size`
//!   in the size's own bucket, or the least of the next non-empty bucket,
//!   found with one `trailing_zeros` on the bitmap.
//!
//! The buckets are inline in their stream's set and the default stream's
//! set inline here (a bucket's header at a fixed offset, no pointer to
//! follow), and insert and removal test the least entry with one
//! comparison: the sweep spends its time in dependent loads and
//! mispredicted branches here. The measurements behind this layout are in
//! `docs/performance.md`.

/// A free block's key: (size, address, block id); the stream is the set it
/// lives in.
pub(crate) type Entry = (u64, u64, u32);

/// Size classes: sizes under 512 bytes share class 0; from there each power
/// of two is split in four, up to 2^64 (class 220).
const BUCKETS: usize = 256;
const WORDS: usize = BUCKETS / 64;

/// The size class of `size`; non-decreasing in `size`.
#[inline]
fn bucket_of(size: u64) -> usize {
    if size < 512 {
        return 0;
    }
    let log = 63 - size.leading_zeros(); // >= 9
    let quarter = (size >> (log - 2)) & 3; // the two bits after the leading one
    1 + ((log - 9) * 4) as usize + quarter as usize
}

/// (size, address) as one number, for branch-free comparisons.
#[inline]
fn key(e: &Entry) -> u128 {
    ((e.0 as u128) << 64) | e.1 as u128
}

/// The free blocks of one stream.
#[derive(Debug, Clone)]
struct StreamSet {
    stream: u64,
    /// Bit b is set when `buckets[b]` is not empty.
    nonempty: [u64; WORDS],
    /// `BUCKETS` vectors, each holding the blocks of one size class in
    /// *descending* (size, address) order: the least, which best fit takes,
    /// is last.
    buckets: [Vec<Entry>; BUCKETS],
}

impl StreamSet {
    fn new(stream: u64) -> Self {
        Self {
            stream,
            nonempty: [0; WORDS],
            buckets: std::array::from_fn(|_| Vec::new()),
        }
    }

    /// The first non-empty bucket at or after `from`.
    #[inline]
    fn next_bucket(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        if w >= WORDS {
            return None;
        }
        let mut bits = self.nonempty[w] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            if w == WORDS {
                return None;
            }
            bits = self.nonempty[w];
        }
    }

    /// Its entries in (size, address) order (for the rare whole-set walks).
    fn sorted(&self) -> Vec<Entry> {
        self.buckets
            .iter()
            .flat_map(|v| v.iter().rev().copied())
            .collect()
    }
}

/// Where `k` sits in a bucket (descending order): the number of entries
/// whose key is above it.
#[inline]
fn rank(v: &[Entry], k: u128) -> usize {
    if v.len() <= 32 {
        // from the least up: a new block is most often among the least
        let mut i = v.len();
        while i > 0 && key(&v[i - 1]) <= k {
            i -= 1;
        }
        return i;
    }
    v.partition_point(|e| key(e) > k)
}

/// Remove entry `at` of bucket `b`, `v`, clearing its bit in `nonempty`
/// when it empties.
#[inline(always)]
fn take(v: &mut Vec<Entry>, nonempty: &mut [u64; WORDS], b: usize, at: usize) {
    // (`Vec::remove` calls `memmove` even for the last entry, which best
    // fit most often takes)
    let n = v.len();
    debug_assert!(at < n, "a cursor past its bucket");
    if n - at - 1 <= 8 {
        // (at most 8 entries after it, moved up one by one: most often
        // none, the least taken by best fit; on the slice, as in `insert`)
        let w = v.as_mut_slice();
        for i in at..n - 1 {
            w[i] = w[i + 1];
        }
        v.pop();
    } else {
        v.remove(at);
    }
    // (without a branch: whether the bucket empties was, by callgrind's
    // branch model on the sweep bench, the set's most mispredicted branch
    // after insert's walk)
    nonempty[b / 64] &= !((v.is_empty() as u64) << (b % 64));
}

/// A position in the set: (stream index, bucket, index in the bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    stream: u32,
    bucket: u32,
    at: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct FreeSet {
    /// The default stream's set (index 0), inline: every find, insert and
    /// removal of a replay, which uses no other stream, reaches its bucket
    /// at a fixed offset rather than through the pointer of a vector of
    /// sets.
    zero: StreamSet,
    /// The other streams' sets (indices from 1), sorted by stream.
    others: Vec<StreamSet>,
    len: usize,
}

impl Default for FreeSet {
    fn default() -> Self {
        Self {
            zero: StreamSet::new(0),
            others: Vec::new(),
            len: 0,
        }
    }
}

impl FreeSet {
    /// The set of a stream, by index (0 is the default stream's, which
    /// always exists; an empty set finds nothing, as no set does).
    #[inline]
    fn stream_index(&self, stream: u64) -> Option<usize> {
        if stream == 0 {
            return Some(0);
        }
        self.others
            .iter()
            .position(|s| s.stream == stream)
            .map(|i| i + 1)
    }

    #[inline]
    fn set(&self, i: usize) -> &StreamSet {
        match i {
            0 => &self.zero,
            _ => &self.others[i - 1],
        }
    }

    #[inline]
    fn set_mut(&mut self, i: usize) -> &mut StreamSet {
        match i {
            0 => &mut self.zero,
            _ => &mut self.others[i - 1],
        }
    }

    /// Every stream's set, in stream order.
    fn sets(&self) -> impl Iterator<Item = &StreamSet> {
        std::iter::once(&self.zero).chain(&self.others)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Empty, keeping the buckets' capacity (an empty stream's set finds
    /// nothing, as no set does).
    pub(crate) fn clear(&mut self) {
        for s in std::iter::once(&mut self.zero).chain(&mut self.others) {
            s.buckets.iter_mut().for_each(Vec::clear);
            s.nonempty = [0; WORDS];
        }
        self.len = 0;
    }

    /// A set for a stream not seen before: its index. Apart from the hot
    /// `insert` (its 256 empty buckets are built on the stack, and a frame
    /// that large is probed page by page on every call that has it).
    #[cold]
    #[inline(never)]
    fn add_stream(&mut self, stream: u64) -> usize {
        debug_assert!(stream != 0, "the default stream's set always exists");
        let at = self.others.partition_point(|s| s.stream < stream);
        self.others.insert(at, StreamSet::new(stream));
        at + 1
    }

    #[inline]
    pub(crate) fn insert(&mut self, stream: u64, size: u64, addr: u64, id: u32) {
        let si = match self.stream_index(stream) {
            Some(i) => i,
            None => self.add_stream(stream),
        };
        let s = self.set_mut(si);
        let b = bucket_of(size);
        let v = &mut s.buckets[b];
        let e = (size, addr, id);
        let k = key(&e);
        v.push(e);
        let w = v.as_mut_slice();
        let n = w.len() - 1;
        // Most often (two inserts in three on the sweep bench, half of them
        // into an empty bucket, counted with a throwaway probe) the new
        // entry is the least and stays where it was pushed:
        // one comparison, with the entry before it or, in an empty bucket,
        // with itself, tells (the keys are unique), so that a single branch
        // decides it (the walk's first step mispredicted about once an
        // insert).
        if key(&w[n.saturating_sub(1)]) >= k {
            debug_assert!(n == 0 || key(&w[n - 1]) != k, "block {id} inserted twice");
        } else if n <= 32 {
            // one pass from the least up, moving the lesser entries down
            // as it goes (a `memmove` call for a few entries cost more than
            // the moves); on the slice, whose length the loop's bounds
            // checks can see (through the `Vec` they reloaded its length
            // and buffer at every step)
            let mut i = n;
            while i > 0 && key(&w[i - 1]) < k {
                w[i] = w[i - 1];
                i -= 1;
            }
            debug_assert!(i == 0 || key(&w[i - 1]) != k, "block {id} inserted twice");
            w[i] = e;
        } else {
            v.pop();
            let at = rank(v, k);
            debug_assert!(
                v.get(at).is_none_or(|x| key(x) != k),
                "block {id} inserted twice"
            );
            v.insert(at, e);
        }
        s.nonempty[b / 64] |= 1 << (b % 64);
        self.len += 1;
    }

    /// Remove block `id`, whose key is (stream, size, address); `false` when
    /// it is not in the set.
    #[inline]
    pub(crate) fn remove(&mut self, stream: u64, size: u64, addr: u64, id: u32) -> bool {
        let Some(si) = self.stream_index(stream) else {
            return false;
        };
        let b = bucket_of(size);
        let s = self.set_mut(si);
        let v = &mut s.buckets[b];
        let e = (size, addr, id);
        // the least first, as in `insert`
        let at = match v.last() {
            Some(least) if *least == e => v.len() - 1,
            _ => rank(v, key(&e)),
        };
        if v.get(at) != Some(&e) {
            return false;
        }
        // (here rather than through `remove_at`, which would find the
        // stream's set and the bucket again)
        take(v, &mut s.nonempty, b, at);
        self.len -= 1;
        true
    }

    pub(crate) fn contains(&self, stream: u64, size: u64, addr: u64) -> bool {
        let Some(si) = self.stream_index(stream) else {
            return false;
        };
        let v = &self.set(si).buckets[bucket_of(size)];
        let k = ((size as u128) << 64) | addr as u128;
        v.get(rank(v, k)).is_some_and(|e| key(e) == k)
    }

    /// The first block of `stream` with size >= `size` (`lower_bound`).
    #[inline]
    pub(crate) fn lower_bound(&self, stream: u64, size: u64) -> Option<Cursor> {
        let si = self.stream_index(stream)?;
        let s = self.set(si);
        let mut b = bucket_of(size);
        let v = &s.buckets[b];
        let floor = (size as u128) << 64;
        // the entries at or above `floor` are a prefix; its last is the least
        let above = match v.last() {
            Some(least) if key(least) >= floor => v.len(),
            _ => floor.checked_sub(1).map_or(v.len(), |k| rank(v, k)),
        };
        let at = match above {
            0 => {
                // Every later bucket holds only larger sizes: take its least.
                b = s.next_bucket(b + 1)?;
                s.buckets[b].len() - 1
            }
            n => n - 1,
        };
        Some(Cursor {
            stream: si as u32,
            bucket: b as u32,
            at: at as u32,
        })
    }

    /// The entry at a cursor.
    #[inline]
    pub(crate) fn get(&self, c: Cursor) -> Entry {
        self.set(c.stream as usize).buckets[c.bucket as usize][c.at as usize]
    }

    /// The position after `c` in (size, address) order, in the same stream.
    #[inline]
    pub(crate) fn next(&self, c: Cursor) -> Option<Cursor> {
        if c.at > 0 {
            return Some(Cursor { at: c.at - 1, ..c });
        }
        let s = self.set(c.stream as usize);
        let b = s.next_bucket(c.bucket as usize + 1)?;
        Some(Cursor {
            bucket: b as u32,
            at: (s.buckets[b].len() - 1) as u32,
            ..c
        })
    }

    /// Remove the entry at a cursor.
    #[inline]
    pub(crate) fn remove_at(&mut self, c: Cursor) {
        let s = self.set_mut(c.stream as usize);
        take(
            &mut s.buckets[c.bucket as usize],
            &mut s.nonempty,
            c.bucket as usize,
            c.at as usize,
        );
        self.len -= 1;
    }

    /// The first block of `stream` with size >= `size` (`lower_bound`).
    pub(crate) fn first_from(&self, stream: u64, size: u64) -> Option<Entry> {
        self.lower_bound(stream, size).map(|c| self.get(c))
    }

    /// Blocks of `stream` with size < `size`, largest first (walking back
    /// from `lower_bound`).
    pub(crate) fn before(&self, stream: u64, size: u64) -> Vec<Entry> {
        let Some(si) = self.stream_index(stream) else {
            return Vec::new();
        };
        let mut v = self.set(si).sorted();
        v.retain(|e| e.0 < size);
        v.reverse();
        v
    }

    /// Block ids in (stream, size, address) order.
    pub(crate) fn ids(&self) -> Vec<u32> {
        self.sets()
            .flat_map(|s| s.sorted().into_iter().map(|e| e.2))
            .collect()
    }

    pub(crate) fn max_size(&self) -> Option<u64> {
        self.sets()
            .filter_map(|s| {
                let b = (0..BUCKETS).rev().find(|&b| !s.buckets[b].is_empty())?;
                s.buckets[b].first().map(|e| e.0)
            })
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::{bucket_of, FreeSet};

    #[test]
    fn order_is_stream_size_address() {
        let mut f = FreeSet::default();
        f.insert(1, 100, 5, 0);
        f.insert(0, 300, 1, 1);
        f.insert(0, 100, 9, 2);
        f.insert(0, 100, 3, 3);
        assert_eq!(f.ids(), vec![3, 2, 1, 0]);
        assert_eq!(f.first_from(0, 101), Some((300, 1, 1)));
        assert_eq!(f.first_from(0, 100), Some((100, 3, 3)));
        assert_eq!(f.first_from(1, 101), None);
        assert_eq!(f.before(0, 300), vec![(100, 9, 2), (100, 3, 3)]);
        assert!(f.remove(0, 100, 3, 3));
        assert!(!f.remove(0, 100, 3, 3));
        assert!(f.contains(0, 100, 9));
        assert!(f.contains(1, 100, 5));
        assert_eq!(f.len(), 3);
        assert_eq!(f.max_size(), Some(300));
    }

    #[test]
    fn buckets_follow_size_order() {
        let mut prev = 0;
        for size in (0..1 << 16).chain((16..64).flat_map(|s| {
            let p = 1u64 << s;
            [p - 1, p, p + 1, p + p / 4, p + p / 2, p + 3 * (p / 4)]
        })) {
            let b = bucket_of(size);
            assert!(b >= prev && b < super::BUCKETS, "{size}");
            prev = b;
        }
        assert_eq!(bucket_of(u64::MAX), 220);
    }

    #[test]
    fn walks_in_order_through_inserts_and_removes() {
        let mut f = FreeSet::default();
        let mut want = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for id in 0..3000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 == 1 && !want.is_empty() {
                let e: (u64, u64, u32) = want.swap_remove((x as usize / 3) % want.len());
                assert!(f.remove(0, e.0, e.1, e.2));
            } else {
                // Few distinct sizes, so buckets hold several equal ones.
                let size = [512, 700, 4096, 1 << 20, 5 << 20, 1 << 30][(x >> 40) as usize % 6];
                let e = (size, (x >> 20) << 9, id);
                f.insert(0, e.0, e.1, e.2);
                want.push(e);
            }
            if id % 97 == 96 {
                want.sort();
                let mut got = Vec::new();
                let mut c = f.lower_bound(0, 0);
                while let Some(cur) = c {
                    got.push(f.get(cur));
                    c = f.next(cur);
                }
                assert_eq!(got, want);
                for probe in [0, 512, 513, 4096, 4097, 1 << 30, (1 << 30) + 1] {
                    let first = want.iter().find(|e| e.0 >= probe).copied();
                    assert_eq!(f.first_from(0, probe), first);
                    let mut before: Vec<_> = want.iter().filter(|e| e.0 < probe).copied().collect();
                    before.reverse();
                    assert_eq!(f.before(0, probe), before);
                }
                assert_eq!(f.ids(), want.iter().map(|e| e.2).collect::<Vec<_>>());
                assert_eq!(f.len(), want.len());
                assert_eq!(f.max_size(), want.iter().map(|e| e.0).max());
            }
        }
    }
}
