//! The small pool of a [`crate::CachingAllocator`] on its own: its free
//! blocks as a plain sorted list that can be read back and set, for a caller
//! that serves a long run of small requests many of which start from a pool
//! it has seen before ([`crate::CachingAllocator::small_pool`]).
//!
//! The rules are those of `CUDACachingAllocator.cpp` for the small pool of
//! one stream with no events, no stream uses and no expandable segments:
//! `get_free_block` takes the least free block by (size, address) at or above
//! the size; `should_split` splits it when 512 bytes or more remain
//! (`kMinBlockSize`), the allocated block first (`alloc_found_block`);
//! `free_block` merges the block with its free neighbours of the same
//! segment (`try_merge_blocks`). No block of the small pool can be "oversize"
//! (`max_split_size` is above 20 MiB), so the oversize checks never apply. A
//! request no free block fits is the caller's to serve with
//! [`crate::CachingAllocator::malloc_in_new_segment`], whose new segment it
//! then adds here ([`SmallPool::add_segment`]).

use crate::Addr;

/// A free block of the small pool: its address, size and segment (an index
/// into the pool's segments, in the order they were added). Its size fits
/// 32 bits: a small block lies in a segment of `kSmallBuffer` (2 MiB), and
/// 16 bytes a block keep the list and its moves short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FreeBlock {
    /// device address
    pub addr: Addr,
    /// bytes
    pub size: u32,
    /// the segment it lies in
    pub segment: u32,
}

/// The small pool: its segments and its free blocks.
///
/// The free blocks are kept in address order: a split leaves the rest of a
/// block where the block was, and a free finds its neighbours next to its
/// place, so most requests change one entry in place; best fit is one pass
/// over the few free blocks (the first of the least size at or above the
/// request is the least by (size, address)).
#[derive(Debug, Clone, Default)]
pub struct SmallPool {
    /// (address, size, index) of each segment, by address
    segments: Vec<(Addr, u64, u32)>,
    /// the start and end of each segment, by index
    bounds: Vec<(Addr, Addr)>,
    /// the free blocks, by address
    free: Vec<FreeBlock>,
}

impl SmallPool {
    /// A pool of `segments` ((address, size), in the order they were made)
    /// and the free blocks `free` (in any order), or `None` where a free
    /// block lies outside its segment.
    pub(crate) fn new(segments: &[(Addr, u64)], free: Vec<FreeBlock>) -> Option<SmallPool> {
        let mut p = SmallPool::default();
        for &(a, s) in segments {
            p.push_segment(a, s);
        }
        for f in &free {
            let &(a, s, _) = p.segments.iter().find(|x| x.2 == f.segment)?;
            if f.addr < a || f.addr + u64::from(f.size) > a + s {
                return None;
            }
        }
        p.free = free;
        p.free.sort_unstable_by_key(|f| f.addr);
        Some(p)
    }

    fn push_segment(&mut self, addr: Addr, size: u64) -> u32 {
        let id = self.segments.len() as u32;
        let at = self.segments.partition_point(|s| s.0 < addr);
        self.segments.insert(at, (addr, size, id));
        self.bounds.push((addr, addr + size));
        id
    }

    /// The free blocks, by address: with the segments, the whole state the
    /// pool's future placements depend on.
    pub fn free_blocks(&self) -> &[FreeBlock] {
        &self.free
    }

    /// Set the free blocks to `free`, a list [`Self::free_blocks`] returned
    /// for this pool (its segments are only ever added to).
    pub fn set_free_blocks(&mut self, free: &[FreeBlock]) {
        self.free.clear();
        self.free.extend_from_slice(free);
    }

    /// `malloc` of `size` bytes, already rounded (`round_size`, at most
    /// 1 MiB): the address and size of the block best fit takes, split as
    /// `should_split` says; `None` when no free block fits.
    #[inline]
    pub fn malloc(&mut self, size: u64) -> Option<(Addr, u64)> {
        let size = u32::try_from(size).ok()?;
        // the first (lowest address) of the least size at or above `size`
        let (mut best, mut best_size) = (usize::MAX, u32::MAX);
        for (i, f) in self.free.iter().enumerate() {
            let better = f.size >= size && f.size < best_size;
            best = if better { i } else { best };
            best_size = if better { f.size } else { best_size };
        }
        let f = *self.free.get(best)?;
        let rest = f.size - size;
        if u64::from(rest) >= crate::MIN_BLOCK_SIZE {
            // (the rest stays where the block was in address order)
            let r = &mut self.free[best];
            r.addr += u64::from(size);
            r.size = rest;
            Some((f.addr, u64::from(size)))
        } else {
            self.remove(best);
            Some((f.addr, u64::from(f.size)))
        }
    }

    /// `free` of the allocated block at `addr` of `size` bytes (one this
    /// pool handed out): merged with its free neighbours in its segment.
    /// (Inlined where called: a served chunk's frees, 870,000 at 70B.)
    #[inline(always)]
    pub fn free(&mut self, addr: Addr, size: u64) {
        let end = addr + size;
        let size = size as u32;
        // its place in address order: the free blocks before it
        let i: usize = self.free.iter().map(|f| usize::from(f.addr < addr)).sum();
        // (a neighbour ending at `addr` is in its segment where that
        // segment goes on past `addr`; one starting at `end`, where its
        // segment starts at or below `addr`)
        let before = i > 0 && {
            let p = &self.free[i - 1];
            p.addr + u64::from(p.size) == addr && addr < self.bounds[p.segment as usize].1
        };
        let after = self
            .free
            .get(i)
            .is_some_and(|n| n.addr == end && self.bounds[n.segment as usize].0 <= addr);
        match (before, after) {
            (true, true) => {
                let n = self.free[i].size;
                self.free[i - 1].size += size + n;
                self.remove(i);
            }
            (true, false) => self.free[i - 1].size += size,
            (false, true) => {
                let n = &mut self.free[i];
                n.addr = addr;
                n.size += size;
            }
            (false, false) => {
                // (most often a neighbour's)
                let near = |j: usize| {
                    self.free.get(j).map(|f| f.segment).filter(|&g| {
                        let (a, e) = self.bounds[g as usize];
                        a <= addr && addr < e
                    })
                };
                let segment = near(i.wrapping_sub(1))
                    .or_else(|| near(i))
                    .unwrap_or_else(|| self.segment_of(addr));
                self.insert_at(
                    i,
                    FreeBlock {
                        size,
                        addr,
                        segment,
                    },
                )
            }
        }
    }

    /// Add a new segment of `size` bytes (at most 4 GiB: a small segment is
    /// 2 MiB) at `addr` whose first `first` bytes the request that made it
    /// holds (`alloc_block`, then `alloc_found_block` on the whole
    /// segment); `None` where it is larger.
    pub fn add_segment(&mut self, addr: Addr, size: u64, first: u64) -> Option<()> {
        let rest = u32::try_from(size.checked_sub(first)?).ok()?;
        let seg = self.push_segment(addr, size);
        if u64::from(rest) >= crate::MIN_BLOCK_SIZE {
            let at = addr + first;
            let i = self.free.partition_point(|f| f.addr < at);
            self.insert_at(
                i,
                FreeBlock {
                    size: rest,
                    addr: at,
                    segment: seg,
                },
            );
        }
        Some(())
    }

    /// The number of segments.
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    fn segment_of(&self, addr: Addr) -> u32 {
        let i = self.segments.partition_point(|s| s.0 <= addr);
        self.segments[i.saturating_sub(1)].2
    }

    /// Insert `f` at `i`, moving the later ones one by one (the list is
    /// short, and a `memmove` call costs more than the moves).
    fn insert_at(&mut self, i: usize, f: FreeBlock) {
        self.free.push(f);
        let mut j = self.free.len() - 1;
        while j > i {
            self.free[j] = self.free[j - 1];
            j -= 1;
        }
        self.free[i] = f;
    }

    /// Remove free block `i`, moving the later ones one by one.
    fn remove(&mut self, i: usize) {
        for j in i..self.free.len() - 1 {
            self.free[j] = self.free[j + 1];
        }
        self.free.pop();
    }
}

#[cfg(test)]
mod tests {
    use crate::{AllocatorConfig, CachingAllocator, MIN_BLOCK_SIZE, SMALL_SIZE};

    use vramscope_testkit::XorShift as Rng;

    /// Random small mallocs and frees served by the allocator twin, and by
    /// the small pool apart (new segments from a second twin): the same
    /// addresses, the same segments, the same free blocks at the end.
    #[test]
    fn the_small_pool_apart_places_as_the_allocator_does() {
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut a = CachingAllocator::new(AllocatorConfig::default());
            // (a large block first: the pools are apart)
            a.malloc(30 << 20, 0).unwrap();
            let mut live = Vec::new();
            for _ in 0..rng.next() % 30 {
                let size = 1 + rng.next() % SMALL_SIZE;
                live.push((a.malloc(size, 0).unwrap(), a.round_size(size)));
            }
            let mut b = a.clone();
            let mut pool = b.small_pool(0).expect("a plain small pool");
            for _ in 0..600 {
                if live.is_empty() || rng.next() % 100 < 52 {
                    // mostly small sizes, some near the 1 MiB limit
                    let size = match rng.next() % 4 {
                        0 => SMALL_SIZE - rng.next() % (64 << 10),
                        _ => 1 + rng.next() % (200 << 10),
                    };
                    let got = a.malloc(size, 0).unwrap();
                    let rounded = a.round_size(size);
                    let (addr, bytes) = match pool.malloc(rounded) {
                        Some(x) => x,
                        None => {
                            let h = b.malloc_in_new_segment(size, 0).unwrap();
                            pool.add_segment(h.addr(), crate::SMALL_BUFFER, rounded)
                                .unwrap();
                            (h.addr(), rounded)
                        }
                    };
                    assert_eq!((addr, bytes), (got, rounded), "seed {seed}");
                    live.push((got, rounded));
                } else {
                    let (addr, size) = live.swap_remove((rng.next() % live.len() as u64) as usize);
                    a.free(addr).unwrap();
                    pool.free(addr, size);
                }
            }
            assert_eq!(
                a.stats().reserved_bytes.all().current,
                b.stats().reserved_bytes.all().current
            );
            let mut free: Vec<(u64, u64)> = a
                .snapshot()
                .iter()
                .filter(|s| !s.is_large)
                .flat_map(|s| s.blocks.iter().filter(|b| !b.allocated))
                .map(|b| (b.size, b.address))
                .collect();
            free.sort_unstable();
            let mut ours: Vec<(u64, u64)> = pool
                .free_blocks()
                .iter()
                .map(|f| (u64::from(f.size), f.addr))
                .collect();
            assert!(pool.free_blocks().windows(2).all(|w| w[0].addr < w[1].addr));
            ours.sort_unstable();
            assert_eq!(free, ours, "seed {seed}");
            assert!(ours.iter().all(|f| f.0 % MIN_BLOCK_SIZE == 0));
            // (a segment whose rest does not fit a block's 32-bit size)
            assert_eq!(pool.add_segment(1 << 45, 1 << 33, 512), None);
        }
    }
}
