//! The large pool of a [`crate::CachingAllocator`] on its own, for a caller
//! that serves a long run of large requests with nothing else of the
//! allocator's in between ([`crate::CachingAllocator::large_pool`]).
//!
//! The rules are those of `CUDACachingAllocator.cpp` for the large pool of
//! one stream with no events, no stream uses, no expandable segments, no
//! oversize limit (`max_split_size` unlimited) and no garbage collection:
//! `get_free_block` takes the least free block by (size, address) at or above
//! the size; `should_split` splits it when more than 1 MiB remains
//! (`kSmallSize`), the allocated block first (`alloc_found_block`);
//! `free_block` merges the block with its free neighbours of the same
//! segment (`try_merge_blocks`). A request no free block fits is the
//! caller's to serve with [`crate::CachingAllocator::malloc_in_new_segment`],
//! whose new segment it then adds here ([`LargePool::add_segment`]).

use crate::allocator::Moment;
use crate::{Addr, SMALL_SIZE};

const NIL: u32 = u32::MAX;

/// A block of the pool apart: its bytes, address, neighbours in its segment
/// and the bytes last requested of it.
#[derive(Debug, Clone, Copy)]
struct Block {
    addr: Addr,
    size: u64,
    requested: u64,
    prev: u32,
    next: u32,
    allocated: bool,
    /// (free and loose) its entry's index in the loose list
    at: u32,
}

/// A free block's place in the best-fit order: its size, address and name
/// in one number, in that order of significance (sizes and addresses below
/// 2^48, [`key`]).
type Free = u128;

/// The bits of a [`Free`] below the size.
const SIZE_SHIFT: u32 = 80;
/// The most a size or an address may be (2^48, 256 TiB).
const LIMIT: u64 = 1 << 48;

/// A free block's [`Free`] entry.
#[inline]
fn key(size: u64, addr: Addr, id: u32) -> Free {
    debug_assert!(size < LIMIT && addr < LIMIT);
    (u128::from(size) << SIZE_SHIFT) | (u128::from(addr) << 32) | u128::from(id)
}

/// The size, address and name of a [`Free`] entry.
#[inline]
fn unkey(f: Free) -> (u64, Addr, u32) {
    (
        (f >> SIZE_SHIFT) as u64,
        ((f >> 32) as u64) & (LIMIT - 1),
        f as u32,
    )
}

/// The number of entries of `free` below `k` (branch-free: the entries
/// compared are unpredictable).
#[inline]
fn lower_bound(free: &[Free], k: Free) -> usize {
    let mut base = 0;
    let mut n = free.len();
    if n == 0 {
        return 0;
    }
    while n > 1 {
        let half = n / 2;
        base = if free[base + half - 1] < k {
            base + half
        } else {
            base
        };
        n -= half;
    }
    base + usize::from(free[base] < k)
}

/// A block the pool handed out: its name here, its address and its bytes
/// (the request's rounded size, or the whole free block where the rest is
/// not split off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeBlock {
    /// the pool's name for it ([`LargePool::free`])
    pub id: u32,
    /// device address
    pub addr: Addr,
    /// bytes
    pub bytes: u64,
}

/// The large pool: its blocks (linked within their segments, as the
/// allocator's are) and its free blocks by (size, address), in two lists
/// split at a size (`tier`): those at or above it in best-fit order, those
/// below it in no order. A malloc of `tier` bytes or more (a decode step's
/// `cat`s) looks at the first list only, and the free blocks too small for
/// it (the rests of splits, the holes a freed cache block leaves) come and
/// go from the second without moving the others.
#[derive(Debug, Clone, Default)]
pub struct LargePool {
    blocks: Vec<Block>,
    /// blocks deleted by merges, for reuse
    spare: Vec<u32>,
    /// the free blocks of `tier` bytes or more, in best-fit order
    free: Vec<Free>,
    /// the free blocks below `tier` bytes, each at its block's `at`
    loose: Vec<Free>,
    /// the size the lists are split at: the largest malloc's
    tier: u64,
    /// a count bumped whenever the free blocks change
    changes: u64,
    /// the least free block put in or taken out since [`Self::take_low`]
    /// (`None` where none)
    low: Option<Free>,
}

/// Where a free block's entry is: in the ordered list at this index, or
/// in the loose one.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Ordered(usize),
    Loose(usize),
}

impl LargePool {
    /// The pool of `segments`, each the (address, size, allocated, bytes
    /// requested) of its blocks in address order; `None` where a segment's
    /// blocks are not contiguous or two free blocks neighbour.
    pub(crate) fn new(segments: &[Vec<(Addr, u64, bool, u64)>]) -> Option<LargePool> {
        let mut p = LargePool::default();
        for seg in segments {
            let mut prev = NIL;
            for &(addr, size, allocated, requested) in seg {
                let id = p.blocks.len() as u32;
                if addr >= LIMIT || size >= LIMIT {
                    return None;
                }
                if prev != NIL {
                    let b = p.blocks[prev as usize];
                    if b.addr + b.size != addr || (!b.allocated && !allocated) {
                        return None;
                    }
                    p.blocks[prev as usize].next = id;
                }
                p.blocks.push(Block {
                    addr,
                    size,
                    requested,
                    prev,
                    next: NIL,
                    allocated,
                    at: 0,
                });
                if !allocated {
                    p.free.push(key(size, addr, id));
                }
                prev = id;
            }
        }
        p.free.sort_unstable();
        Some(p)
    }

    /// The allocated blocks: (address, name). (A block a merge deleted is
    /// free.)
    pub fn allocated_blocks(&self) -> impl Iterator<Item = (Addr, u32)> + '_ {
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.allocated)
            .map(|(i, b)| (b.addr, i as u32))
    }

    /// The free blocks as (size, address), in best-fit order.
    pub fn free_blocks(&self) -> impl Iterator<Item = (u64, Addr)> + '_ {
        let mut all: Vec<Free> = self.loose.iter().chain(&self.free).copied().collect();
        all.sort_unstable();
        all.into_iter().map(|f| {
            let (size, addr, _) = unkey(f);
            (size, addr)
        })
    }

    /// A count that changes whenever the free blocks change.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The least free block, as (size, address), put in or taken out since
    /// the last call (`None` where none). Where it lies above the block
    /// [`Self::fit_for_a_moment`] found, the same call finds it again: the
    /// free blocks from the size up to that one are the same.
    pub fn take_low(&mut self) -> Option<(u64, Addr)> {
        self.low.take().map(|f| {
            let (size, addr, _) = unkey(f);
            (size, addr)
        })
    }

    /// Note free block `f` put in or taken out.
    #[inline]
    fn touched(&mut self, f: Free) {
        if self.low.is_none_or(|l| f < l) {
            self.low = Some(f);
        }
    }

    /// `malloc` of `size` bytes (rounded, above 1 MiB) of which `requested`
    /// were asked for: the block best fit takes, split as `should_split`
    /// says; `None` when no free block fits.
    #[inline]
    pub fn malloc(&mut self, size: u64, requested: u64) -> Option<LargeBlock> {
        if size >= LIMIT {
            return None;
        }
        if size > self.tier {
            self.raise(size);
        }
        let (at, f) = self.best(key(size, 0, 0), size)?;
        let (fsize, faddr, fid) = unkey(f);
        self.changes += 1;
        let remaining = fsize - size;
        if remaining > SMALL_SIZE {
            // the allocated block first, the rest keeps the free block's name
            let prev = self.blocks[fid as usize].prev;
            let id = self.new_block(Block {
                addr: faddr,
                size,
                requested,
                prev,
                next: fid,
                allocated: true,
                at: 0,
            });
            if prev != NIL {
                self.blocks[prev as usize].next = id;
            }
            let r = &mut self.blocks[fid as usize];
            r.prev = id;
            r.addr += size;
            r.size = remaining;
            let rest = key(remaining, faddr + size, fid);
            match at {
                // (smaller than it was: its place is at or before `i`, found
                // by moving the entries above it one by one)
                Entry::Ordered(i) if remaining >= self.tier => {
                    let mut m = i;
                    while m > 0 && self.free[m - 1] > rest {
                        self.free[m] = self.free[m - 1];
                        m -= 1;
                    }
                    self.free[m] = rest;
                }
                Entry::Ordered(i) => {
                    self.free.remove(i);
                    self.put_loose(rest);
                }
                Entry::Loose(j) => self.loose[j] = rest,
            }
            self.touched(rest);
            Some(LargeBlock {
                id,
                addr: faddr,
                bytes: size,
            })
        } else {
            self.touched(f);
            self.remove(at);
            let b = &mut self.blocks[fid as usize];
            b.allocated = true;
            b.requested = requested;
            Some(LargeBlock {
                id: fid,
                addr: faddr,
                bytes: fsize,
            })
        }
    }

    /// The least free block at or above `k` (a key of `size` bytes), and
    /// where its entry is: the first of the ordered list from there, or
    /// one of the loose blocks where they may fit.
    #[inline]
    fn best(&self, k: Free, size: u64) -> Option<(Entry, Free)> {
        let i = lower_bound(&self.free, k);
        let mut best = self.free.get(i).map(|&f| (Entry::Ordered(i), f));
        if size < self.tier {
            for (j, &f) in self.loose.iter().enumerate() {
                if f >= k && best.is_none_or(|b| f < b.1) {
                    best = Some((Entry::Loose(j), f));
                }
            }
        }
        best
    }

    /// Split the lists at `tier` bytes from now (above the last split):
    /// the ordered blocks below it become loose.
    #[inline(never)]
    fn raise(&mut self, tier: u64) {
        self.tier = tier;
        let n = self.free.partition_point(|&f| unkey(f).0 < tier);
        let below: Vec<Free> = self.free.drain(..n).collect();
        for f in below {
            self.put_loose(f);
        }
    }

    /// Put `f` in the loose list.
    #[inline]
    fn put_loose(&mut self, f: Free) {
        self.blocks[f as u32 as usize].at = self.loose.len() as u32;
        self.loose.push(f);
    }

    /// Put `f` in its list.
    #[inline]
    fn put(&mut self, f: Free) {
        match unkey(f).0 >= self.tier {
            true => self.insert(f),
            false => self.put_loose(f),
        }
    }

    /// Take out the entry `at`.
    #[inline]
    fn remove(&mut self, at: Entry) {
        match at {
            Entry::Ordered(i) => {
                self.free.remove(i);
            }
            Entry::Loose(j) => {
                self.loose.swap_remove(j);
                if let Some(&moved) = self.loose.get(j) {
                    self.blocks[moved as u32 as usize].at = j as u32;
                }
            }
        }
    }

    /// Where free block `id`'s entry `f` is.
    #[inline]
    fn entry_of(&self, id: u32, f: Free) -> Entry {
        match unkey(f).0 >= self.tier {
            true => Entry::Ordered(lower_bound(&self.free, f)),
            false => Entry::Loose(self.blocks[id as usize].at as usize),
        }
    }

    /// `free` of block `id`: merged with its free neighbours; its bytes and
    /// the bytes requested of it, or `None` where it is not allocated.
    #[inline]
    pub fn free(&mut self, id: u32) -> Option<(u64, u64)> {
        let b = *self.blocks.get(id as usize).filter(|b| b.allocated)?;
        self.changes += 1;
        let (mut addr, mut size, mut prev, mut next) = (b.addr, b.size, b.prev, b.next);
        // the least entry of a free neighbour merged in
        let mut low = Free::MAX;
        // (an ordered entry of the previous neighbour left in place, where
        // the merged block takes it: [`Self::raise_at`])
        let mut left = None;
        if prev != NIL && !self.blocks[prev as usize].allocated {
            let p = self.blocks[prev as usize];
            let k = key(p.size, p.addr, prev);
            match self.entry_of(prev, k) {
                Entry::Ordered(i) => left = Some(i),
                e => self.remove(e),
            }
            low = k;
            self.spare.push(prev);
            addr = p.addr;
            size += p.size;
            prev = p.prev;
            if prev != NIL {
                self.blocks[prev as usize].next = id;
            }
        }
        if next != NIL && !self.blocks[next as usize].allocated {
            let n = self.blocks[next as usize];
            let k = key(n.size, n.addr, next);
            if let Some(i) = left.take() {
                // (not kept: the next entry's index may pass it)
                self.free.remove(i);
            }
            self.remove(self.entry_of(next, k));
            low = low.min(k);
            self.spare.push(next);
            size += n.size;
            next = n.next;
            if next != NIL {
                self.blocks[next as usize].prev = id;
            }
        }
        let m = &mut self.blocks[id as usize];
        *m = Block {
            addr,
            size,
            requested: b.requested,
            prev,
            next,
            allocated: false,
            at: 0,
        };
        // (the merged block is larger than either free neighbour it takes in)
        let f = key(size, addr, id);
        self.touched(low.min(f));
        match left {
            // (the merged block is larger than the entry it takes: at or
            // above the tier, and after it in the order)
            Some(i) => self.raise_at(i, f),
            None => self.put(f),
        }
        Some((b.size, b.requested))
    }

    /// Add a new segment of `size` bytes at `addr` whose first `first` bytes
    /// (rounded) the request that made it holds, `requested` of them asked
    /// for (`alloc_block`, then `alloc_found_block` on the whole segment):
    /// that block.
    pub fn add_segment(
        &mut self,
        addr: Addr,
        size: u64,
        first: u64,
        requested: u64,
    ) -> Option<LargeBlock> {
        if addr.checked_add(size)? >= LIMIT {
            return None;
        }
        let split = size - first > SMALL_SIZE;
        let bytes = if split { first } else { size };
        let id = self.new_block(Block {
            addr,
            size: bytes,
            requested,
            prev: NIL,
            next: NIL,
            allocated: true,
            at: 0,
        });
        if split {
            let rest = self.new_block(Block {
                addr: addr + first,
                size: size - first,
                requested: 0,
                prev: id,
                next: NIL,
                allocated: false,
                at: 0,
            });
            self.blocks[id as usize].next = rest;
            let f = key(size - first, addr + first, rest);
            self.put(f);
            self.touched(f);
            self.changes += 1;
        }
        Some(LargeBlock { id, addr, bytes })
    }

    /// [`crate::CachingAllocator::fit_for_a_moment`] of a large request of
    /// `size` bytes (rounded) in this pool, the large blocks of `open`
    /// handed out before it the same way and not freed.
    pub fn fit_for_a_moment(&self, size: u64, open: &[Moment]) -> Option<Moment> {
        let taken = |k: (u64, Addr)| open.iter().any(|m| !m.small && m.took == k);
        if size >= LIMIT {
            return None;
        }
        let k0 = key(size, 0, 0);
        let unk = |f: Free| {
            let (size, addr, _) = unkey(f);
            (size, addr)
        };
        let mut found = self.free[lower_bound(&self.free, k0)..]
            .iter()
            .map(|&f| unk(f))
            .find(|&k| !taken(k));
        if size < self.tier {
            for k in self.loose.iter().filter(|&&f| f >= k0).map(|&f| unk(f)) {
                if !taken(k) && found.is_none_or(|f| k < f) {
                    found = Some(k);
                }
            }
        }
        for rest in open.iter().filter(|m| !m.small).filter_map(|m| m.rest) {
            if rest.0 >= size && !taken(rest) && found.is_none_or(|f| rest < f) {
                found = Some(rest);
            }
        }
        let (bytes, addr) = found?;
        let remaining = bytes - size;
        let split = remaining > SMALL_SIZE;
        Some(Moment {
            bytes: if split { size } else { bytes },
            took: (bytes, addr),
            rest: split.then_some((remaining, addr + size)),
            small: false,
        })
    }

    fn new_block(&mut self, b: Block) -> u32 {
        match self.spare.pop() {
            Some(id) => {
                self.blocks[id as usize] = b;
                id
            }
            None => {
                self.blocks.push(b);
                self.blocks.len() as u32 - 1
            }
        }
    }

    /// Put `f` in the ordered list in place of its entry `i`, which is less:
    /// the entries after it and less than `f` move down one by one.
    #[inline]
    fn raise_at(&mut self, mut i: usize, f: Free) {
        while i + 1 < self.free.len() && self.free[i + 1] < f {
            self.free[i] = self.free[i + 1];
            i += 1;
        }
        self.free[i] = f;
    }

    /// Insert `f` in its place in the ordered list, moving the later ones
    /// one by one (a freed block is most often among the largest: few are
    /// later).
    #[inline]
    fn insert(&mut self, f: Free) {
        self.free.push(f);
        // (on a slice of its own: its start and length are not read again
        // from the pool at each move)
        let s = self.free.as_mut_slice();
        let mut j = s.len() - 1;
        while j > 0 && s[j - 1] > f {
            s[j] = s[j - 1];
            j -= 1;
        }
        s[j] = f;
    }
}

#[cfg(test)]
mod tests {
    use crate::{get_allocation_size, AllocatorConfig, CachingAllocator, Moment};

    use vramscope_testkit::XorShift as Rng;

    /// A large request: sizes between 1 and 10 MiB (20 MiB segments), near
    /// a growing size (a cache's `cat`s), or at most 1 MiB above one.
    fn size(rng: &mut Rng, grow: u64) -> u64 {
        match rng.next() % 4 {
            0 => (1 << 20) + 1 + rng.next() % (9 << 20),
            1 => (1 << 20) + 1 + rng.next() % (1 << 20),
            _ => grow + rng.next() % (2 << 20),
        }
    }

    /// The free large blocks of `a`, as (size, address) in order.
    fn twin_free(a: &CachingAllocator) -> Vec<(u64, u64)> {
        let mut free: Vec<(u64, u64)> = a
            .snapshot()
            .iter()
            .filter(|s| s.is_large)
            .flat_map(|s| s.blocks.iter().filter(|b| !b.allocated))
            .map(|b| (b.size, b.address))
            .collect();
        free.sort_unstable();
        free
    }

    /// Random large mallocs and frees served by the allocator twin, and by
    /// the large pool apart (new segments from a second twin): the same
    /// addresses and bytes, the same free blocks after each request, the
    /// same answers of `fit_for_a_moment` (with up to three open blocks).
    #[test]
    fn the_large_pool_apart_places_as_the_allocator_does() {
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut a = CachingAllocator::new(AllocatorConfig::default());
            let mut grow = (12 << 20) + (rng.next() % 64) * 512;
            // some blocks before (a small one too: the pools are apart)
            a.malloc(4096, 0).unwrap();
            let mut live = Vec::new();
            for _ in 0..rng.next() % 20 {
                let s = size(&mut rng, grow);
                live.push(a.malloc(s, 0).unwrap());
            }
            for _ in 0..rng.next() % 8 {
                let at = (rng.next() % live.len().max(1) as u64) as usize;
                if at < live.len() {
                    a.free(live.swap_remove(at)).unwrap();
                }
            }
            let mut b = a.clone();
            let mut pool = b.large_pool(0).expect("a plain large pool");
            let ids: std::collections::HashMap<u64, u32> = pool.allocated_blocks().collect();
            let mut live: Vec<(u64, u32)> = live.into_iter().map(|x| (x, ids[&x])).collect();
            assert_eq!(pool.free_blocks().collect::<Vec<_>>(), twin_free(&a));
            for _ in 0..500 {
                if live.is_empty() || rng.next() % 100 < 50 {
                    grow += 16 << 10;
                    let s = size(&mut rng, grow);
                    let rounded = a.round_size(s);
                    // what a moment would take, with open blocks before it
                    let mut open: Vec<Moment> = Vec::new();
                    for _ in 0..rng.next() % 4 {
                        let t = a.round_size(size(&mut rng, grow));
                        let (Some(m), mt) = (
                            pool.fit_for_a_moment(t, &open),
                            a.fit_for_a_moment(t, 0, &open),
                        ) else {
                            assert_eq!(a.fit_for_a_moment(t, 0, &open), None, "seed {seed}");
                            break;
                        };
                        assert_eq!(Some(m), mt, "seed {seed}");
                        open.push(m);
                    }
                    let h = a.malloc_handle(s, 0).unwrap();
                    let got = match pool.malloc(rounded, s) {
                        Some(x) => x,
                        None => {
                            let h = b.malloc_in_new_segment(s, 0).unwrap();
                            let seg = get_allocation_size(rounded, b.config().large_segment_size);
                            pool.add_segment(h.addr(), seg, rounded, s).unwrap()
                        }
                    };
                    let twin_bytes = a
                        .snapshot()
                        .iter()
                        .flat_map(|g| g.blocks.clone())
                        .find(|x| x.address == h.addr())
                        .unwrap()
                        .size;
                    assert_eq!((got.addr, got.bytes), (h.addr(), twin_bytes), "seed {seed}");
                    live.push((h.addr(), got.id));
                } else {
                    let (addr, id) = live.swap_remove((rng.next() % live.len() as u64) as usize);
                    a.free(addr).unwrap();
                    assert!(pool.free(id).is_some());
                    assert!(pool.free(id).is_none(), "freed twice");
                }
                assert_eq!(
                    pool.free_blocks().collect::<Vec<_>>(),
                    twin_free(&a),
                    "seed {seed}"
                );
            }
            assert_eq!(
                a.stats().reserved_bytes.all().current,
                b.stats().reserved_bytes.all().current
            );
        }
    }

    /// An answer of `fit_for_a_moment` (with up to two open blocks) kept
    /// while [`super::LargePool::take_low`] lies above the block it found
    /// (an answer of none: while nothing changed) is the pool's answer
    /// again after random mallocs, frees and new segments.
    #[test]
    fn a_moments_fit_holds_while_no_block_below_it_changes() {
        let (mut kept, mut dropped) = (0, 0);
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut pool = super::LargePool::default();
            let mut next_seg = 1u64 << 40;
            let mut live: Vec<u32> = Vec::new();
            let mut memo: Vec<(u64, Vec<Moment>, Option<Moment>)> = Vec::new();
            let mut grow = 12u64 << 20;
            for _ in 0..600 {
                if live.is_empty() || rng.next() % 100 < 55 {
                    grow += 16 << 10;
                    let s = 512 * size(&mut rng, grow).div_ceil(512);
                    let b = match pool.malloc(s, s) {
                        Some(b) => b,
                        None => {
                            let seg = 2 * s.div_ceil(2 << 20) * (2 << 20);
                            next_seg += seg + (rng.next() % 3) * (2 << 20);
                            pool.add_segment(next_seg, seg, s, s).unwrap()
                        }
                    };
                    live.push(b.id);
                } else {
                    let id = live.swap_remove((rng.next() % live.len() as u64) as usize);
                    pool.free(id).unwrap();
                }
                if let Some(low) = pool.take_low() {
                    let n = memo.len();
                    memo.retain(|e| e.2.is_some_and(|m| m.took < low));
                    dropped += n - memo.len();
                }
                for (s, open, m) in &memo {
                    assert_eq!(pool.fit_for_a_moment(*s, open), *m, "seed {seed}");
                    kept += 1;
                }
                let mut open = Vec::new();
                for _ in 0..rng.next() % 3 {
                    match pool.fit_for_a_moment(512 * size(&mut rng, grow).div_ceil(512), &open) {
                        Some(m) => open.push(m),
                        None => break,
                    }
                }
                let s = 512 * size(&mut rng, grow).div_ceil(512);
                memo.push((s, open.clone(), pool.fit_for_a_moment(s, &open)));
                if memo.len() > 8 {
                    memo.remove(0);
                }
            }
        }
        // (some kept across changes, some dropped)
        assert!(kept > 1000 && dropped > 1000, "{kept} {dropped}");
    }

    /// Not apart where the pool is not plain.
    #[test]
    fn a_pool_with_an_oversize_limit_is_not_apart() {
        let a = CachingAllocator::new(AllocatorConfig::parse("max_split_size_mb:100").unwrap());
        assert!(a.large_pool(0).is_none());
        let a = CachingAllocator::new(AllocatorConfig::parse("expandable_segments:True").unwrap());
        assert!(a.large_pool(0).is_none());
        assert!(CachingAllocator::new(AllocatorConfig::default())
            .large_pool(0)
            .is_some());
    }
}
