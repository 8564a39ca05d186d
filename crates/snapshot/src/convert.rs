//! Pickle arena → typed [`Snapshot`].

use std::collections::HashMap;

use crate::hash::IdBuild;
use crate::model::*;
use crate::trace::{Trace, TraceEntry};
use std::cell::Cell;
use vramscope_alloc::TraceAction;

use crate::pickle::{
    le_to_i64, le_to_u64, Absorb, IntRef, Pickle, Splice, Store, Tag, Val, Value, ValueRef, BAIL,
};
use crate::Error;

type Msg = String;

fn schema(path: String, message: Msg) -> Error {
    Error::Schema {
        path,
        message,
        offset: None,
    }
}

/// Trace-entry dicts the hook could not convert whose offsets are kept
/// (the conversion afterwards names the first bad entry only).
const FAILED_KEPT: usize = 64;

/// Resolves a fixed set of str keys in dicts, caching the positions per
/// shape (resolved by name, so keys interned later are still found).
struct Fields<const N: usize> {
    names: [&'static str; N],
    /// shape → (positions, whether every key of the shape is one of `names`)
    last: Option<(u32, [u32; N], bool)>,
    cache: HashMap<u32, ([u32; N], bool), IdBuild>,
}

const ABSENT: u32 = u32::MAX;

/// Most entries one device's trace may hold (a [`Trace`] indexes with u32).
const MAX_TRACE: usize = u32::MAX as usize - 1;

impl<const N: usize> Fields<N> {
    fn new(names: [&'static str; N]) -> Self {
        Fields {
            names,
            last: None,
            cache: HashMap::default(),
        }
    }

    fn positions(&mut self, st: &Store, shape: u32) -> ([u32; N], bool) {
        if let Some((s, p, e)) = self.last {
            if s == shape {
                return (p, e);
            }
        }
        let (p, e) = match self.cache.get(&shape) {
            Some(x) => *x,
            None => {
                let mut p = [ABSENT; N];
                let mut exact = true;
                for (j, k) in st.shape_keys(shape).iter().enumerate() {
                    match st
                        .str(*k)
                        .and_then(|name| self.names.iter().position(|n| *n == name))
                    {
                        Some(i) => p[i] = j as u32,
                        None => exact = false,
                    }
                }
                self.cache.insert(shape, (p, exact));
                (p, exact)
            }
        };
        self.last = Some((shape, p, e));
        (p, e)
    }

    fn gather(p: &[u32; N], vals: &[Val]) -> [Val; N] {
        let mut out = [Val::EMPTY; N];
        for i in 0..N {
            if p[i] != ABSENT {
                out[i] = vals.get(p[i] as usize).copied().unwrap_or(Val::EMPTY);
            }
        }
        out
    }

    /// The values of the fields (`Val::EMPTY` when absent), or `None` if `d`
    /// is not a (generic) dict.
    fn pick(&mut self, st: &Store, d: Val) -> Option<[Val; N]> {
        let (shape, _, vals) = st.dict_parts(d)?;
        let (p, _) = self.positions(st, shape);
        Some(Self::gather(&p, vals))
    }
}

/// Conversion state. It lives across decoding (as the [`Absorb`] hook that
/// turns trace-entry dicts into [`TraceEntry`]s while the VM runs) and the
/// conversion of the rest afterwards, so stacks are interned once.
pub(crate) struct State {
    table: StackTable,
    stack_by_span: HashMap<u64, StackId, IdBuild>,
    /// The last span looked up there and its stack (a `free_completed`
    /// repeats its `free_requested`'s list).
    last_span: Option<(u32, u32)>,
    last_stack: StackId,
    frame_by_dict: HashMap<u32, FrameId, IdBuild>,
    scratch: Vec<FrameId>,
    f_frame: Fields<3>,
    f_trace: Fields<9>,
    f_block: Fields<6>,
    f_hist: Fields<3>,
    f_seg: Fields<12>,
    /// Trace entries taken over while decoding.
    entries: Trace,
    /// Action strings seen (str ids) and what they parse to (a trace
    /// uses a handful, each the same memoized string).
    actions: Vec<(u32, Option<TraceAction>)>,
    /// Containers read while decoding (bitset by container id).
    observed: Vec<u64>,
    bailed: Cell<bool>,
    /// Whether to take over trace entries while decoding.
    absorbing: bool,
    /// A device's trace decoded in pieces, spliced in where it starts.
    pending: Option<crate::par::Decoded>,
    /// Trace-entry dicts (by container id) the hook could not convert, and
    /// the offset of the opcode that completed each: the conversion
    /// afterwards fails on one of them and names that byte. The first
    /// [`FAILED_KEPT`].
    failed: HashMap<u32, usize, IdBuild>,
    /// The first entry of the spliced trace whose frames list holds
    /// something other than a frame dict ([`crate::par::Fault`]): its index
    /// in `entries`, the byte its dict was completed at, and the message.
    par_fault: Option<(usize, u64, String)>,
    /// The spliced trace's entries: `(first, len)` in `entries`.
    spliced: Option<(u32, u32)>,
    /// The device whose trace they became, whole.
    spliced_device: Option<usize>,
}

/// The symbol used for a missing frame name or filename (resolves to "").
const NO_SYM: u32 = u32::MAX;

impl State {
    /// `absorbing`: take over trace entries while decoding.
    pub(crate) fn new(absorbing: bool) -> Self {
        State {
            table: StackTable::new(),
            stack_by_span: HashMap::default(),
            last_span: None,
            last_stack: StackId::EMPTY,
            frame_by_dict: HashMap::default(),
            scratch: Vec::new(),
            f_frame: Fields::new(["name", "filename", "line"]),
            f_trace: Fields::new([
                "action",
                "addr",
                "size",
                "stream",
                "time_us",
                "device_free",
                "frames",
                "compile_context",
                "user_metadata",
            ]),
            f_block: Fields::new([
                "address",
                "size",
                "requested_size",
                "state",
                "frames",
                "history",
            ]),
            f_hist: Fields::new(["addr", "real_size", "frames"]),
            f_seg: Fields::new([
                "device",
                "address",
                "total_size",
                "allocated_size",
                "active_size",
                "requested_size",
                "stream",
                "segment_type",
                "segment_pool_id",
                "is_expandable",
                "frames",
                "blocks",
            ]),
            entries: Trace::new(),
            actions: Vec::new(),
            observed: Vec::new(),
            bailed: Cell::new(false),
            absorbing,
            pending: None,
            failed: HashMap::default(),
            par_fault: None,
            spliced: None,
            spliced_device: None,
        }
    }

    /// [`State::new`]`(true)` that takes over the trace `d` (decoded in
    /// pieces) where it starts.
    pub(crate) fn with_trace(d: crate::par::Decoded) -> Self {
        let mut s = Self::new(true);
        s.pending = Some(d);
        s
    }

    /// Whether a trace decoded in pieces was given but never spliced in.
    pub(crate) fn trace_unused(&self) -> bool {
        self.pending.is_some()
    }

    /// The byte of the spliced trace's faulty entry, if it has one: the
    /// conversion's error names it (and nothing else is decoded again).
    pub(crate) fn par_fault_at(&self) -> Option<u64> {
        self.par_fault.as_ref().map(|f| f.1)
    }

    pub(crate) fn bailed(&self) -> bool {
        self.bailed.get()
    }

    fn observe(&mut self, id: usize) {
        let w = id / 64;
        if w >= self.observed.len() {
            self.observed.resize(w + 1, 0);
        }
        self.observed[w] |= 1 << (id % 64);
    }
}

impl Absorb for State {
    fn dict(&mut self, st: &Store, id: u32, shape: u32, vals: &[Val], at: usize) -> Option<u32> {
        if !self.absorbing || self.bailed.get() {
            return None;
        }
        let (p, exact) = self.f_trace.positions(st, shape);
        // only dicts made of trace-entry keys, with an action
        if !exact || p[0] == ABSENT {
            return None;
        }
        let f = Fields::gather(&p, vals);
        let n = u32::try_from(self.entries.len())
            .ok()
            .filter(|&n| n != u32::MAX)?;
        let mut cx = Cx { st, s: self };
        match cx.trace_fields(f) {
            Ok(e) => {
                self.entries.push(e);
                Some(n)
            }
            Err(_) => {
                if !self.bailed.get() && self.failed.len() < FAILED_KEPT {
                    self.failed.insert(id, at);
                }
                None
            }
        }
    }

    fn observed(&self, id: usize) -> bool {
        self.observed
            .get(id / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn bail(&self) {
        self.bailed.set(true);
    }

    fn jump_at(&self) -> usize {
        self.pending
            .as_ref()
            .and_then(|d| usize::try_from(d.at).ok())
            .unwrap_or(usize::MAX)
    }

    /// The pieces' strings, frames and stacks interned in piece order (each
    /// piece's in the order it met them: the order the sequential reader
    /// meets them in), their entries pushed with the global ids.
    fn splice(&mut self, st: &mut Store, memo: &dyn Fn(u64) -> Option<Val>) -> Option<Splice> {
        let d = self.pending.take()?;
        if !self.absorbing || self.bailed.get() {
            return None;
        }
        // what the trace names before it is what its bytes hold, frozen;
        // and once observed, never changed after (a thaw gives up)
        for (i, named) in &d.before {
            let v = memo(*i)?;
            if !named_matches(st, v, named) {
                return None;
            }
            if v.is_container() {
                self.observe(v.idx());
                for &x in st.seq_items(v).unwrap_or(&[]) {
                    self.observe(x.idx());
                }
            }
        }
        let first = u32::try_from(self.entries.len()).ok()?;
        let mut fids = Vec::new();
        let crate::par::Decoded {
            pieces,
            lists,
            later,
            to,
            memo_from,
            memo_to,
            threads,
            texts,
            ..
        } = d;
        // each piece's strings, frames, stacks and kinds interned in piece
        // order
        let mut maps = Vec::with_capacity(pieces.len());
        let mut total = self.entries.len();
        // each thread's str ids → the global ones, as its pieces name them
        let mut globals: Vec<Vec<u32>> = vec![Vec::new(); texts.len()];
        for p in &pieces {
            // (those it met, in the order it met them; a str an earlier
            // piece of its thread met is interned already)
            let text = texts.get(p.texts)?;
            let syms = globals.get_mut(p.texts)?;
            syms.resize(text.len(), NO_SYM);
            for &s in &p.order {
                let g = syms.get_mut(s as usize)?;
                if *g == NO_SYM {
                    *g = st.strs.intern(text.get(s))?;
                }
            }
            let syms = &*syms;
            let sym = |s: u32| -> Option<u32> {
                if s == crate::par::NO_SYM {
                    Some(NO_SYM)
                } else {
                    syms.get(s as usize).copied().filter(|&g| g != NO_SYM)
                }
            };
            fids.clear();
            for &(name, file, line) in &p.frames {
                fids.push(
                    self.table
                        .intern_frame_syms(Sym(sym(name)?), Sym(sym(file)?), line),
                );
            }
            let mut sids = Vec::with_capacity(p.stacks.len());
            for &(a, n) in &p.stacks {
                self.scratch.clear();
                for &f in p.pool.get(a as usize..(a + n) as usize)? {
                    self.scratch.push(*fids.get(f as usize)?);
                }
                sids.push(self.table.intern_stack(&self.scratch));
            }
            let kinds = self.entries.map_kinds(&p.entries, &sym)?;
            if let (None, Some(f)) = (&self.par_fault, &p.fault) {
                self.par_fault = Some((total + f.entry, f.at, f.message.clone()));
            }
            maps.push((sids, kinds));
            total += p.entries.len();
            if total > MAX_TRACE {
                return None;
            }
        }
        if self.par_fault.is_some() {
            // the faulty entry is the answer (`traces` reports it before
            // taking an entry over): the rows are not mapped, and no entry
            // decoded after the trace is taken over (its index would
            // follow rows never appended)
            self.absorbing = false;
        } else {
            // the time base: the trace's, or the first time the pieces hold
            let base = self.entries.base().or_else(|| {
                pieces
                    .iter()
                    .find_map(|p| p.entries.first_timed().map(|(_, t)| t))
            });
            // the rows copied and mapped on the threads, each making whole
            // chunks (touching their pages); the pieces stay as they are
            let rows: Vec<&Trace> = pieces.iter().map(|p| &*p.entries).collect();
            let ids: Vec<(&[StackId], &[u32])> = maps
                .iter()
                .map(|m| (m.0.as_slice(), m.1.as_slice()))
                .collect();
            self.entries.append_mapped(&rows, &ids, base, threads)?;
        }
        drop(pieces);
        let len = if self.par_fault.is_some() {
            u32::try_from(total).ok()?
        } else {
            u32::try_from(self.entries.len()).ok()?
        } - first;
        let mut strs = Vec::with_capacity(later.len());
        for (i, s) in &later {
            strs.push((*i, st.strs.lookup(s)?));
        }
        strs.sort_unstable();
        // each device's list: the first, then those the pieces went on to
        let mut lens = Vec::with_capacity(lists.len() + 1);
        let mut from = 0u32;
        for &k in &lists {
            let k = u32::try_from(k).ok().filter(|&k| k >= from && k <= len)?;
            lens.push(k - from);
            from = k;
        }
        lens.push(len - from);
        self.spliced = Some((first, lens[0]));
        Some(Splice {
            first,
            lens,
            to: usize::try_from(to).ok()?,
            memo_from,
            memo_to,
            strs,
        })
    }
}

/// Whether `v` is what [`crate::par`] decoded from its bytes: the same
/// text, or frozen frame dicts (and a frozen list of them) whose fields, as
/// `Cx::frame` converts them, are the same.
fn named_matches(st: &Store, v: Val, named: &crate::par::Named) -> bool {
    use crate::par::Named;
    let frame = |v: Val, want: &crate::par::FrameText| -> bool {
        let Some((_, keys, vals)) = st.dict_parts(v) else {
            return false;
        };
        let (mut name, mut file, mut line) = (None, None, 0i64);
        for (&k, &x) in keys.iter().zip(vals) {
            match st.str(k) {
                Some("name") => match st.str(x) {
                    Some(t) => name = Some(t),
                    None => return false,
                },
                Some("filename") => match st.str(x) {
                    Some(t) => file = Some(t),
                    None => return false,
                },
                Some("line") => match st.int(x).and_then(line_of) {
                    Some(i) => line = i,
                    None => return false,
                },
                _ => return false,
            }
        }
        name == want.0.as_deref() && file == want.1.as_deref() && line == want.2
    };
    match named {
        Named::Str(t) => st.str(v) == Some(t.as_str()),
        Named::Frame(f) => frame(v, f),
        Named::List(fs) => {
            v.tag() == Tag::List
                && st.seq_items(v).is_some_and(|items| {
                    items.len() == fs.len() && items.iter().zip(fs).all(|(&x, f)| frame(x, f))
                })
        }
    }
}

/// A frame's line as the model keeps it: any int in `i64`, or one in `u64`
/// above `i64::MAX` as its two's complement bits. PyTorch writes a frame's
/// `lineno` as a `uint64_t` (`unwind::Frame`; combined_traceback.cpp casts
/// `PyCode_Addr2Line`, -1 when the line is unknown, to `uint64_t`), so an
/// unknown line arrives as 2**64-1 and is kept as -1; the writer emits a
/// negative line back as that `u64`.
pub(crate) fn line_of(i: IntRef<'_>) -> Option<i64> {
    match i {
        IntRef::Small(i) => Some(i),
        IntRef::Big(b) => le_to_i64(b).or_else(|| le_to_u64(b).map(|u| u as i64)),
    }
}

struct Cx<'a> {
    st: &'a Store,
    s: &'a mut State,
}

fn bail_err() -> Error {
    Error::LimitExceeded {
        offset: None,
        what: BAIL,
    }
}

/// Whether `e` is the hook giving up (the caller then decodes generically).
pub(crate) fn is_bail(e: &Error) -> bool {
    matches!(e, Error::LimitExceeded { what, .. } if *what == BAIL)
}

/// Convert a decoded pickle into a snapshot.
pub(crate) fn snapshot_from_pickle(p: Pickle, state: State) -> Result<Snapshot, Error> {
    Ok(snapshot_spliced(p, state)?.0)
}

/// [`snapshot_from_pickle`], with the device whose trace is the one
/// spliced in from pieces, whole (`None` for none).
pub(crate) fn snapshot_spliced(
    p: Pickle,
    mut state: State,
) -> Result<(Snapshot, Option<usize>), Error> {
    if state.bailed() {
        return Err(bail_err());
    }
    let Pickle { mut st, root, .. } = p;
    let snap = Cx {
        st: &st,
        s: &mut state,
    }
    .snapshot(root);
    if state.bailed() {
        return Err(bail_err());
    }
    let mut snap = snap?;
    snap.stacks = std::mem::take(&mut state.table);
    // Frames and symbols refer to the pickle's interned strings: move them over.
    snap.stacks.strings = std::mem::take(&mut st.strs);
    Ok((snap, state.spliced_device))
}

impl<'a> Cx<'a> {
    /// A generic dict's parts; a dict taken over by the hook here means the
    /// fast path cannot be trusted: bail.
    fn dict_parts(&self, v: Val) -> Option<(u32, &'a [Val], &'a [Val])> {
        if self.st.native(v).is_some() {
            self.s.bailed.set(true);
            return None;
        }
        self.st.dict_parts(v)
    }

    // ----- scalar helpers ---------------------------------------------------

    fn kind(&self, v: Val) -> &'static str {
        ValueRef::new(self.st, v).type_name()
    }

    fn u64(&self, v: Val) -> Result<u64, Msg> {
        match self.st.int(v) {
            Some(IntRef::Small(i)) => {
                u64::try_from(i).map_err(|_| format!("expected a non-negative integer, found {i}"))
            }
            Some(IntRef::Big(b)) => le_to_u64(b).ok_or_else(|| {
                format!(
                    "integer does not fit in u64 ({} bytes{})",
                    b.len(),
                    if b.last().is_some_and(|x| x & 0x80 != 0) {
                        ", negative"
                    } else {
                        ""
                    }
                )
            }),
            None => Err(format!("expected int, found {}", self.kind(v))),
        }
    }

    /// Like `u64` but accepts negative i64 as its two's complement bit
    /// pattern (streams and pool ids are pointer-like values written as int64).
    fn u64_bits(&self, v: Val) -> Result<u64, Msg> {
        match self.st.int(v) {
            Some(IntRef::Small(i)) => Ok(i as u64),
            _ => self.u64(v),
        }
    }

    fn i64(&self, v: Val) -> Result<i64, Msg> {
        match self.st.int(v) {
            Some(IntRef::Small(i)) => Ok(i),
            Some(IntRef::Big(b)) => le_to_i64(b)
                .ok_or_else(|| format!("integer does not fit in i64 ({} bytes)", b.len())),
            None => Err(format!("expected int, found {}", self.kind(v))),
        }
    }

    /// A frame's line: [`line_of`].
    fn line(&self, v: Val) -> Result<i64, Msg> {
        match self.st.int(v) {
            Some(i) => line_of(i).ok_or_else(|| "integer does not fit in i64 or u64".to_owned()),
            None => Err(format!("expected int, found {}", self.kind(v))),
        }
    }

    fn bool(&self, v: Val) -> Result<bool, Msg> {
        match v.tag() {
            Tag::Bool => Ok(v.0 & 1 == 1),
            _ => Err(format!("expected bool, found {}", self.kind(v))),
        }
    }

    fn f64(&self, v: Val) -> Result<f64, Msg> {
        if let Some(f) = self.st.float(v) {
            return Ok(f);
        }
        self.i64(v)
            .map(|i| i as f64)
            .map_err(|_| format!("expected float, found {}", self.kind(v)))
    }

    fn sym(&self, v: Val) -> Result<u32, Msg> {
        match v.tag() {
            Tag::Str => Ok(v.id()),
            _ => Err(format!("expected str, found {}", self.kind(v))),
        }
    }

    fn string(&self, v: Val) -> Result<String, Msg> {
        self.sym(v).map(|id| self.st.strs.get(id).to_owned())
    }

    fn items(&self, v: Val) -> Result<&'a [Val], Msg> {
        if self.st.native_run(v).is_some() {
            // A trace list read as something else: decode generically.
            self.s.bailed.set(true);
            return Err("internal: trace entries where they were not expected".to_owned());
        }
        match v.tag() {
            Tag::List | Tag::Tuple => self
                .st
                .seq_items(v)
                .ok_or_else(|| "internal: list still being built".to_owned()),
            _ => Err(format!("expected list, found {}", self.kind(v))),
        }
    }

    fn raw(&self, v: Val) -> Result<Value, Error> {
        ValueRef::new(self.st, v).to_value()
    }

    // ----- stacks -------------------------------------------------------------

    fn stack(&mut self, v: Val) -> Result<StackId, Msg> {
        if v == Val::EMPTY || v.tag() == Tag::None {
            return Ok(StackId::EMPTY);
        }
        if v.tag() == Tag::List {
            self.s.observe(v.idx());
        }
        let span = self.st.list_span(v);
        if let Some(sp) = span {
            if sp.len == 0 {
                // `frames: []`, every entry of a snapshot without stacks
                return Ok(StackId::EMPTY);
            }
            if self.s.last_span == Some((sp.start, sp.len)) {
                return Ok(self.s.last_stack);
            }
            if let Some(&id) = self
                .s
                .stack_by_span
                .get(&(u64::from(sp.start) << 32 | u64::from(sp.len)))
            {
                self.s.last_span = Some((sp.start, sp.len));
                self.s.last_stack = id;
                return Ok(id);
            }
        }
        let items = self
            .items(v)
            .map_err(|_| format!("frames: expected a list of frames, found {}", self.kind(v)))?;
        let mut scratch = std::mem::take(&mut self.s.scratch);
        scratch.clear();
        for (i, &f) in items.iter().enumerate() {
            match self.frame(f) {
                Ok(id) => scratch.push(id),
                Err(m) => {
                    self.s.scratch = scratch;
                    return Err(format!("frames[{i}]: {m}"));
                }
            }
        }
        let id = self.s.table.intern_stack(&scratch);
        self.s.scratch = scratch;
        if let Some(sp) = span {
            self.s
                .stack_by_span
                .insert(u64::from(sp.start) << 32 | u64::from(sp.len), id);
        }
        Ok(id)
    }

    fn frame(&mut self, v: Val) -> Result<FrameId, Msg> {
        if v.tag() != Tag::Dict {
            return Err(format!("expected a frame dict, found {}", self.kind(v)));
        }
        if let Some(&id) = self.s.frame_by_dict.get(&v.id()) {
            return Ok(id);
        }
        self.s.observe(v.idx());
        let Some([name, filename, line]) = self.s.f_frame.pick(self.st, v) else {
            // a frame dict filled again after it was stored (a memo get
            // then SETITEMS) is still being built: decode generically
            self.s.bailed.set(true);
            return Err("internal: a frame dict still being built".to_owned());
        };
        let name = if name == Val::EMPTY {
            NO_SYM
        } else {
            self.sym(name).map_err(|m| format!("name: {m}"))?
        };
        let filename = if filename == Val::EMPTY {
            NO_SYM
        } else {
            self.sym(filename).map_err(|m| format!("filename: {m}"))?
        };
        let line = if line == Val::EMPTY {
            0
        } else {
            self.line(line).map_err(|m| format!("line: {m}"))?
        };
        let id = self
            .s
            .table
            .intern_frame_syms(Sym(name), Sym(filename), line);
        self.s.frame_by_dict.insert(v.id(), id);
        Ok(id)
    }

    // ----- top level --------------------------------------------------------------

    fn snapshot(&mut self, root: Val) -> Result<Snapshot, Error> {
        let mut snap = Snapshot::default();
        match root.tag() {
            Tag::Dict => {
                let (_, keys, vals) = self.dict_parts(root).unwrap_or((0, &[], &[]));
                let seg_key = self.st.strs.lookup("segments");
                if !keys
                    .iter()
                    .any(|k| k.tag() == Tag::Str && Some(k.id()) == seg_key)
                {
                    let names: Vec<String> = keys
                        .iter()
                        .take(8)
                        .map(|&k| format!("{:?}", ValueRef::new(self.st, k)))
                        .collect();
                    return Err(Error::NotASnapshot {
                        reason: format!(
                            "the top-level dict has no 'segments' key (its keys: [{}]{})",
                            names.join(", "),
                            if keys.len() > 8 { ", …" } else { "" }
                        ),
                    });
                }
                for (&k, &v) in keys.iter().zip(vals) {
                    let Some(name) = self.st.str(k) else {
                        snap.other
                            .push((format!("{:?}", ValueRef::new(self.st, k)), self.raw(v)?));
                        continue;
                    };
                    match name {
                        "segments" => snap.segments = self.segments(v, "segments")?,
                        "device_traces" => snap.device_traces = self.traces(v)?,
                        "allocator_settings" => snap.allocator_settings = self.settings(v)?,
                        "external_annotations" => {
                            snap.external_annotations = self.annotations(v)?
                        }
                        "host_segments" => snap.host_segments = Some(self.raw(v)?),
                        "host_traces" => snap.host_traces = Some(self.raw(v)?),
                        _ => snap.other.push((name.to_owned(), self.raw(v)?)),
                    }
                }
            }
            Tag::List => {
                // PyTorch 1.x `memory_snapshot()`: a bare list of segments.
                let items = self.st.seq_items(root).unwrap_or(&[]);
                let total = self.st.strs.lookup("total_size");
                let looks_like_segments = items.iter().all(|&s| {
                    self.dict_parts(s).is_some_and(|(_, k, _)| {
                        k.iter()
                            .any(|k| k.tag() == Tag::Str && Some(k.id()) == total)
                    })
                });
                if !looks_like_segments {
                    return Err(Error::NotASnapshot {
                        reason:
                            "the top-level list does not hold segment dicts (with 'total_size')"
                                .into(),
                    });
                }
                snap.segments = self.segments(root, "")?;
            }
            _ => {
                return Err(Error::NotASnapshot {
                    reason: format!(
                        "the top-level object is a {}, expected a dict with a 'segments' key",
                        self.kind(root)
                    ),
                })
            }
        }
        Ok(snap)
    }

    fn segments(&mut self, v: Val, path: &str) -> Result<Vec<Segment>, Error> {
        let items = self.items(v).map_err(|m| schema(path.to_owned(), m))?;
        let mut out = Vec::with_capacity(items.len());
        for (i, &s) in items.iter().enumerate() {
            let p = || format!("{path}[{i}]");
            out.push(self.segment(s, &p)?);
        }
        Ok(out)
    }

    fn segment(&mut self, v: Val, p: &dyn Fn() -> String) -> Result<Segment, Error> {
        let f = self.s.f_seg.pick(self.st, v).ok_or_else(|| {
            schema(
                p(),
                format!("expected a segment dict, found {}", self.kind(v)),
            )
        })?;
        let [device, address, total_size, allocated_size, active_size, requested_size, stream, segment_type, pool, expandable, frames, blocks] =
            f;
        let field = |name: &str, m: Msg| schema(format!("{}.{name}", p()), m);
        let opt_u64 = |cx: &Self, v: Val, name: &str| -> Result<u64, Error> {
            if v == Val::EMPTY {
                Ok(0)
            } else {
                cx.u64(v).map_err(|m| field(name, m))
            }
        };
        let req = |v: Val, name: &str| -> Result<Val, Error> {
            if v == Val::EMPTY {
                Err(schema(p(), format!("missing key '{name}'")))
            } else {
                Ok(v)
            }
        };
        let segment_type = if segment_type == Val::EMPTY {
            SegmentType::Large
        } else {
            match self.st.str(segment_type) {
                Some("large") => SegmentType::Large,
                Some("small") => SegmentType::Small,
                Some(s) => SegmentType::Other(s.to_owned()),
                None => {
                    return Err(field(
                        "segment_type",
                        format!("expected str, found {}", self.kind(segment_type)),
                    ))
                }
            }
        };
        let segment_pool_id = if pool == Val::EMPTY {
            (0, 0)
        } else {
            match self.st.seq_items(pool) {
                Some(&[a, b]) if pool.tag() == Tag::Tuple || pool.tag() == Tag::List => (
                    self.u64_bits(a).map_err(|m| field("segment_pool_id", m))?,
                    self.u64_bits(b).map_err(|m| field("segment_pool_id", m))?,
                ),
                _ => {
                    return Err(field(
                        "segment_pool_id",
                        format!("expected a 2-tuple, found {}", self.kind(pool)),
                    ))
                }
            }
        };
        let blocks_v = req(blocks, "blocks")?;
        let block_items = self.items(blocks_v).map_err(|m| field("blocks", m))?;
        let mut out_blocks = Vec::with_capacity(block_items.len());
        for (j, &b) in block_items.iter().enumerate() {
            let bp = || format!("{}.blocks[{j}]", p());
            out_blocks.push(self.block(b, &bp)?);
        }
        Ok(Segment {
            device: if device == Val::EMPTY {
                0
            } else {
                self.i64(device).map_err(|m| field("device", m))?
            },
            address: self
                .u64(req(address, "address")?)
                .map_err(|m| field("address", m))?,
            total_size: self
                .u64(req(total_size, "total_size")?)
                .map_err(|m| field("total_size", m))?,
            allocated_size: opt_u64(self, allocated_size, "allocated_size")?,
            active_size: opt_u64(self, active_size, "active_size")?,
            requested_size: opt_u64(self, requested_size, "requested_size")?,
            stream: if stream == Val::EMPTY {
                0
            } else {
                self.u64_bits(stream).map_err(|m| field("stream", m))?
            },
            segment_type,
            segment_pool_id,
            is_expandable: if expandable == Val::EMPTY {
                false
            } else {
                self.bool(expandable)
                    .map_err(|m| field("is_expandable", m))?
            },
            frames: self.stack(frames).map_err(|m| field("frames", m))?,
            blocks: out_blocks,
        })
    }

    fn block(&mut self, v: Val, p: &dyn Fn() -> String) -> Result<Block, Error> {
        let [address, size, requested_size, state, frames, history] =
            self.s.f_block.pick(self.st, v).ok_or_else(|| {
                schema(
                    p(),
                    format!("expected a block dict, found {}", self.kind(v)),
                )
            })?;
        let field = |name: &str, m: Msg| schema(format!("{}.{name}", p()), m);
        if size == Val::EMPTY {
            return Err(schema(p(), "missing key 'size'".into()));
        }
        let size = self.u64(size).map_err(|m| field("size", m))?;
        let state = match self.st.str(state) {
            Some("active_allocated") => BlockState::ActiveAllocated,
            Some("active_pending_free" | "active_awaiting_free") => BlockState::ActivePendingFree,
            Some("inactive") => BlockState::Inactive,
            Some(_) => BlockState::Other(Sym(state.id())),
            None if state == Val::EMPTY => return Err(schema(p(), "missing key 'state'".into())),
            None => {
                return Err(field(
                    "state",
                    format!("expected str, found {}", self.kind(state)),
                ))
            }
        };
        let history = if history == Val::EMPTY || history.tag() == Tag::None {
            None
        } else {
            let items = self.items(history).map_err(|m| field("history", m))?;
            let mut out = Vec::with_capacity(items.len());
            for (k, &h) in items.iter().enumerate() {
                let hp = |name: &str, m: Msg| schema(format!("{}.history[{k}]{name}", p()), m);
                let [addr, real_size, frames] =
                    self.s.f_hist.pick(self.st, h).ok_or_else(|| {
                        hp(
                            "",
                            format!("expected a history dict, found {}", self.kind(h)),
                        )
                    })?;
                out.push(History {
                    addr: if addr == Val::EMPTY {
                        0
                    } else {
                        self.u64(addr).map_err(|m| hp(".addr", m))?
                    },
                    real_size: if real_size == Val::EMPTY {
                        0
                    } else {
                        self.u64(real_size).map_err(|m| hp(".real_size", m))?
                    },
                    frames: self.stack(frames).map_err(|m| hp(".frames", m))?,
                });
            }
            Some(out)
        };
        Ok(Block {
            address: if address == Val::EMPTY {
                None
            } else {
                Some(self.u64(address).map_err(|m| field("address", m))?)
            },
            size,
            requested_size: if requested_size == Val::EMPTY {
                size
            } else {
                self.u64(requested_size)
                    .map_err(|m| field("requested_size", m))?
            },
            state,
            frames: self.stack(frames).map_err(|m| field("frames", m))?,
            history,
        })
    }

    fn traces(&mut self, v: Val) -> Result<Vec<Trace>, Error> {
        let devices = self
            .items(v)
            .map_err(|m| schema("device_traces".into(), m))?;
        let mut out = Vec::with_capacity(devices.len());
        // Entries taken over while decoding and already handed to a device.
        let mut taken = 0usize;
        for (d, &dev) in devices.iter().enumerate() {
            // A device's entries, all taken over in order: hand them over
            // (the device lists come in the order of their entries).
            if let Some((first, len)) = self.st.native_run(dev) {
                if self.s.spliced == Some((first, len)) {
                    self.s.spliced_device = Some(d);
                }
                let len = len as usize;
                if first as usize != taken {
                    self.s.bailed.set(true);
                    return Err(bail_err());
                }
                // (a faulty spliced trace's rows are not appended)
                self.par_fault_in(d, taken..taken + len, 0)?;
                if len > self.s.entries.len() {
                    self.s.bailed.set(true);
                    return Err(bail_err());
                }
                out.push(self.s.entries.split_front(len));
                taken += len;
                continue;
            }
            let entries = self
                .items(dev)
                .map_err(|m| schema(format!("device_traces[{d}]"), m))?;
            // Entries taken over while decoding, all of them in order: move them.
            if self.s.entries.len() == entries.len()
                && entries
                    .iter()
                    .enumerate()
                    .all(|(i, &e)| self.st.native(e) == u32::try_from(taken + i).ok())
                && !entries.is_empty()
            {
                self.par_fault_in(d, taken..taken + entries.len(), 0)?;
                out.push(std::mem::take(&mut self.s.entries));
                continue;
            }
            let mut list = Trace::with_capacity(entries.len());
            for (i, &e) in entries.iter().enumerate() {
                if list.len() >= MAX_TRACE {
                    return Err(Error::LimitExceeded {
                        offset: None,
                        what: "more than 4 Gi trace entries on one device",
                    });
                }
                if let Some(n) = self.st.native(e) {
                    self.par_fault_in(d, n as usize..n as usize + 1, i)?;
                    match (n as usize)
                        .checked_sub(taken)
                        .and_then(|k| self.s.entries.get(k))
                    {
                        Some(t) => list.push(t),
                        None => {
                            self.s.bailed.set(true);
                            return Err(bail_err());
                        }
                    }
                    continue;
                }
                match self.trace_entry(e) {
                    Ok(t) => list.push(t),
                    Err((field, m)) => {
                        let sep = if field.is_empty() { "" } else { "." };
                        return Err(Error::Schema {
                            path: format!("device_traces[{d}][{i}]{sep}{field}"),
                            message: m,
                            offset: (e.tag() == Tag::Dict)
                                .then(|| self.s.failed.get(&e.id()))
                                .flatten()
                                .map(|&o| o as u64),
                        });
                    }
                }
            }
            out.push(list);
        }
        Ok(out)
    }

    /// The spliced trace's faulty entry, if it is among the entries
    /// `natives` (indices in `entries`, device `d`'s from index `first`):
    /// the error the sequential reader's conversion gives for it
    /// (`Cx::stack`'s message), naming its byte.
    fn par_fault_in(
        &self,
        d: usize,
        natives: std::ops::Range<usize>,
        first: usize,
    ) -> Result<(), Error> {
        match &self.s.par_fault {
            Some((n, at, m)) if natives.contains(n) => Err(Error::Schema {
                path: format!("device_traces[{d}][{}].frames", n - natives.start + first),
                message: m.clone(),
                offset: Some(*at),
            }),
            _ => Ok(()),
        }
    }

    fn trace_entry(&mut self, v: Val) -> Result<TraceEntry, (&'static str, Msg)> {
        let Some(f) = self.s.f_trace.pick(self.st, v) else {
            return Err((
                "",
                format!("expected a trace entry dict, found {}", self.kind(v)),
            ));
        };
        self.trace_fields(f)
    }

    fn trace_fields(&mut self, f: [Val; 9]) -> Result<TraceEntry, (&'static str, Msg)> {
        let [action, addr, size, stream, time_us, device_free, frames, compile_context, user_metadata] =
            f;
        let (action, other_action) = match self.st.str(action) {
            Some(s) => {
                let id = action.id();
                let known = match self.s.actions.iter().find(|(x, _)| *x == id) {
                    Some(&(_, a)) => a,
                    None => {
                        let a = TraceAction::parse(s);
                        if self.s.actions.len() < 16 {
                            self.s.actions.push((id, a));
                        }
                        a
                    }
                };
                (known, known.is_none().then_some(Sym(action.id())))
            }
            None if action == Val::EMPTY => return Err(("", "missing key 'action'".into())),
            None => {
                return Err((
                    "action",
                    format!("expected str, found {}", self.kind(action)),
                ))
            }
        };
        let opt_sym =
            |cx: &Self, v: Val, name: &'static str| -> Result<Option<Sym>, (&'static str, Msg)> {
                if v == Val::EMPTY || v.tag() == Tag::None {
                    Ok(None)
                } else {
                    cx.sym(v).map(|s| Some(Sym(s))).map_err(|m| (name, m))
                }
            };
        Ok(TraceEntry {
            action,
            other_action,
            addr: if addr == Val::EMPTY {
                0
            } else {
                self.u64(addr).map_err(|m| ("addr", m))?
            },
            size: if size == Val::EMPTY {
                0
            } else {
                self.u64(size).map_err(|m| ("size", m))?
            },
            stream: if stream == Val::EMPTY {
                0
            } else {
                self.u64_bits(stream).map_err(|m| ("stream", m))?
            },
            time_us: if time_us == Val::EMPTY {
                None
            } else {
                Some(self.i64(time_us).map_err(|m| ("time_us", m))?)
            },
            device_free: if device_free == Val::EMPTY {
                None
            } else {
                Some(self.u64(device_free).map_err(|m| ("device_free", m))?)
            },
            frames: self.stack(frames).map_err(|m| ("frames", m))?,
            compile_context: opt_sym(self, compile_context, "compile_context")?,
            user_metadata: opt_sym(self, user_metadata, "user_metadata")?,
        })
    }

    fn settings(&mut self, v: Val) -> Result<Option<AllocatorSettings>, Error> {
        if v.tag() == Tag::None {
            return Ok(None);
        }
        let Some((_, keys, vals)) = self.dict_parts(v) else {
            return Err(schema(
                "allocator_settings".into(),
                format!("expected dict, found {}", self.kind(v)),
            ));
        };
        let mut s = AllocatorSettings::default();
        for (&k, &x) in keys.iter().zip(vals) {
            let name = match self.st.str(k) {
                Some(n) => n,
                None => {
                    s.other
                        .push((format!("{:?}", ValueRef::new(self.st, k)), self.raw(x)?));
                    continue;
                }
            };
            let ok = match name {
                "PYTORCH_CUDA_ALLOC_CONF" => self
                    .string(x)
                    .map(|t| s.pytorch_cuda_alloc_conf = Some(t))
                    .is_ok(),
                "max_split_size" => self.i64(x).map(|t| s.max_split_size = Some(t)).is_ok(),
                "garbage_collection_threshold" => self
                    .f64(x)
                    .map(|t| s.garbage_collection_threshold = Some(t))
                    .is_ok(),
                "expandable_segments" => self
                    .bool(x)
                    .map(|t| s.expandable_segments = Some(t))
                    .is_ok(),
                "release_lock_on_cudamalloc" => self
                    .bool(x)
                    .map(|t| s.release_lock_on_cudamalloc = Some(t))
                    .is_ok(),
                "pinned_num_register_threads" => self
                    .i64(x)
                    .map(|t| s.pinned_num_register_threads = Some(t))
                    .is_ok(),
                "pinned_use_cuda_host_register" => self
                    .bool(x)
                    .map(|t| s.pinned_use_cuda_host_register = Some(t))
                    .is_ok(),
                "roundup_power2_divisions" => {
                    s.roundup_power2_divisions = Some(self.roundup(x)?);
                    true
                }
                _ => false,
            };
            if !ok {
                s.other.push((name.to_owned(), self.raw(x)?));
            }
        }
        Ok(Some(s))
    }

    fn roundup(&mut self, v: Val) -> Result<RoundupPower2Divisions, Error> {
        if let Some((_, keys, vals)) = self.dict_parts(v) {
            let parsed: Option<Vec<(u64, u64)>> = keys
                .iter()
                .zip(vals)
                .map(|(&k, &x)| {
                    let bucket = match self.st.str(k) {
                        Some(s) => s.trim().parse().ok()?,
                        None => self.u64(k).ok()?,
                    };
                    Some((bucket, self.u64(x).ok()?))
                })
                .collect();
            if let Some(p) = parsed {
                return Ok(RoundupPower2Divisions::PerBucket(p));
            }
        } else if matches!(v.tag(), Tag::List | Tag::Tuple) {
            let items = self.st.seq_items(v).unwrap_or(&[]);
            let parsed: Option<Vec<(u64, u64)>> = items
                .iter()
                .enumerate()
                .map(|(i, &x)| Some((1u64.checked_shl(i as u32)?, self.u64(x).ok()?)))
                .collect();
            if let Some(p) = parsed {
                return Ok(RoundupPower2Divisions::PerBucket(p));
            }
        } else if let Ok(n) = self.u64(v) {
            return Ok(RoundupPower2Divisions::Uniform(n));
        }
        Ok(RoundupPower2Divisions::Other(self.raw(v)?))
    }

    fn annotations(&mut self, v: Val) -> Result<Vec<Annotation>, Error> {
        if v.tag() == Tag::None {
            return Ok(Vec::new());
        }
        let items = self
            .items(v)
            .map_err(|m| schema("external_annotations".into(), m))?;
        let mut out = Vec::with_capacity(items.len());
        for (i, &a) in items.iter().enumerate() {
            let p = |name: &str| format!("external_annotations[{i}]{name}");
            let Some((_, keys, vals)) = self.dict_parts(a) else {
                return Err(schema(
                    p(""),
                    format!("expected dict, found {}", self.kind(a)),
                ));
            };
            let mut ann = Annotation {
                stage: String::new(),
                name: String::new(),
                device: 0,
                time_us: 0,
                other: Vec::new(),
            };
            for (&k, &x) in keys.iter().zip(vals) {
                match self.st.str(k) {
                    Some("stage") => {
                        ann.stage = self.string(x).map_err(|m| schema(p(".stage"), m))?
                    }
                    Some("name") => ann.name = self.string(x).map_err(|m| schema(p(".name"), m))?,
                    Some("device") => {
                        ann.device = self.i64(x).map_err(|m| schema(p(".device"), m))?
                    }
                    Some("time_us") => {
                        ann.time_us = self.i64(x).map_err(|m| schema(p(".time_us"), m))?
                    }
                    Some(other) => ann.other.push((other.to_owned(), self.raw(x)?)),
                    None => ann
                        .other
                        .push((format!("{:?}", ValueRef::new(self.st, k)), self.raw(x)?)),
                }
            }
            out.push(ann);
        }
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::write::{snapshot_to_bytes, WriteOptions};
    use crate::*;

    /// `tests/data/make_fixtures.py`'s `unknown_line`: a frame whose line
    /// is 2**64-1, in protocols 0, 2 and 4.
    pub(crate) const UNKNOWN_LINE: [&[u8]; 3] = [
        include_bytes!("../tests/data/unknown_line_p0.pickle"),
        include_bytes!("../tests/data/unknown_line_p2.pickle"),
        include_bytes!("../tests/data/unknown_line_p4.pickle"),
    ];

    /// The frames of the block, then of each trace entry, as
    /// (name, line).
    pub(crate) fn lines(s: &Snapshot) -> Vec<Vec<(String, i64)>> {
        let of = |id| s.frames(id).map(|f| (f.name.to_owned(), f.line)).collect();
        let mut out = vec![of(s.segments[0].blocks[0].frames)];
        out.extend(s.device_traces[0].iter().map(|e| of(e.frames)));
        out
    }

    pub(crate) fn assert_unknown_line(s: &Snapshot) {
        let l = lines(s);
        assert_eq!(l.len(), 6);
        for (i, f) in l.iter().enumerate().take(4) {
            assert_eq!(f[1], ("init_gpu_context".to_owned(), -1), "frames {i}");
            assert_eq!(f[2].1, 125, "frames {i}");
        }
        assert_eq!(l[4].len(), 2);
    }

    #[test]
    fn an_unknown_line_is_kept_as_minus_one() {
        for (p, b) in UNKNOWN_LINE.iter().enumerate() {
            for s in [
                read_snapshot(b),
                read_snapshot_sequential(b),
                read_snapshot_generic(b),
            ] {
                let s = s.unwrap_or_else(|e| panic!("protocol {}: {e}", [0, 2, 4][p]));
                assert_unknown_line(&s);
            }
        }
    }

    #[test]
    fn the_writer_gives_an_unknown_line_back_as_pytorch_wrote_it() {
        let s = read_snapshot(UNKNOWN_LINE[2]).unwrap();
        let out = snapshot_to_bytes(&s, &WriteOptions::default());
        // LONG1 of 2**64-1, as CPython writes it
        let want = [0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0];
        assert!(out.windows(want.len()).any(|w| w == want));
        let back = read_snapshot(&out).unwrap();
        assert_eq!(lines(&back), lines(&s));
    }

    #[test]
    fn a_line_wider_than_u64_is_refused() {
        // 2**64 + 5 in place of the unknown line (LONG1 of 9 bytes, same length)
        let mut b = UNKNOWN_LINE[2].to_vec();
        let big = [0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0];
        let at = b.windows(big.len()).position(|w| w == big).unwrap();
        b[at + 2..at + 11].copy_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0, 1]);
        let e = read_snapshot_sequential(&b).unwrap_err().to_string();
        assert!(
            e.contains("line: integer does not fit in i64 or u64"),
            "{e}"
        );
    }
}
