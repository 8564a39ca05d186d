//! Which CPU tensors glibc's `malloc` serves with their own `mmap`, and how
//! long that mapping is: the host side of the address space `cudaMalloc`'s
//! chunks share (`driver_va.rs`, rule 7).
//!
//! PyTorch's CPU allocator takes `posix_memalign(&p, 64, nbytes)`
//! (`c10/core/impl/alloc_cpu.cpp`, `gAlignment`). In glibc (`malloc/malloc.c`)
//! that is `_int_memalign`, which asks `_int_malloc` for the request plus
//! the alignment plus `MINSIZE`; when no free chunk of the heap holds it,
//! `sysmalloc` maps a chunk of its own when that size is at least
//! `mp_.mmap_threshold`, page-rounded; the 64-byte aligned pointer lies 64
//! bytes into it, the chunk's header 48. Freeing a mapped chunk unmaps it
//! and raises the threshold to the chunk's size when that (with its
//! `IS_MMAPPED` bit, as `chunksize_nomask` reads it) is larger and at most
//! `DEFAULT_MMAP_THRESHOLD_MAX` (32 MiB on 64-bit): glibc's dynamic
//! threshold.
//!
//! The threshold when `from_config` starts is measured
//! ([`FROM_CONFIG_THRESHOLD`]; `validation/malloc_log.c`, evidence in
//! `docs/driver-placement.md`).

// glibc `malloc/malloc.c` (the four below and `THRESHOLD_MAX`), `c10`'s
// `alloc_cpu.cpp` (`TENSOR_ALIGNMENT`).
/// glibc's `SIZE_SZ` on 64-bit.
const SIZE_SZ: u64 = 8;
/// `MALLOC_ALIGN_MASK`: chunks are 16 bytes aligned.
const ALIGN_MASK: u64 = 15;
/// `MINSIZE`.
const MINSIZE: u64 = 32;
/// `c10::gAlignment`.
const TENSOR_ALIGNMENT: u64 = 64;
/// Where the 64-byte aligned pointer lies in a page-aligned mapped chunk:
/// `_int_memalign` moves the chunk from the mapping's start by this much
/// (its `prev_size`), so the chunk's size is the mapping's less it.
const MEMALIGN_SHIFT: u64 = 48;
/// The x86-64 page: every mapping length in the logs is a multiple.
const PAGE: u64 = 4096;
/// `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit.
const THRESHOLD_MAX: u64 = 32 * 1024 * 1024;
/// The threshold when `from_config` makes the model's tensors (Python frees
/// a mapped chunk of this size first): measured, `fixtures/va_maps/mlog`.
pub const FROM_CONFIG_THRESHOLD: u64 = 3_846_144;

/// `request2size`.
fn request2size(req: u64) -> u64 {
    ((req + SIZE_SZ + ALIGN_MASK) & !ALIGN_MASK).max(MINSIZE)
}

/// glibc's dynamic `mmap` threshold over the CPU tensors of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostHeap {
    threshold: u64,
}

impl Default for HostHeap {
    fn default() -> Self {
        HostHeap {
            threshold: FROM_CONFIG_THRESHOLD,
        }
    }
}

impl HostHeap {
    /// The threshold now.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// `posix_memalign(64, nbytes)`: the length of the mapping glibc makes
    /// for it, or `None` when the heap serves it.
    pub fn malloc(&self, nbytes: u64) -> Option<u64> {
        if nbytes == 0 {
            return None;
        }
        let nb = request2size(nbytes).checked_add(TENSOR_ALIGNMENT + MINSIZE)?;
        let nb = request2size(nb);
        (nb >= self.threshold).then(|| (nb + SIZE_SZ).next_multiple_of(PAGE))
    }

    /// `malloc(nbytes)` (a library's own request, not a tensor's aligned
    /// one): the length of the mapping glibc makes for it (`sysmalloc`:
    /// the chunk's size plus `SIZE_SZ`, page-rounded), or `None` when the
    /// heap serves it.
    pub fn malloc_plain(&self, nbytes: u64) -> Option<u64> {
        if nbytes == 0 {
            return None;
        }
        // (a request near 2^64 fails in glibc too; no mapping)
        nbytes.checked_add(SIZE_SZ + ALIGN_MASK + PAGE)?;
        let nb = request2size(nbytes);
        (nb >= self.threshold).then(|| (nb + SIZE_SZ).next_multiple_of(PAGE))
    }

    /// `free` of a mapped chunk whose mapping is `len` bytes: the dynamic
    /// threshold rises to its size when larger and at most 32 MiB.
    pub fn free_mapped(&mut self, len: u64) {
        let chunk = len - MEMALIGN_SHIFT;
        // `chunksize_nomask`: the size with its flag bits, `IS_MMAPPED` (2)
        if chunk | 2 > self.threshold && chunk | 2 <= THRESHOLD_MAX {
            self.threshold = chunk;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_from_the_threshold_up_are_mapped_page_rounded() {
        let h = HostHeap::default();
        // GPT-2's 4 MiB attention masks: mapped, 4198400 bytes (the log's
        // chunk 4198352 plus the 48-byte shift)
        assert_eq!(h.malloc(4 << 20), Some(4_198_400));
        // Qwen2's 6 MiB projections: chunk 6295504
        assert_eq!(h.malloc(6 << 20), Some(6_295_504 + MEMALIGN_SHIFT));
        // a 1 MiB layer norm weight stays in the heap
        assert_eq!(h.malloc(1 << 20), None);
        assert_eq!(h.malloc(0), None);
        // the boundary: the padded size against the threshold
        let at = FROM_CONFIG_THRESHOLD - 120;
        assert!(h.malloc(at).is_some());
        assert!(h.malloc(at - 16).is_none());
    }

    #[test]
    fn a_plain_malloc_maps_its_chunk_and_header_page_rounded() {
        let h = HostHeap::default();
        // libcuda's two requests at the first `pow` kernel: mapped
        // 20119552 and 20279296 bytes (`fixtures/va_maps/mlog`, 38.527 MiB
        // together in `/proc/PID/maps`, `host_built_h200`)
        assert_eq!(h.malloc_plain(20_116_904), Some(20_119_552));
        assert_eq!(h.malloc_plain(20_278_247), Some(20_279_296));
        // below the threshold the heap serves it (chunk 3716512 in the log)
        assert_eq!(h.malloc_plain(3_716_504), None);
        assert_eq!(h.malloc_plain(0), None);
    }

    #[test]
    fn freeing_a_mapped_chunk_raises_the_threshold_up_to_32_mib() {
        let mut h = HostHeap::default();
        let len = h.malloc(6 << 20).unwrap();
        h.free_mapped(len);
        assert_eq!(h.threshold(), 6_295_504);
        // now a 5 MiB tensor goes to the heap
        assert_eq!(h.malloc(5 << 20), None);
        // a smaller chunk leaves it; one over 32 MiB too
        h.free_mapped(h.malloc(64 << 20).map_or(0, |l| l));
        assert_eq!(h.threshold(), 6_295_504);
        h.free_mapped(4_198_400);
        assert_eq!(h.threshold(), 6_295_504);
        // Llama's 31.25 MiB embedding: chunk 32772048 in the log
        h.free_mapped(h.malloc(32_768_000).unwrap());
        assert_eq!(h.threshold(), 32_772_048);
    }
}
