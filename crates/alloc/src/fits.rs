//! The best fits a stretch of mallocs made, and when the same stretch,
//! started again with the segments it created already there, would make
//! the same ones ([`repeats_with_its_segments`]).
//!
//! Why it matters: a training step after the first one frees everything it
//! allocates, so it ends in the state it started in plus the segments it
//! had to create, each whole and free again (free blocks merge with free
//! neighbours at once, and the blocks still live are the ones live at its
//! start). If the next step makes the same requests, it differs from this
//! one only by those segments being there from its start. They change
//! nothing unless one of them is a better fit, for some malloc before the
//! one it was created for, than the block that malloc took. When none is,
//! the next step takes the same blocks, splits them alike and creates no
//! segment: its figures are this step's at this step's final reserved
//! memory, and it ends in the state it started in.

/// A block as `BlockComparatorSize` orders it within a stream and pool:
/// by size, then address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockKey {
    /// its size
    pub size: u64,
    /// its address
    pub address: u64,
}

/// A created segment as [`repeats_with_its_segments`] orders them: by
/// stream, pool, then [`BlockKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SegmentKey {
    stream: u64,
    small: bool,
    block: BlockKey,
}

/// One malloc's best fit, as [`crate::CachingAllocator::record_fits`]
/// keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// the stream it was for
    pub stream: u64,
    /// in the small pool
    pub small: bool,
    /// the rounded size asked for
    pub size: u64,
    /// the block it took, before any split
    pub block: BlockKey,
    /// the block is a segment created for this malloc
    pub new_segment: bool,
}

/// Whether the mallocs of `fits`, made again in the same order from the
/// state they started in plus the segments they created (whole and free),
/// would take the same blocks: no created segment is a better fit, in the
/// `lower_bound` order (size, then address, among blocks of at least the
/// rounded size in the same pool and stream), than the block some earlier
/// malloc took. This holds only for best fit alone: the caller checks that
/// no other rule (oversize blocks, expandable segments, garbage collection,
/// cross-stream uses, releases) took part
/// ([`crate::CachingAllocator::repeats_with_its_segments`]).
///
/// One pass from the last fit back, keeping the segments created after
/// the fit at hand in `lower_bound` order: the one that would compete is
/// the least at or above the fit's size, and it wins if it is below the
/// block the fit took.
pub fn repeats_with_its_segments(fits: &[Fit]) -> bool {
    // the segments created later, in order
    let mut later: Vec<SegmentKey> = Vec::new();
    for f in fits.iter().rev() {
        let key = |block| SegmentKey {
            stream: f.stream,
            small: f.small,
            block,
        };
        if !later.is_empty() {
            let least = key(BlockKey {
                size: f.size,
                address: 0,
            });
            let at = later.partition_point(|k| *k < least);
            let taken = key(f.block);
            if later.get(at).is_some_and(|k| *k < taken) {
                return false;
            }
        }
        if f.new_segment {
            let k = key(f.block);
            let at = later.partition_point(|x| *x < k);
            later.insert(at, k);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(size: u64, (size_taken, address): (u64, u64), new_segment: bool) -> Fit {
        Fit {
            stream: 0,
            small: false,
            size,
            block: BlockKey {
                size: size_taken,
                address,
            },
            new_segment,
        }
    }

    #[test]
    fn a_segment_that_would_have_been_a_better_fit_breaks_the_repeat() {
        // 8 MiB taken from a 10 MiB block, then a 20 MiB segment created
        // for a 12 MiB request: the segment is bigger than the 10 MiB block,
        // so it would not have been chosen for the 8 MiB request
        let later = fit(12 << 20, (20 << 20, 0x1000_0000), true);
        assert!(repeats_with_its_segments(&[
            fit(8 << 20, (10 << 20, 0x2000_0000), false),
            later
        ]));
        // ... but it beats a 40 MiB block the 8 MiB request took
        assert!(!repeats_with_its_segments(&[
            fit(8 << 20, (40 << 20, 0x2000_0000), false),
            later
        ]));
        // a segment too small for the earlier request never competes
        assert!(repeats_with_its_segments(&[
            fit(30 << 20, (40 << 20, 0x2000_0000), false),
            later
        ]));
        // equal sizes: the lower address wins
        let twin = fit(20 << 20, (20 << 20, 0x0800_0000), false);
        assert!(!repeats_with_its_segments(&[
            fit(20 << 20, (20 << 20, 0x2000_0000), false),
            fit(20 << 20, (20 << 20, 0x1000_0000), true),
        ]));
        assert!(repeats_with_its_segments(&[
            twin,
            fit(20 << 20, (20 << 20, 0x1000_0000), true)
        ]));
        // another pool or stream does not compete
        let small = Fit {
            small: true,
            ..fit(8 << 20, (40 << 20, 0x2000_0000), false)
        };
        let other = Fit {
            stream: 7,
            ..fit(8 << 20, (40 << 20, 0x2000_0000), false)
        };
        assert!(repeats_with_its_segments(&[small, other, later]));
        // a segment created earlier is a fit like any other
        assert!(!repeats_with_its_segments(&[
            fit(12 << 20, (20 << 20, 0x3000_0000), true),
            later
        ]));
    }

    /// The rule as stated, each created segment against every fit before it.
    fn by_definition(fits: &[Fit]) -> bool {
        fits.iter()
            .enumerate()
            .filter(|(_, f)| f.new_segment)
            .all(|(t, seg)| {
                fits[..t].iter().all(|f| {
                    let competes =
                        f.stream == seg.stream && f.small == seg.small && seg.block.size >= f.size;
                    !(competes && seg.block < f.block)
                })
            })
    }

    #[test]
    fn the_one_pass_check_is_the_rule() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut yes, mut no) = (0, 0);
        for _ in 0..5000 {
            let fits: Vec<Fit> = (0..1 + next(40))
                .map(|_| {
                    let size = (1 + next(8)) << 20;
                    Fit {
                        stream: next(2),
                        small: next(3) == 0,
                        size,
                        block: BlockKey {
                            size: size + (next(4) << 20),
                            address: next(16) << 24,
                        },
                        new_segment: next(4) == 0,
                    }
                })
                .collect();
            let want = by_definition(&fits);
            assert_eq!(repeats_with_its_segments(&fits), want, "{fits:?}");
            if want {
                yes += 1;
            } else {
                no += 1;
            }
        }
        assert!(yes > 500 && no > 500, "{yes} {no}");
    }
}
