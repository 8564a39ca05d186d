//! A vector stored in chunks of 64 Ki items, for the arrays that grow with
//! the number of trace entries (millions of items).
//!
//! A `Vec` doubles its buffer as it grows; whether the old buffer is copied
//! and kept until freed depends on the global allocator (glibc moves large
//! buffers with `mremap`, mimalloc and others copy), so a big `Vec` can
//! briefly need 1.5 to 2 times its size. Chunks are never reallocated once
//! full, so the peak memory of a read is the data itself, whatever the
//! allocator.

use std::ops::{Index, IndexMut};

const BITS: u32 = 16;
const CHUNK: usize = 1 << BITS;
const MASK: usize = CHUNK - 1;

/// A growable array of `T` in fixed-size chunks.
///
/// Item `i` lives at position `start + i` of a virtual array cut into
/// chunks of [`CHUNK`] positions; every chunk but the last is full, and the
/// first one lacks its first `start` positions (after [`Self::split_front`]).
/// The first chunk is a field of its own: the items most looked up (the
/// memo's frames and keys, stored first) are one load away, as in a `Vec`.
#[derive(Clone, Debug)]
pub(crate) struct ChunkedVec<T> {
    first: Vec<T>,
    rest: Vec<Vec<T>>,
    start: usize,
    len: usize,
}

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        ChunkedVec {
            first: Vec::new(),
            rest: Vec::new(),
            start: 0,
            len: 0,
        }
    }
}

impl<T> ChunkedVec<T> {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of chunks.
    fn chunks(&self) -> usize {
        if self.len == 0 {
            0
        } else {
            ((self.start + self.len - 1) >> BITS) + 1
        }
    }

    /// Append `n` copies of `x` (a chunk at a time).
    #[cfg(test)]
    pub(crate) fn extend_fill(&mut self, n: usize, x: T)
    where
        T: Copy,
    {
        let mut left = n;
        while left > 0 {
            let j = self.start + self.len;
            let k = left.min(CHUNK - (j & MASK));
            if j < CHUNK {
                self.first.resize(self.first.len() + k, x);
            } else {
                let c = (j >> BITS) - 1;
                if c == self.rest.len() {
                    self.rest.push(Vec::with_capacity(CHUNK));
                }
                let v = &mut self.rest[c];
                v.resize(v.len() + k, x);
            }
            self.len += k;
            left -= k;
        }
    }

    /// Append copies of `xs` (a chunk at a time).
    #[cfg(test)]
    pub(crate) fn extend_from_slice(&mut self, mut xs: &[T])
    where
        T: Copy,
    {
        while !xs.is_empty() {
            let j = self.start + self.len;
            let (a, b) = xs.split_at(xs.len().min(CHUNK - (j & MASK)));
            if j < CHUNK {
                self.first.extend_from_slice(a);
            } else {
                let c = (j >> BITS) - 1;
                if c == self.rest.len() {
                    self.rest.push(Vec::with_capacity(CHUNK));
                }
                self.rest[c].extend_from_slice(a);
            }
            self.len += a.len();
            xs = b;
        }
    }

    /// Append the items of `parts`, in order, on up to `threads` threads:
    /// the chunk being filled is filled here, each later chunk is made
    /// whole on a thread (which touches its memory first). `fix(k, xs)`
    /// is called on the items `xs` just copied from part `k`, in place.
    pub(crate) fn extend_par(
        &mut self,
        parts: &[&ChunkedVec<T>],
        threads: usize,
        fix: &(dyn Fn(usize, &mut [T]) + Sync),
    ) where
        T: Copy + Send + Sync,
    {
        // the source slices, each with its part and where it starts among
        // the items appended
        let mut srcs: Vec<(usize, usize, &[T])> = Vec::new();
        let mut total = 0usize;
        for (k, p) in parts.iter().enumerate() {
            for sl in p.slices() {
                srcs.push((k, total, sl));
                total += sl.len();
            }
        }
        // items `from..to` of those appended, copied onto the end of `v`
        let copy = |v: &mut Vec<T>, from: usize, to: usize| {
            let i = srcs.partition_point(|&(_, at, sl)| at + sl.len() <= from);
            for &(k, at, sl) in &srcs[i..] {
                if at >= to {
                    break;
                }
                let a = from.max(at) - at;
                let b = to.min(at + sl.len()) - at;
                let n = v.len();
                v.extend_from_slice(&sl[a..b]);
                fix(k, &mut v[n..]);
            }
        };
        if self.len == 0 {
            *self = Self::default();
        }
        // the chunk being filled, here
        let j = self.start + self.len;
        let head = if j & MASK == 0 {
            0
        } else {
            (CHUNK - (j & MASK)).min(total)
        };
        if head > 0 {
            if j < CHUNK {
                copy(&mut self.first, 0, head);
            } else {
                let c = (j >> BITS) - 1;
                if c == self.rest.len() {
                    self.rest.push(Vec::with_capacity(CHUNK));
                }
                copy(&mut self.rest[c], 0, head);
            }
            self.len += head;
        }
        // the later chunks, whole, on the threads
        let n = (total - head).div_ceil(CHUNK);
        let mut chunks: Vec<Vec<T>> = (0..n).map(|_| Vec::new()).collect();
        let make = |q: usize, v: &mut Vec<T>| {
            let from = head + q * CHUNK;
            *v = Vec::with_capacity(CHUNK);
            copy(v, from, (from + CHUNK).min(total));
        };
        let per = n.div_ceil(threads.max(1)).max(1);
        if n <= per {
            for (q, v) in chunks.iter_mut().enumerate() {
                make(q, v);
            }
        } else {
            std::thread::scope(|s| {
                for (t, vs) in chunks.chunks_mut(per).enumerate() {
                    let make = &make;
                    s.spawn(move || {
                        for (q, v) in vs.iter_mut().enumerate() {
                            make(t * per + q, v);
                        }
                    });
                }
            });
        }
        for v in chunks {
            self.len += v.len();
            if j == 0 && self.first.is_empty() {
                self.first = v;
            } else {
                self.rest.push(v);
            }
        }
    }

    /// The items, as slices in order.
    pub(crate) fn slices(&self) -> impl Iterator<Item = &[T]> {
        std::iter::once(&self.first[..])
            .chain(self.rest.iter().map(|c| &c[..]))
            .filter(|c| !c.is_empty())
    }

    /// Room for `n` more items in the first chunk (at most a chunk's).
    pub(crate) fn reserve_first(&mut self, n: usize) {
        if self.start + self.len < CHUNK {
            self.first.reserve(n.min(CHUNK - self.start - self.len));
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, x: T) {
        let j = self.start + self.len;
        if j < CHUNK {
            // The first chunk grows as a small Vec would.
            self.first.push(x);
        } else {
            let c = (j >> BITS) - 1;
            if c == self.rest.len() {
                // The others are allocated whole.
                self.rest.push(Vec::with_capacity(CHUNK));
            }
            self.rest[c].push(x);
        }
        self.len += 1;
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let x = match self.rest.last_mut() {
            Some(c) => {
                let x = c.pop();
                if c.is_empty() {
                    self.rest.pop();
                }
                x
            }
            None => self.first.pop(),
        };
        if self.len == 0 {
            self.start = 0;
        }
        x
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        let j = self.start + i;
        if j < CHUNK {
            self.first.get(j - self.start)
        } else {
            self.rest.get((j >> BITS) - 1)?.get(j & MASK)
        }
    }

    #[inline]
    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let j = self.start + i;
        if j < CHUNK {
            self.first.get_mut(j - self.start)
        } else {
            self.rest.get_mut((j >> BITS) - 1)?.get_mut(j & MASK)
        }
    }

    /// Keep the first `n` items.
    pub(crate) fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        if n == 0 {
            *self = Self::default();
            return;
        }
        let j = self.start + n;
        if j <= CHUNK {
            self.rest.clear();
            self.first.truncate(j - self.start);
        } else {
            let c = (j - 1) >> BITS;
            self.rest.truncate(c);
            if let Some(l) = self.rest.last_mut() {
                l.truncate(((j - 1) & MASK) + 1);
            }
        }
        self.len = n;
    }

    pub(crate) fn iter(&self) -> Iter<'_, T> {
        self.first.iter().chain(self.rest.iter().flatten())
    }

    /// Items the allocated chunks can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.first.capacity() + self.rest.iter().map(Vec::capacity).sum::<usize>()
    }

    /// Free the spare room of the last chunk.
    pub(crate) fn shrink_to_fit(&mut self) {
        match self.rest.last_mut() {
            Some(c) => c.shrink_to_fit(),
            None => self.first.shrink_to_fit(),
        }
    }
}

/// Iterator over a [`ChunkedVec`].
pub(crate) type Iter<'a, T> =
    std::iter::Chain<std::slice::Iter<'a, T>, std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>>;

impl<T: Clone> ChunkedVec<T> {
    /// Split off the first `n` items and return them; `self` keeps the
    /// rest. Whole chunks move; only the chunk cut in two is copied.
    pub(crate) fn split_front(&mut self, n: usize) -> Self {
        if n >= self.len {
            return std::mem::take(self);
        }
        if n == 0 {
            return Self::default();
        }
        let nchunks = self.chunks();
        let mut all: Vec<Vec<T>> = Vec::with_capacity(nchunks);
        all.push(std::mem::take(&mut self.first));
        all.append(&mut self.rest);
        let j = self.start + n;
        let (ci, off) = (j >> BITS, j & MASK);
        let mut head: Vec<Vec<T>> = all.drain(..ci).collect();
        if off > 0 {
            // Chunk `ci` (now the first) is cut: its first part goes ahead.
            let cut = if ci == 0 { off - self.start } else { off };
            let c0 = &mut all[0];
            head.push(c0[..cut].to_vec());
            c0.drain(..cut);
        }
        let mut head = head.into_iter();
        let front = ChunkedVec {
            first: head.next().unwrap_or_default(),
            rest: head.collect(),
            start: self.start,
            len: n,
        };
        let mut all = all.into_iter();
        self.first = all.next().unwrap_or_default();
        self.rest = all.collect();
        self.start = off;
        self.len -= n;
        front
    }
}

impl<T> Index<usize> for ChunkedVec<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        match self.get(i) {
            Some(x) => x,
            None => panic!("index {i} out of range ({} items)", self.len),
        }
    }
}

impl<T> IndexMut<usize> for ChunkedVec<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        let len = self.len;
        match self.get_mut(i) {
            Some(x) => x,
            None => panic!("index {i} out of range ({len} items)"),
        }
    }
}

impl<T> FromIterator<T> for ChunkedVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v = ChunkedVec::default();
        for x in iter {
            v.push(x);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_from_slice_is_pushes_and_slices_are_the_items() {
        let mut c: ChunkedVec<u32> = ChunkedVec::default();
        let mut v: Vec<u32> = Vec::new();
        for n in [3usize, CHUNK - 1, 2 * CHUNK + 5, 0, 9] {
            let xs: Vec<u32> = (0..n as u32).map(|i| i ^ n as u32).collect();
            c.extend_from_slice(&xs);
            v.extend_from_slice(&xs);
        }
        assert_eq!(c.len(), v.len());
        assert!(c.iter().eq(v.iter()));
        assert!(c.slices().flatten().eq(v.iter()));
        let mut d = c.clone();
        let front = d.split_front(CHUNK + 3);
        assert!(front.slices().flatten().eq(v[..CHUNK + 3].iter()));
        assert!(d.slices().flatten().eq(v[CHUNK + 3..].iter()));
    }

    #[test]
    fn extend_par_is_extend_from_slice_with_the_fix() {
        // parts of several chunks and none, onto empty, partial and split
        // vectors, on 1 and 3 threads
        let sizes = [5usize, 0, CHUNK + 7, 2 * CHUNK, 3, CHUNK - 1];
        let parts: Vec<ChunkedVec<u32>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let mut c = ChunkedVec::default();
                c.extend_fill(n, k as u32 * 10);
                c
            })
            .collect();
        let refs: Vec<&ChunkedVec<u32>> = parts.iter().collect();
        for before in [0usize, 9, CHUNK, CHUNK + 2] {
            for split in [0usize, 4] {
                for threads in [1, 3] {
                    let mut c: ChunkedVec<u32> = ChunkedVec::default();
                    c.extend_fill(before + split, 1);
                    let _ = c.split_front(split);
                    let mut v: Vec<u32> = c.iter().copied().collect();
                    c.extend_par(&refs, threads, &|k, xs| {
                        for x in xs {
                            *x += k as u32;
                        }
                    });
                    for (k, p) in parts.iter().enumerate() {
                        v.extend(p.iter().map(|x| x + k as u32));
                    }
                    assert_eq!(c.len(), v.len());
                    assert!(c.iter().eq(v.iter()), "{before} {split} {threads}");
                    for i in [0, v.len() / 2, v.len() - 1] {
                        assert_eq!(c.get(i), v.get(i));
                    }
                    c.push(77);
                    assert_eq!(c.get(v.len()), Some(&77));
                }
            }
        }
    }

    #[test]
    fn extend_fill_is_pushes_across_chunks() {
        let mut c: ChunkedVec<u32> = ChunkedVec::default();
        let mut v: Vec<u32> = Vec::new();
        for (k, n) in [
            (1u32, 5usize),
            (2, CHUNK - 3),
            (3, 2 * CHUNK + 1),
            (4, 0),
            (5, 7),
        ] {
            c.extend_fill(n, k);
            v.extend(std::iter::repeat_n(k, n));
            c.push(9);
            v.push(9);
        }
        assert_eq!(c.len(), v.len());
        assert!(c.iter().eq(v.iter()));
    }

    #[test]
    fn behaves_like_a_vec_across_chunks() {
        let n = 3 * CHUNK + 17;
        let mut c: ChunkedVec<u64> = ChunkedVec::default();
        let mut v: Vec<u64> = Vec::new();
        for i in 0..n as u64 {
            c.push(i * 3);
            v.push(i * 3);
        }
        assert_eq!(c.len(), n);
        assert!(c.iter().eq(v.iter()));
        assert_eq!(c.iter().next_back(), v.last());
        for i in [0, 1, CHUNK - 1, CHUNK, 2 * CHUNK + 5, n - 1] {
            assert_eq!(c[i], v[i]);
            assert_eq!(c.get(i), v.get(i));
        }
        assert_eq!(c.get(n), None);
        c[CHUNK] = 7;
        c[CHUNK + 1] = 8;
        assert_eq!((c[CHUNK], c[CHUNK + 1]), (7, 8));
        c.truncate(CHUNK + 2);
        assert_eq!(c.len(), CHUNK + 2);
        assert_eq!(c.pop(), Some(8));
        assert_eq!(c.pop(), Some(7));
        assert_eq!(c.len(), CHUNK);
        assert_eq!(c.pop(), Some(v[CHUNK - 1]));
        c.truncate(0);
        assert!(c.is_empty());
        assert_eq!(c.pop(), None);
        for _ in 0..5 {
            c.push(1);
        }
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), [1; 5]);
        assert!(c.capacity() >= 5);
    }

    #[test]
    fn split_front_moves_chunks_and_keeps_indexing() {
        let n = 4 * CHUNK + 100;
        for cuts in [
            vec![10, CHUNK, 3],
            vec![CHUNK - 1, 1, CHUNK + 7, 5],
            vec![2 * CHUNK, 0, CHUNK / 2],
            vec![n],
        ] {
            let mut rest: ChunkedVec<usize> = (0..n).collect();
            let mut at = 0;
            for cut in cuts {
                let mut front = rest.split_front(cut);
                let cut = cut.min(n - at);
                assert_eq!(front.len(), cut);
                assert!(front.iter().copied().eq(at..at + cut));
                for i in [0, cut / 2, cut.saturating_sub(1)] {
                    if i < cut {
                        assert_eq!(front[i], at + i);
                    }
                }
                // Both halves still grow and index correctly.
                front.push(usize::MAX);
                assert_eq!(front[cut], usize::MAX);
                assert_eq!(front.get(cut + 1), None);
                at += cut;
                assert_eq!(rest.len(), n - at);
                assert!(rest.iter().copied().eq(at..n));
                for i in [0, 1, CHUNK - 2, CHUNK + 3, rest.len().saturating_sub(1)] {
                    if i < rest.len() {
                        assert_eq!(rest[i], at + i);
                        assert_eq!(rest.get(i), Some(&(at + i)));
                    }
                }
            }
            let l = rest.len();
            rest.push(7);
            assert_eq!(rest[l], 7);
            rest.truncate(l / 2);
            assert!(rest.iter().copied().eq(at..at + l / 2));
        }
    }
}
