//! A device that follows the recording: `cudaMalloc` returns the address the
//! real GPU returned, so the twin's blocks land where the real ones did and
//! addresses can be compared one for one.

use std::collections::HashMap;
use std::rc::Rc;

use vramscope_alloc::{Device, TraceAction};

use crate::Event;

/// Addresses for new segments come from the recorded segment events, in
/// order; a call the recording does not expect gets a fresh address (and the
/// replay reports the divergence). Capacity is unlimited unless given.
#[derive(Debug, Clone)]
pub struct ScriptedDevice {
    script: Rc<[Event]>,
    cursor: usize,
    total: u64,
    capacity: u64,
    used: u64,
    fresh: u64,
    /// Live `cudaMalloc`s by address: their sizes.
    live: HashMap<u64, u64>,
}

impl ScriptedDevice {
    /// Follow `segment_events` (the recording's segment actions, in order) on
    /// a GPU of `total` bytes, of which `capacity` may be used.
    pub fn new(segment_events: Vec<Event>, total: u64, capacity: u64) -> Self {
        Self {
            script: segment_events.into(),
            cursor: 0,
            total,
            capacity,
            used: 0,
            fresh: 0xdead_0000_0000_0000,
            live: HashMap::new(),
        }
    }

    fn take(&mut self, action: TraceAction, size: Option<u64>, addr: Option<u64>) -> Option<u64> {
        let e = self.script.get(self.cursor)?;
        if e.action == action
            && size.is_none_or(|s| s == e.size)
            && addr.is_none_or(|a| a == e.addr)
        {
            self.cursor += 1;
            Some(e.addr)
        } else {
            None
        }
    }

    /// An address past every one used so far; `None` past the address
    /// space (sizes from an untrusted file).
    fn fresh(&mut self, size: u64) -> Option<u64> {
        let a = self.fresh;
        self.fresh = a.checked_add(size.checked_next_multiple_of(2 << 20)?)?;
        Some(a)
    }
}

impl Device for ScriptedDevice {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        let used = self.used.checked_add(size)?;
        if used > self.capacity {
            return None;
        }
        let addr = match self.take(TraceAction::SegmentAlloc, Some(size), None) {
            Some(a) => a,
            None => self.fresh(size)?,
        };
        self.used = used;
        self.live.insert(addr, size);
        Some(addr)
    }
    /// `cudaFree(addr)` gives back the whole allocation `addr` begins, as `SimDevice::free`
    /// does: a split segment's first block names only its own size (the recorded
    /// SEGMENT_FREE carries that size, which is what is matched).
    fn free(&mut self, addr: u64, size: u64) {
        if let Some(whole) = self.live.remove(&addr) {
            self.used -= whole;
        }
        self.take(TraceAction::SegmentFree, Some(size), Some(addr));
    }
    fn reserve(&mut self, size: u64) -> Option<u64> {
        // The first map of a new expandable segment is at its base.
        match self.script.get(self.cursor) {
            Some(e)
                if e.action == TraceAction::SegmentMap && e.addr.checked_add(size).is_some() =>
            {
                Some(e.addr)
            }
            _ => self.fresh(size),
        }
    }
    fn map(&mut self, addr: u64, size: u64) -> bool {
        match self.used.checked_add(size) {
            Some(u) if u <= self.capacity => self.used = u,
            _ => return false,
        }
        self.take(TraceAction::SegmentMap, Some(size), Some(addr));
        true
    }
    fn unmap(&mut self, addr: u64, size: u64) {
        self.used -= size;
        self.take(TraceAction::SegmentUnmap, Some(size), Some(addr));
    }
    fn mem_info(&self) -> (u64, u64) {
        (
            self.capacity.saturating_sub(self.used).min(self.total),
            self.total,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freeing_a_first_block_gives_back_the_whole_allocation() {
        let mut d = ScriptedDevice::new(Vec::new(), 100 << 20, 100 << 20);
        let a = d.malloc(40 << 20).unwrap();
        assert_eq!(d.mem_info().0, 60 << 20);
        // the allocator releases the segment's first 20 MiB block: the driver frees all 40
        d.free(a, 20 << 20);
        assert_eq!(d.mem_info().0, 100 << 20);
        // an address already freed gives nothing back (and does not underflow)
        d.free(a, 20 << 20);
        assert_eq!(d.mem_info().0, 100 << 20);
    }
}
