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
    /// the block it took, before any split: (size, address), the order of
    /// `BlockComparatorSize` within a stream
    pub block: (u64, u64),
    /// the block is a segment created for this malloc
    pub new_segment: bool,
}

/// The most segments a recorded stretch may have created for
/// [`repeats_with_its_segments`] to check it (each is compared with every
/// fit before it; a stretch that grows the cache more is replayed).
pub const MAX_NEW_SEGMENTS: usize = 32;

/// Whether the mallocs of `fits`, made again in the same order from the
/// state they started in plus the segments they created (whole and free),
/// would take the same blocks: no created segment is a better fit, in the
/// `lower_bound` order (size, then address, among blocks of at least the
/// rounded size in the same pool and stream), than the block some earlier
/// malloc took. This holds only for best fit alone: the caller checks that
/// no other rule (oversize blocks, expandable segments, garbage collection,
/// cross-stream uses, releases) took part ([`crate::CachingAllocator::repeats_with_its_segments`]).
pub fn repeats_with_its_segments(fits: &[Fit]) -> bool {
    let created = fits.iter().filter(|f| f.new_segment).count();
    if created > MAX_NEW_SEGMENTS {
        return false;
    }
    fits.iter()
        .enumerate()
        .filter(|(_, f)| f.new_segment)
        .all(|(t, seg)| {
            fits[..t].iter().all(|f| {
                let competes =
                    f.stream == seg.stream && f.small == seg.small && seg.block.0 >= f.size;
                !(competes && seg.block < f.block)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(size: u64, block: (u64, u64), new_segment: bool) -> Fit {
        Fit {
            stream: 0,
            small: false,
            size,
            block,
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

    #[test]
    fn too_many_segments_are_not_checked() {
        let many: Vec<Fit> = (0..=MAX_NEW_SEGMENTS as u64)
            .map(|i| fit(1 << 30, (1 << 30, i << 31), true))
            .collect();
        assert!(!repeats_with_its_segments(&many));
        assert!(repeats_with_its_segments(&many[..MAX_NEW_SEGMENTS]));
    }
}
