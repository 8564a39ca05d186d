//! One device's trace, stored compactly.
//!
//! A big snapshot holds millions of trace entries, and the fields that
//! change from entry to entry are few: the address, the size, the time and
//! the stack. Each entry is therefore stored as a 32-byte row holding those
//! four, plus the index of its *kind*: the distinct combination of the
//! fields that rarely change (action, stream, `device_free`,
//! `compile_context`, `user_metadata`, which optional fields are present).
//! A training trace has a handful of kinds, so a million entries cost 32 MB
//! (a plain struct per entry: 88 MB).
//!
//! [`Trace::get`] and [`Trace::iter`] hand out whole [`TraceEntry`] values.

use std::collections::HashMap;
use std::fmt;

use vramscope_alloc::TraceAction;

use crate::chunked::ChunkedVec;
use crate::model::{StackId, Sym};

/// One recorded allocator event, as a value (see [`Trace`] for storage).
///
/// Field names follow PyTorch's `TraceEntry` (`c10/cuda/CUDACachingAllocator.h`)
/// and the keys `torch/csrc/cuda/memory_snapshot.cpp` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceEntry {
    /// What happened; `None` for an action string PyTorch 2.11 does not
    /// write (it is kept verbatim in [`TraceEntry::other_action`]).
    pub action: Option<TraceAction>,
    /// The action string when [`TraceEntry::action`] is `None`.
    pub other_action: Option<Sym>,
    /// Address (0 when absent, e.g. on `oom` entries, which carry `device_free`).
    pub addr: u64,
    /// Size in bytes (the requested size for `alloc` and the frees).
    pub size: u64,
    /// CUDA stream.
    pub stream: u64,
    /// Timestamp in microseconds (PyTorch 2.1+).
    pub time_us: Option<i64>,
    /// Free device memory reported by an `oom` entry.
    pub device_free: Option<u64>,
    /// Stack of the event ([`StackId::EMPTY`] when not recorded).
    pub frames: StackId,
    /// `compile_context` (torch.compile context string), when present.
    pub compile_context: Option<Sym>,
    /// `user_metadata`, when present.
    pub user_metadata: Option<Sym>,
}

impl TraceEntry {
    /// An entry with only the four fields the allocator itself records
    /// (action, address, size, stream); everything else absent.
    pub fn new(action: TraceAction, addr: u64, size: u64, stream: u64) -> Self {
        TraceEntry {
            action: Some(action),
            other_action: None,
            addr,
            size,
            stream,
            time_us: None,
            device_free: None,
            frames: StackId::EMPTY,
            compile_context: None,
            user_metadata: None,
        }
    }

    /// The wire name of a known action (`"alloc"`, ...); `None` for an
    /// unknown one (resolve [`TraceEntry::other_action`] instead).
    pub fn action_str(&self) -> Option<&'static str> {
        self.action.map(TraceAction::as_str)
    }
}

/// No symbol / no action.
const NIL: u32 = u32::MAX;

/// The fields of an entry that rarely change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Kind {
    /// Index into `ACTIONS`, or `NIL` for an unknown action.
    action: u32,
    other_action: u32,
    compile_context: u32,
    user_metadata: u32,
    stream: u64,
    device_free: Option<u64>,
    has_time: bool,
}

const ACTIONS: [TraceAction; 9] = [
    TraceAction::Alloc,
    TraceAction::FreeRequested,
    TraceAction::FreeCompleted,
    TraceAction::SegmentAlloc,
    TraceAction::SegmentFree,
    TraceAction::SegmentMap,
    TraceAction::SegmentUnmap,
    TraceAction::Oom,
    TraceAction::Snapshot,
];

fn action_index(a: TraceAction) -> u32 {
    match a {
        TraceAction::Alloc => 0,
        TraceAction::FreeRequested => 1,
        TraceAction::FreeCompleted => 2,
        TraceAction::SegmentAlloc => 3,
        TraceAction::SegmentFree => 4,
        TraceAction::SegmentMap => 5,
        TraceAction::SegmentUnmap => 6,
        TraceAction::Oom => 7,
        TraceAction::Snapshot => 8,
    }
}

fn sym(s: Option<Sym>) -> u32 {
    s.map_or(NIL, |s| s.0)
}

fn opt_sym(s: u32) -> Option<Sym> {
    (s != NIL).then_some(Sym(s))
}

impl Kind {
    fn of(e: &TraceEntry) -> Kind {
        Kind {
            action: e.action.map_or(NIL, action_index),
            other_action: if e.action.is_some() {
                NIL
            } else {
                sym(e.other_action)
            },
            compile_context: sym(e.compile_context),
            user_metadata: sym(e.user_metadata),
            stream: e.stream,
            device_free: e.device_free,
            has_time: e.time_us.is_some(),
        }
    }
}

/// The fields of an entry that change from entry to entry, as stored:
/// 24 bytes. `sk` holds the size (low 48 bits) and the kind (high 16);
/// `tf` the time as an offset from the trace's first time (low 40 bits,
/// signed: about ±17 days) and the stack (high 24 bits). An entry whose
/// fields do not fit (a size of 256 TiB or more, 65535 kinds or more, 16 M
/// stacks or more, times weeks apart) is kept whole in `Trace::wide`, and
/// its row holds the kind `WIDE` and the index there.
#[derive(Clone, Copy, Debug)]
struct Row {
    addr: u64,
    sk: u64,
    tf: u64,
}

/// An entry's varying fields, unpacked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Fields {
    size: u64,
    time_us: i64,
    frames: u32,
    kind: u32,
}

const SIZE_BITS: u32 = 48;
const TIME_BITS: u32 = 40;
const WIDE: u64 = 0xffff;

/// The trace of one device: its entries, oldest first, 24 bytes each.
///
/// Indexing is by value: [`Trace::get`] returns a [`TraceEntry`], and
/// `&Trace` iterates over [`TraceEntry`] values. A trace holds at most
/// `u32::MAX - 1` entries (a snapshot that large would be a 100 GB file).
#[derive(Clone)]
pub struct Trace {
    /// In chunks: a trace of millions of entries never reallocates.
    rows: ChunkedVec<Row>,
    /// The fields of rows too wide to pack.
    wide: Vec<Fields>,
    /// The time rows are offsets from (the first time pushed).
    base: Option<i64>,
    kinds: Vec<Kind>,
    kind_map: HashMap<Kind, u32>,
    /// The kind of the last push (entries of a kind come in runs).
    last: u32,
    /// The kind last pushed for each action (and unknown ones, last).
    by_action: [u32; ACTIONS.len() + 1],
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            rows: ChunkedVec::default(),
            wide: Vec::new(),
            base: None,
            kinds: Vec::new(),
            kind_map: HashMap::new(),
            last: NIL,
            by_action: [NIL; ACTIONS.len() + 1],
        }
    }
}

/// A row's varying fields packed against the time base `base` (after
/// this row's time, where it has one, set it), or the fields themselves
/// where they do not fit (kept whole in `Trace::wide`).
fn pack_row(base: Option<i64>, addr: u64, mut f: Fields, has_time: bool) -> Result<Row, Fields> {
    let base = if has_time {
        base.unwrap_or(f.time_us)
    } else {
        f.time_us = base.unwrap_or(0);
        f.time_us
    };
    let off = f.time_us.wrapping_sub(base);
    let lim = 1i64 << (TIME_BITS - 1);
    let fits = f.size < 1 << SIZE_BITS
        && u64::from(f.kind) < WIDE
        && f.frames < 1 << (64 - TIME_BITS)
        && (-lim..lim).contains(&off)
        && f.time_us.checked_sub(base) == Some(off);
    if fits {
        Ok(Row {
            addr,
            sk: f.size | u64::from(f.kind) << SIZE_BITS,
            tf: (off as u64 & ((1 << TIME_BITS) - 1)) | u64::from(f.frames) << TIME_BITS,
        })
    } else {
        Err(f)
    }
}

/// The row of an entry whose fields are `wide[i]`.
fn wide_row(addr: u64, i: usize) -> Row {
    Row {
        addr,
        sk: WIDE << SIZE_BITS,
        tf: i as u64,
    }
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty trace (room is made in chunks as entries come; `n` is
    /// only a hint).
    pub fn with_capacity(n: usize) -> Self {
        let _ = n;
        Self::default()
    }

    /// Room for `n` more entries in the first chunk, which otherwise grows
    /// as a `Vec` does.
    pub(crate) fn reserve_rows(&mut self, n: usize) {
        self.rows.reserve_first(n);
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Entry `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<TraceEntry> {
        self.rows.get(i).map(|r| self.entry(r))
    }

    /// The action of entry `i` (`None` past the end or for an unknown action).
    #[inline]
    pub fn action(&self, i: usize) -> Option<TraceAction> {
        let k = self
            .kinds
            .get(self.fields(self.rows.get(i)?).kind as usize)?;
        ACTIONS.get(k.action as usize).copied()
    }

    /// The time of entry `i`, when recorded.
    #[inline]
    pub fn time_us(&self, i: usize) -> Option<i64> {
        let f = self.fields(self.rows.get(i)?);
        let k = self.kinds.get(f.kind as usize)?;
        k.has_time.then_some(f.time_us)
    }

    /// Unpack a row's varying fields.
    #[inline(always)]
    fn fields(&self, r: &Row) -> Fields {
        let kind = r.sk >> SIZE_BITS;
        if kind == WIDE {
            return self.wide[r.tf as usize];
        }
        // sign-extend the 40-bit time offset
        let off = ((r.tf << (64 - TIME_BITS)) as i64) >> (64 - TIME_BITS);
        Fields {
            size: r.sk & ((1 << SIZE_BITS) - 1),
            time_us: self.base.unwrap_or(0).wrapping_add(off),
            frames: (r.tf >> TIME_BITS) as u32,
            kind: kind as u32,
        }
    }

    /// Pack a row's varying fields (`has_time`: whether its time is real;
    /// an absent time is stored as the base, its kind says it is absent).
    fn pack(&mut self, addr: u64, f: Fields, has_time: bool) -> Row {
        if has_time {
            self.base.get_or_insert(f.time_us);
        }
        match pack_row(self.base, addr, f, has_time) {
            Ok(row) => row,
            Err(f) => {
                self.wide.push(f);
                wide_row(addr, self.wide.len() - 1)
            }
        }
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            trace: self,
            rows: self.rows.iter(),
            left: self.rows.len(),
        }
    }

    /// Append an entry.
    ///
    /// # Panics
    /// When the trace already holds `u32::MAX - 1` entries of distinct
    /// kinds (it cannot, for any trace that fits in memory).
    pub fn push(&mut self, e: TraceEntry) {
        let kind = self.kind_id(Kind::of(&e));
        let f = Fields {
            size: e.size,
            time_us: e.time_us.unwrap_or(0),
            frames: e.frames.0,
            kind,
        };
        let row = self.pack(e.addr, f, e.time_us.is_some());
        self.rows.push(row);
    }

    fn kind_id(&mut self, k: Kind) -> u32 {
        if self.kinds.get(self.last as usize) == Some(&k) {
            return self.last;
        }
        // The last kind of each action (allocs and frees alternate).
        let a = (k.action as usize).min(ACTIONS.len());
        if let Some(&id) = self.by_action.get(a) {
            if self.kinds.get(id as usize) == Some(&k) {
                self.last = id;
                return id;
            }
        }
        // A trace has a handful of kinds: look at the first few directly.
        let id = match self.kinds.iter().take(8).position(|x| *x == k) {
            Some(i) => i as u32,
            None => match self.kind_map.get(&k) {
                Some(&i) => i,
                None => {
                    let i = u32::try_from(self.kinds.len())
                        .ok()
                        .filter(|&i| i != NIL)
                        .expect("fewer than u32::MAX kinds of trace entries");
                    self.kinds.push(k);
                    self.kind_map.insert(k, i);
                    i
                }
            },
        };
        self.last = id;
        if let Some(x) = self.by_action.get_mut(a) {
            *x = id;
        }
        id
    }

    /// The ids `other`'s kinds get in `self`, their strings mapped by
    /// `sym` (`None` for an id it does not map): interned in the order
    /// `other` met them, the order pushing its entries one by one meets
    /// them. For the parallel decoder's pieces ([`Trace::map_rows`]).
    pub(crate) fn map_kinds(
        &mut self,
        other: &Trace,
        sym: &dyn Fn(u32) -> Option<u32>,
    ) -> Option<Vec<u32>> {
        let map = |s: u32| if s == NIL { Some(NIL) } else { sym(s) };
        let mut ids = Vec::with_capacity(other.kinds.len());
        for k in &other.kinds {
            let k = Kind {
                other_action: map(k.other_action)?,
                compile_context: map(k.compile_context)?,
                user_metadata: map(k.user_metadata)?,
                ..*k
            };
            ids.push(self.kind_id(k));
        }
        Some(ids)
    }

    /// The index and time of the first entry with a time.
    pub(crate) fn first_timed(&self) -> Option<(usize, i64)> {
        self.rows.iter().enumerate().find_map(|(i, r)| {
            let f = self.fields(r);
            self.kinds[f.kind as usize]
                .has_time
                .then_some((i, f.time_us))
        })
    }

    /// The time base (the first time pushed).
    pub(crate) fn base(&self) -> Option<i64> {
        self.base
    }

    /// Append the entries of each of `others` in turn, on up to `threads`
    /// threads, their ids mapped as it copies them: stacks by
    /// `maps[k].0` (by `others[k]`'s stack ids), kinds by `maps[k].1`
    /// (from [`Trace::map_kinds`]); `base` is `self`'s time base after
    /// them (its own, or the first time they hold). What pushing each entry
    /// with the ids mapped would store; `others` are left as they were (a
    /// pass may read them meanwhile). `None` for an id neither maps (the
    /// rows appended are then not to be used).
    pub(crate) fn append_mapped(
        &mut self,
        others: &[&Trace],
        maps: &[(&[StackId], &[u32])],
        base: Option<i64>,
        threads: usize,
    ) -> Option<()> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Mutex;
        // (an entry without a time packs the same under either base, and
        // every entry before the first with a time has none)
        self.base = base;
        let failed = AtomicBool::new(false);
        let wide = Mutex::new(std::mem::take(&mut self.wide));
        let parts: Vec<&ChunkedVec<Row>> = others.iter().map(|o| &o.rows).collect();
        self.rows.extend_par(&parts, threads, &|k, rows| {
            let (Some(o), Some(&(stacks, kinds))) = (others.get(k), maps.get(k)) else {
                failed.store(true, Ordering::Relaxed);
                return;
            };
            for r in rows {
                let f = o.fields(r);
                let mapped = o.kinds.get(f.kind as usize).and_then(|kd| {
                    let g = Fields {
                        frames: stacks.get(f.frames as usize)?.0,
                        kind: *kinds.get(f.kind as usize)?,
                        ..f
                    };
                    Some((g, kd.has_time))
                });
                let Some((g, has_time)) = mapped else {
                    failed.store(true, Ordering::Relaxed);
                    return;
                };
                *r = match pack_row(base, r.addr, g, has_time) {
                    Ok(row) => row,
                    Err(g) => {
                        // (rare: sizes of 256 TiB, times weeks apart)
                        let mut w = wide.lock().unwrap_or_else(|e| e.into_inner());
                        w.push(g);
                        wide_row(r.addr, w.len() - 1)
                    }
                };
            }
        });
        self.wide = wide.into_inner().unwrap_or_else(|e| e.into_inner());
        (!failed.load(Ordering::Relaxed)).then_some(())
    }

    /// Keep the first `n` entries.
    pub fn truncate(&mut self, n: usize) {
        self.rows.truncate(n);
    }

    /// Drop the first `n` entries (a ring buffer that overwrote them).
    pub fn drop_front(&mut self, n: usize) {
        self.split_front(n);
    }

    /// Split off the first `n` entries and return them as a trace of their
    /// own; `self` keeps the rest. Cheap: storage moves in chunks.
    pub fn split_front(&mut self, n: usize) -> Trace {
        Trace {
            rows: self.rows.split_front(n),
            wide: self.wide.clone(),
            base: self.base,
            kinds: self.kinds.clone(),
            kind_map: self.kind_map.clone(),
            last: self.last,
            by_action: self.by_action,
        }
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<Row>()
            + self.wide.capacity() * std::mem::size_of::<Fields>()
            + self.kinds.capacity() * std::mem::size_of::<Kind>() * 3
    }

    /// Free spare capacity.
    pub fn shrink_to_fit(&mut self) {
        self.rows.shrink_to_fit();
    }

    #[inline(always)]
    fn entry(&self, r: &Row) -> TraceEntry {
        let f = self.fields(r);
        let k = &self.kinds[f.kind as usize];
        TraceEntry {
            action: ACTIONS.get(k.action as usize).copied(),
            other_action: opt_sym(k.other_action),
            addr: r.addr,
            size: f.size,
            stream: k.stream,
            time_us: k.has_time.then_some(f.time_us),
            device_free: k.device_free,
            frames: StackId(f.frames),
            compile_context: opt_sym(k.compile_context),
            user_metadata: opt_sym(k.user_metadata),
        }
    }
}

impl PartialEq for Trace {
    fn eq(&self, other: &Trace) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOW: usize = 8;
        f.write_str("Trace ")?;
        let mut l = f.debug_list();
        l.entries(self.iter().take(SHOW));
        if self.len() > SHOW {
            l.entry(&format_args!("… ({} entries)", self.len()));
        }
        l.finish()
    }
}

type RowIter<'a> = crate::chunked::Iter<'a, Row>;

/// Iterator over a [`Trace`]'s entries.
#[derive(Clone)]
pub struct Iter<'a> {
    trace: &'a Trace,
    rows: RowIter<'a>,
    left: usize,
}

impl Iterator for Iter<'_> {
    type Item = TraceEntry;
    #[inline(always)]
    fn next(&mut self) -> Option<TraceEntry> {
        let r = self.rows.next()?;
        self.left -= 1;
        Some(self.trace.entry(r))
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<TraceEntry> {
        let r = self.rows.next_back()?;
        self.left -= 1;
        Some(self.trace.entry(r))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Trace {
    type Item = TraceEntry;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<TraceEntry> for Trace {
    fn from_iter<I: IntoIterator<Item = TraceEntry>>(iter: I) -> Self {
        let mut t = Trace::new();
        t.extend(iter);
        t
    }
}

impl Extend<TraceEntry> for Trace {
    fn extend<I: IntoIterator<Item = TraceEntry>>(&mut self, iter: I) {
        for e in iter {
            self.push(e);
        }
    }
}

impl From<Vec<TraceEntry>> for Trace {
    fn from(v: Vec<TraceEntry>) -> Self {
        v.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(action: Option<TraceAction>, addr: u64) -> TraceEntry {
        TraceEntry {
            action,
            other_action: if action.is_none() { Some(Sym(7)) } else { None },
            addr,
            size: addr * 2,
            stream: addr % 3,
            time_us: addr.is_multiple_of(2).then_some(addr as i64 * 10),
            device_free: (action == Some(TraceAction::Oom)).then_some(addr + 1),
            frames: StackId(addr as u32 % 5),
            compile_context: addr.is_multiple_of(4).then_some(Sym(1)),
            user_metadata: None,
        }
    }

    #[test]
    fn entries_round_trip_through_rows_and_kinds() {
        let all: Vec<TraceEntry> = (0..200u64)
            .map(|i| {
                let a = match i % 11 {
                    10 => None,
                    k => Some(ACTIONS[k as usize % 9]),
                };
                e(a, i)
            })
            .collect();
        let t: Trace = all.iter().copied().collect();
        assert_eq!(t.len(), 200);
        assert_eq!(t.iter().collect::<Vec<_>>(), all);
        assert_eq!(t.iter().next_back(), all.last().copied());
        for (i, x) in all.iter().enumerate() {
            assert_eq!(t.get(i), Some(*x));
            assert_eq!(t.action(i), x.action);
            assert_eq!(t.time_us(i), x.time_us);
        }
        assert_eq!(t.get(200), None);
        assert_eq!(std::mem::size_of::<Row>(), 24);
        // Equality is by entries, not by how kinds were numbered.
        let mut u: Trace = all.iter().rev().copied().collect();
        u = u.iter().rev().collect();
        assert_eq!(t, u);
        let mut v = t.clone();
        v.drop_front(150);
        assert_eq!(v.iter().collect::<Vec<_>>(), all[150..]);
        let w = v.split_front(20);
        assert_eq!(w.iter().collect::<Vec<_>>(), all[150..170]);
        assert_eq!(v.iter().collect::<Vec<_>>(), all[170..]);
        v.truncate(10);
        assert_eq!(v.len(), 10);
    }

    #[test]
    fn fields_too_wide_to_pack_are_kept_whole() {
        let base = e(Some(TraceAction::Alloc), 2);
        let mut all = vec![base];
        for f in [
            |x: &mut TraceEntry| x.size = u64::MAX,
            |x: &mut TraceEntry| x.size = 1 << 48,
            |x: &mut TraceEntry| x.frames = StackId(u32::MAX),
            |x: &mut TraceEntry| x.frames = StackId(1 << 24),
            |x: &mut TraceEntry| x.time_us = Some(i64::MIN),
            |x: &mut TraceEntry| x.time_us = Some(i64::MAX),
            |x: &mut TraceEntry| x.time_us = Some(20 + (1 << 39)),
            |x: &mut TraceEntry| x.time_us = Some(20 - (1 << 39) - 1),
        ] {
            let mut x = base;
            f(&mut x);
            all.push(x);
            all.push(base);
        }
        // the last offsets that still fit
        let mut x = base;
        x.time_us = Some(20 + (1 << 39) - 1);
        all.push(x);
        x.time_us = Some(20 - (1 << 39));
        all.push(x);
        x.size = (1 << 48) - 1;
        x.frames = StackId((1 << 24) - 1);
        all.push(x);
        let t: Trace = all.iter().copied().collect();
        assert_eq!(t.iter().collect::<Vec<_>>(), all);
        assert_eq!(t.wide.len(), 8);
        // Entries without a time do not move the base.
        let mut y = base;
        y.time_us = None;
        let t: Trace = [y, base, y, base].into_iter().collect();
        assert_eq!(t.iter().collect::<Vec<_>>(), [y, base, y, base]);
        assert!(t.wide.is_empty());
        // many kinds
        let many: Vec<TraceEntry> = (0..70_000u64)
            .map(|i| TraceEntry { stream: i, ..base })
            .collect();
        let t: Trace = many.iter().copied().collect();
        assert!(t.iter().eq(many.iter().copied()));
        assert_eq!(t.get(69_999).unwrap().stream, 69_999);
    }

    #[test]
    fn a_time_of_zero_is_not_an_absent_time() {
        let mut x = e(Some(TraceAction::Alloc), 1);
        x.time_us = Some(0);
        let mut y = x;
        y.time_us = None;
        let t: Trace = [x, y].into_iter().collect();
        assert_eq!(t.get(0).unwrap().time_us, Some(0));
        assert_eq!(t.get(1).unwrap().time_us, None);
    }
}
