//! A protocol-4 pickle writer, and [`write_snapshot`], which serialises a
//! [`Snapshot`] into the dict layout `torch.cuda.memory._snapshot()` returns
//! (same keys, same key order), so Python's `pickle.load` and PyTorch's
//! tools (`torch.cuda._memory_viz`, pytorch.org/memory_viz) read it.
//!
//! The output mimics CPython's pickler: every str, list, dict and tuple is
//! memoized (`MEMOIZE`), repeated strings and frame dicts are written once
//! and then fetched with `BINGET`/`LONG_BINGET`, list and dict items are
//! batched 1000 at a time, and data is cut into 64 KiB `FRAME`s (optional).

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use crate::model::*;
use crate::pickle::Value;
use crate::trace::TraceEntry;
use crate::Error;
use vramscope_alloc::TraceAction;

const FRAME_TARGET: usize = 64 * 1024;
const BATCH: usize = 1000;

/// Options for [`write_snapshot`].
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Emit protocol-4 `FRAME` opcodes (as CPython does). Default `true`.
    pub framing: bool,
    /// Let a `free_completed` entry reuse the frames list object of the
    /// matching `free_requested` (same address and stack), as PyTorch does
    /// because both share one captured traceback. Default `true`.
    pub share_free_stacks: bool,
    /// Share a frames list wherever PyTorch's snapshot shares one captured
    /// traceback (`py_symbolize` turns each `CapturedTraceback` into one
    /// list object): the entries one allocator call records (a
    /// `segment_alloc`/`segment_map` and the `alloc` that follows it, the
    /// `segment_free`s of one `empty_cache`), and a live block's `frames`
    /// with the trace's `alloc` of that block (`context_when_allocated`).
    /// Needs `share_free_stacks`. Default `false` (the bytes of the
    /// checked-in predicted snapshots stay as they are).
    pub share_contexts: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            framing: true,
            share_free_stacks: true,
            share_contexts: false,
        }
    }
}

/// A low-level protocol-4 pickle writer.
///
/// Call the value methods in the order the values should appear on the
/// pickle stack, then [`PickleWriter::finish`]. Errors from the sink are
/// kept and returned by `finish`.
pub struct PickleWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    framing: bool,
    memo: u32,
    strs: HashMap<String, u32>,
    err: Option<io::Error>,
}

impl<W: Write> PickleWriter<W> {
    /// Start a pickle (writes `PROTO 4`).
    pub fn new(mut out: W, framing: bool) -> Self {
        let err = out.write_all(&[0x80, 4]).err();
        PickleWriter {
            out,
            buf: Vec::with_capacity(FRAME_TARGET * 2),
            framing,
            memo: 0,
            strs: HashMap::new(),
            err,
        }
    }

    fn commit(&mut self) {
        if self.buf.is_empty() || self.err.is_some() {
            return;
        }
        let r = if self.framing {
            let mut hdr = [0u8; 9];
            hdr[0] = 0x95;
            hdr[1..].copy_from_slice(&(self.buf.len() as u64).to_le_bytes());
            self.out
                .write_all(&hdr)
                .and_then(|()| self.out.write_all(&self.buf))
        } else {
            self.out.write_all(&self.buf)
        };
        self.err = r.err();
        self.buf.clear();
    }

    #[inline]
    fn maybe_commit(&mut self) {
        if self.buf.len() >= FRAME_TARGET {
            self.commit();
        }
    }

    #[inline]
    fn op(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// `MEMOIZE` the value on top of the stack; returns its memo index.
    pub fn memoize(&mut self) -> u32 {
        self.op(&[0x94]);
        self.memo += 1;
        self.memo - 1
    }

    /// Push memo entry `i` (`BINGET` / `LONG_BINGET`).
    pub fn get(&mut self, i: u32) {
        if i < 256 {
            self.op(&[b'h', i as u8]);
        } else {
            let b = i.to_le_bytes();
            self.op(&[b'j', b[0], b[1], b[2], b[3]]);
        }
    }

    /// `None`.
    pub fn none(&mut self) {
        self.op(b"N");
    }

    /// A bool.
    pub fn bool(&mut self, b: bool) {
        self.op(&[if b { 0x88 } else { 0x89 }]);
    }

    /// An int, in the shortest form CPython uses.
    pub fn int(&mut self, i: i64) {
        if (0..=0xff).contains(&i) {
            self.op(&[b'K', i as u8]);
        } else if (0..=0xffff).contains(&i) {
            let b = (i as u16).to_le_bytes();
            self.op(&[b'M', b[0], b[1]]);
        } else if (i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(&i) {
            let b = (i as i32).to_le_bytes();
            self.op(&[b'J', b[0], b[1], b[2], b[3]]);
        } else {
            self.long1(&i.to_le_bytes());
        }
    }

    /// A non-negative int (may exceed `i64`).
    pub fn uint(&mut self, u: u64) {
        match i64::try_from(u) {
            Ok(i) => self.int(i),
            Err(_) => {
                let mut b = u.to_le_bytes().to_vec();
                b.push(0);
                self.long1(&b);
            }
        }
    }

    /// An arbitrary int from little-endian two's complement bytes.
    pub fn long1(&mut self, le: &[u8]) {
        // minimal length, as CPython's encode_long
        let mut n = le.len();
        while n > 1 {
            let (top, next) = (le[n - 1], le[n - 2] & 0x80);
            if (top == 0 && next == 0) || (top == 0xff && next != 0) {
                n -= 1;
            } else {
                break;
            }
        }
        let le = if le.is_empty() || (n == 1 && le[0] == 0) {
            &[][..]
        } else {
            &le[..n]
        };
        if le.len() < 256 {
            self.op(&[0x8a, le.len() as u8]);
        } else {
            self.op(&[0x8b]);
            self.op(&(le.len() as u32).to_le_bytes());
        }
        self.op(le);
    }

    /// A float (`BINFLOAT`).
    pub fn float(&mut self, f: f64) {
        self.op(b"G");
        self.op(&f.to_be_bytes());
    }

    /// A str, memoized by content: the second time it is a memo get.
    pub fn str(&mut self, s: &str) {
        if let Some(&i) = self.strs.get(s) {
            self.get(i);
            return;
        }
        let b = s.as_bytes();
        if b.len() < 256 {
            self.op(&[0x8c, b.len() as u8]);
        } else if let Ok(n) = u32::try_from(b.len()) {
            self.op(b"X");
            self.op(&n.to_le_bytes());
        } else {
            self.op(&[0x8d]);
            self.op(&(b.len() as u64).to_le_bytes());
        }
        self.op(b);
        let i = self.memoize();
        self.strs.insert(s.to_owned(), i);
        self.maybe_commit();
    }

    /// A bytes object (memoized, like CPython).
    pub fn bytes(&mut self, b: &[u8]) {
        if b.len() < 256 {
            self.op(&[b'C', b.len() as u8]);
        } else if let Ok(n) = u32::try_from(b.len()) {
            self.op(b"B");
            self.op(&n.to_le_bytes());
        } else {
            self.op(&[0x8e]);
            self.op(&(b.len() as u64).to_le_bytes());
        }
        self.op(b);
        self.memoize();
        self.maybe_commit();
    }

    /// `EMPTY_DICT` + `MEMOIZE`; returns the memo index.
    pub fn empty_dict(&mut self) -> u32 {
        self.op(b"}");
        self.memoize()
    }

    /// `EMPTY_LIST` + `MEMOIZE`; returns the memo index.
    pub fn empty_list(&mut self) -> u32 {
        self.op(b"]");
        self.memoize()
    }

    /// `MARK`.
    pub fn mark(&mut self) {
        self.op(b"(");
    }

    /// Raw opcode bytes (e.g. `b"u"` for SETITEMS, `b"e"` for APPENDS).
    pub fn raw(&mut self, ops: &[u8]) {
        self.op(ops);
        self.maybe_commit();
    }

    /// Write `n` list items in CPython's batches: `item(w, i)` pushes item `i`.
    /// The list itself must be on top of the stack.
    pub fn appends(&mut self, n: usize, item: impl FnMut(&mut Self, usize)) {
        self.batched(n, (b"e", b"a"), item);
    }

    /// Write `n` dict entries in CPython's batches: `entry(w, i)` pushes key
    /// and value of entry `i`. The dict must be on top of the stack.
    pub fn setitems(&mut self, n: usize, entry: impl FnMut(&mut Self, usize)) {
        self.batched(n, (b"u", b"s"), entry);
    }

    /// `_batch_appends` / `_batch_setitems`: batches of up to `BATCH`
    /// pushed by `push(w, i)`, each closed by `ops.0` (APPENDS, SETITEMS)
    /// after a MARK, or by `ops.1` (APPEND, SETITEM) when it holds one.
    fn batched(&mut self, n: usize, ops: (&[u8], &[u8]), mut push: impl FnMut(&mut Self, usize)) {
        let mut i = 0;
        while i < n {
            let m = (n - i).min(BATCH);
            if m > 1 {
                self.mark();
            }
            for j in i..i + m {
                push(self, j);
                self.maybe_commit();
            }
            self.raw(if m > 1 { ops.0 } else { ops.1 });
            i += m;
        }
    }

    /// A generic owned value.
    pub fn value(&mut self, v: &Value) {
        match v {
            Value::None => self.none(),
            Value::Bool(b) => self.bool(*b),
            Value::Int(i) => self.int(*i),
            Value::BigInt(b) => self.long1(b.le_bytes()),
            Value::Float(f) => self.float(*f),
            Value::Str(s) => self.str(s),
            Value::Bytes(b) => self.bytes(b),
            Value::ByteArray(b) => {
                self.op(&[0x96]);
                self.op(&(b.len() as u64).to_le_bytes());
                self.op(b);
                self.memoize();
            }
            Value::List(items) => {
                self.empty_list();
                self.appends(items.len(), |w, i| w.value(&items[i]));
            }
            Value::Tuple(items) => {
                match items.len() {
                    0 => {
                        self.op(b")");
                        return;
                    }
                    1..=3 => {
                        for it in items {
                            self.value(it);
                        }
                        self.op(&[0x84 + items.len() as u8]);
                    }
                    _ => {
                        self.mark();
                        for it in items {
                            self.value(it);
                        }
                        self.op(b"t");
                    }
                }
                self.memoize();
            }
            Value::Dict(pairs) => {
                self.empty_dict();
                self.setitems(pairs.len(), |w, i| {
                    w.value(&pairs[i].0);
                    w.value(&pairs[i].1);
                });
            }
            Value::Set(items) => {
                self.op(&[0x8f]);
                self.memoize();
                let mut i = 0;
                while i < items.len() {
                    let m = (items.len() - i).min(BATCH);
                    self.mark();
                    for it in &items[i..i + m] {
                        self.value(it);
                    }
                    self.raw(&[0x90]);
                    i += m;
                }
            }
            Value::FrozenSet(items) => {
                self.mark();
                for it in items {
                    self.value(it);
                }
                self.op(&[0x91]);
                self.memoize();
            }
            Value::Global { module, name } => {
                self.str(module);
                self.str(name);
                self.op(&[0x93]);
                self.memoize();
            }
        }
        self.maybe_commit();
    }

    /// Write `STOP`, flush, and return the sink.
    pub fn finish(mut self) -> io::Result<W> {
        self.op(b".");
        self.commit();
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One dict field value for [`SnapWriter::dict`].
enum F<'a> {
    I(i64),
    U(u64),
    S(&'a str),
    B(bool),
    Fl(f64),
    Stack(StackId, Option<u64>),
    /// A frames list already written: its memo index.
    Memo(u32),
    Pair(u64, u64),
    V(&'a Value),
    Blocks(&'a [Block]),
    History(&'a [History]),
    Roundup(&'a RoundupPower2Divisions),
}

struct SnapWriter<'s, W: Write> {
    w: PickleWriter<W>,
    s: &'s Snapshot,
    frames: HashMap<FrameId, u32>,
    /// addr → (stack, memo index of its list) of the last free_requested
    free_lists: HashMap<u64, (StackId, u32)>,
    share: bool,
    contexts: bool,
    /// (device, address) → (stack, memo index of its list) of live blocks.
    block_lists: HashMap<(i64, u64), (StackId, u32)>,
    /// The device whose segment is being written.
    seg_device: i64,
    /// Index in the device's trace → the live block's list its `alloc` shares.
    alloc_shares: HashMap<usize, (StackId, u32)>,
    /// The previous trace entry's action, stack and list.
    prev: Option<(Option<TraceAction>, StackId, u32)>,
    /// The memo index of the last frames list written.
    last_list: u32,
}

impl<W: Write> SnapWriter<'_, W> {
    fn field(&mut self, f: &F<'_>) {
        match *f {
            F::I(i) => self.w.int(i),
            F::U(u) => self.w.uint(u),
            F::S(s) => self.w.str(s),
            F::B(b) => self.w.bool(b),
            F::Fl(x) => self.w.float(x),
            F::Stack(id, share_key) => self.stack(id, share_key),
            F::Memo(m) => {
                self.w.get(m);
                self.last_list = m;
            }
            F::Pair(a, b) => {
                self.w.int(a as i64);
                self.w.int(b as i64);
                self.w.op(&[0x86]);
                self.w.memoize();
            }
            F::V(v) => self.w.value(v),
            F::Blocks(bs) => {
                self.w.empty_list();
                let n = bs.len();
                for (i, b) in bs.iter().enumerate() {
                    if i % BATCH == 0 && n - i > 1 {
                        self.w.mark();
                    }
                    self.block(b);
                    let end_of_batch = (i + 1) % BATCH == 0 || i + 1 == n;
                    if end_of_batch {
                        let batch = if (i + 1) % BATCH == 0 {
                            BATCH
                        } else {
                            n % BATCH
                        };
                        self.w.raw(if batch > 1 { b"e" } else { b"a" });
                    }
                }
            }
            F::History(hs) => {
                self.w.empty_list();
                let n = hs.len();
                for (i, h) in hs.iter().enumerate() {
                    if i % BATCH == 0 && n - i > 1 {
                        self.w.mark();
                    }
                    self.dict(&[
                        ("addr", F::U(h.addr)),
                        ("real_size", F::U(h.real_size)),
                        ("frames", F::Stack(h.frames, None)),
                    ]);
                    let end_of_batch = (i + 1) % BATCH == 0 || i + 1 == n;
                    if end_of_batch {
                        let batch = if (i + 1) % BATCH == 0 {
                            BATCH
                        } else {
                            n % BATCH
                        };
                        self.w.raw(if batch > 1 { b"e" } else { b"a" });
                    }
                }
            }
            F::Roundup(r) => match r {
                RoundupPower2Divisions::PerBucket(b) => {
                    self.w.empty_dict();
                    self.w.setitems(b.len(), |w, i| {
                        w.str(&b[i].0.to_string());
                        w.uint(b[i].1);
                    });
                }
                RoundupPower2Divisions::Uniform(u) => self.w.uint(*u),
                RoundupPower2Divisions::Other(v) => self.w.value(v),
            },
        }
    }

    fn dict(&mut self, fields: &[(&str, F<'_>)]) {
        self.w.empty_dict();
        let n = fields.len();
        if n == 0 {
            return;
        }
        if n > 1 {
            self.w.mark();
        }
        for (k, v) in fields {
            self.w.str(k);
            self.field(v);
        }
        self.w.raw(if n > 1 { b"u" } else { b"s" });
    }

    fn stack(&mut self, id: StackId, free_key: Option<u64>) {
        if let Some((addr, completed)) = free_key.map(|k| (k >> 1, k & 1 == 1)) {
            if completed {
                if let Some(&(sid, memo)) = self.free_lists.get(&addr) {
                    if sid == id {
                        self.w.get(memo);
                        self.last_list = memo;
                        return;
                    }
                }
            }
        }
        let memo = self.w.empty_list();
        self.last_list = memo;
        if let Some(k) = free_key {
            if k & 1 == 0 {
                self.free_lists.insert(k >> 1, (id, memo));
            }
        }
        let ids = self.s.stacks.stack_frame_ids(id);
        let n = ids.len();
        let mut i = 0;
        while i < n {
            let m = (n - i).min(BATCH);
            if m > 1 {
                self.w.mark();
            }
            for &f in &ids[i..i + m] {
                self.frame(f);
            }
            self.w.raw(if m > 1 { b"e" } else { b"a" });
            i += m;
        }
    }

    fn frame(&mut self, f: FrameId) {
        if let Some(&m) = self.frames.get(&f) {
            self.w.get(m);
            return;
        }
        let fr = self.s.stacks.frame(f);
        let memo = self.w.empty_dict();
        self.w.mark();
        self.w.str("name");
        self.w.str(fr.name);
        self.w.str("filename");
        self.w.str(fr.filename);
        self.w.str("line");
        // a negative line is PyTorch's `uint64_t` read back (`convert::line_of`)
        self.w.uint(fr.line as u64);
        self.w.raw(b"u");
        self.frames.insert(f, memo);
    }

    fn block(&mut self, b: &Block) {
        let state = match b.state {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
            BlockState::Other(s) => self.s.str(s),
        };
        let mut f: Vec<(&str, F<'_>)> = Vec::with_capacity(6);
        if let Some(a) = b.address {
            f.push(("address", F::U(a)));
        }
        f.push(("size", F::U(b.size)));
        f.push(("requested_size", F::U(b.requested_size)));
        f.push(("state", F::S(state)));
        f.push(("frames", F::Stack(b.frames, None)));
        if let Some(h) = &b.history {
            f.push(("history", F::History(h)));
        }
        // `dict`, remembering the frames list (history lists follow it).
        self.w.empty_dict();
        self.w.mark();
        let mut memo = None;
        for (k, v) in &f {
            self.w.str(k);
            self.field(v);
            if *k == "frames" {
                memo = Some(self.last_list);
            }
        }
        self.w.raw(b"u");
        let live = matches!(b.state, BlockState::ActiveAllocated);
        if let (true, true, Some(a), Some(m)) = (self.contexts, live, b.address, memo) {
            self.block_lists.insert((self.seg_device, a), (b.frames, m));
        }
    }

    fn segment(&mut self, g: &Segment) {
        let st = match &g.segment_type {
            SegmentType::Large => "large",
            SegmentType::Small => "small",
            SegmentType::Other(s) => s.as_str(),
        };
        self.seg_device = g.device;
        self.dict(&[
            ("device", F::I(g.device)),
            ("address", F::U(g.address)),
            ("total_size", F::U(g.total_size)),
            ("allocated_size", F::U(g.allocated_size)),
            ("active_size", F::U(g.active_size)),
            ("requested_size", F::U(g.requested_size)),
            ("stream", F::I(g.stream as i64)),
            ("segment_type", F::S(st)),
            (
                "segment_pool_id",
                F::Pair(g.segment_pool_id.0, g.segment_pool_id.1),
            ),
            ("is_expandable", F::B(g.is_expandable)),
            ("frames", F::Stack(g.frames, None)),
            ("blocks", F::Blocks(&g.blocks)),
        ]);
    }

    /// Before device `dev`'s trace `t` is written: which `alloc` entries
    /// share a live block's list (the last `alloc` at the block's address,
    /// with its stack).
    fn start_trace(&mut self, dev: i64, t: &crate::trace::Trace) {
        self.free_lists.clear();
        self.prev = None;
        self.alloc_shares.clear();
        if !self.contexts || self.block_lists.is_empty() {
            return;
        }
        let mut last: HashMap<u64, (usize, StackId)> = HashMap::new();
        for (i, e) in t.iter().enumerate() {
            if e.action == Some(TraceAction::Alloc) && self.block_lists.contains_key(&(dev, e.addr))
            {
                last.insert(e.addr, (i, e.frames));
            }
        }
        for (addr, (i, frames)) in last {
            if let Some(&(sid, m)) = self.block_lists.get(&(dev, addr)) {
                if sid == frames {
                    self.alloc_shares.insert(i, (sid, m));
                }
            }
        }
    }

    /// The list entry `i` shares with what was written before, if any.
    fn shared_list(&self, i: usize, e: &TraceEntry) -> Option<u32> {
        if !self.contexts || e.frames == StackId::EMPTY {
            return None;
        }
        if let Some(&(_, m)) = self.alloc_shares.get(&i) {
            return Some(m);
        }
        use TraceAction::*;
        let (pa, ps, pm) = self.prev?;
        // One allocator call, one context: a segment action and what the
        // same call records next (CUDACachingAllocator.cpp's record_trace
        // calls pass the call's `context`).
        let same_call = matches!(
            pa,
            Some(SegmentAlloc | SegmentMap | SegmentFree | SegmentUnmap)
        ) && matches!(
            e.action,
            Some(Alloc | SegmentAlloc | SegmentMap | SegmentFree | SegmentUnmap)
        );
        (same_call && ps == e.frames).then_some(pm)
    }

    fn entry(&mut self, i: usize, e: &TraceEntry) {
        let s = self.s;
        let mut f: Vec<(&str, F<'_>)> = Vec::with_capacity(9);
        f.push(("action", F::S(s.action_name(e))));
        match e.device_free {
            Some(d) if e.action == Some(TraceAction::Oom) => f.push(("device_free", F::U(d))),
            other => {
                f.push(("addr", F::U(e.addr)));
                if let Some(d) = other {
                    f.push(("device_free", F::U(d)));
                }
            }
        }
        f.push(("size", F::U(e.size)));
        f.push(("stream", F::I(e.stream as i64)));
        if let Some(t) = e.time_us {
            f.push(("time_us", F::I(t)));
        }
        if let Some(c) = e.compile_context {
            f.push(("compile_context", F::S(s.str(c))));
        }
        if let Some(u) = e.user_metadata {
            f.push(("user_metadata", F::S(s.str(u))));
        }
        let key = match e.action {
            _ if !self.share || e.addr >= 1 << 63 => None,
            Some(TraceAction::FreeRequested) => Some(e.addr << 1),
            Some(TraceAction::FreeCompleted) => Some(e.addr << 1 | 1),
            _ => None,
        };
        match self.shared_list(i, e) {
            Some(m) => f.push(("frames", F::Memo(m))),
            None => f.push(("frames", F::Stack(e.frames, key))),
        }
        self.dict(&f);
        self.prev = Some((e.action, e.frames, self.last_list));
    }

    fn settings(&mut self, a: &AllocatorSettings) {
        let mut f: Vec<(&str, F<'_>)> = Vec::new();
        if let Some(v) = &a.pytorch_cuda_alloc_conf {
            f.push(("PYTORCH_CUDA_ALLOC_CONF", F::S(v)));
        }
        if let Some(v) = a.max_split_size {
            f.push(("max_split_size", F::I(v)));
        }
        if let Some(v) = a.garbage_collection_threshold {
            f.push(("garbage_collection_threshold", F::Fl(v)));
        }
        if let Some(v) = a.expandable_segments {
            f.push(("expandable_segments", F::B(v)));
        }
        if let Some(v) = a.pinned_num_register_threads {
            f.push(("pinned_num_register_threads", F::I(v)));
        }
        if let Some(v) = a.release_lock_on_cudamalloc {
            f.push(("release_lock_on_cudamalloc", F::B(v)));
        }
        if let Some(v) = a.pinned_use_cuda_host_register {
            f.push(("pinned_use_cuda_host_register", F::B(v)));
        }
        for (k, v) in &a.other {
            f.push((k, F::V(v)));
        }
        if let Some(r) = &a.roundup_power2_divisions {
            f.push(("roundup_power2_divisions", F::Roundup(r)));
        }
        self.dict(&f);
    }

    fn annotation(&mut self, a: &Annotation) {
        let mut f: Vec<(&str, F<'_>)> = vec![
            ("stage", F::S(&a.stage)),
            ("name", F::S(&a.name)),
            ("device", F::I(a.device)),
            ("time_us", F::I(a.time_us)),
        ];
        for (k, v) in &a.other {
            f.push((k, F::V(v)));
        }
        self.dict(&f);
    }

    fn list_of<T>(&mut self, items: &[T], mut each: impl FnMut(&mut Self, &T)) {
        self.list_iter(items.iter(), |sw, it| each(sw, it));
    }

    /// A list of `items`, appended in batches of [`BATCH`] as Python does.
    fn list_iter<T>(
        &mut self,
        mut items: impl ExactSizeIterator<Item = T>,
        mut each: impl FnMut(&mut Self, T),
    ) {
        self.w.empty_list();
        let n = items.len();
        let mut i = 0;
        while i < n {
            let m = (n - i).min(BATCH);
            if m > 1 {
                self.w.mark();
            }
            for it in items.by_ref().take(m) {
                each(self, it);
            }
            self.w.raw(if m > 1 { b"e" } else { b"a" });
            i += m;
        }
    }
}

/// Serialise `s` as a protocol-4 pickle into `out`.
///
/// The layout is PyTorch's: a dict with `segments`, `device_traces`,
/// `allocator_settings` (when present), `external_annotations`, then
/// `host_segments`/`host_traces` and other raw keys when present.
pub fn write_snapshot<W: Write>(s: &Snapshot, out: W, opts: &WriteOptions) -> io::Result<W> {
    let mut sw = SnapWriter {
        w: PickleWriter::new(out, opts.framing),
        s,
        frames: HashMap::new(),
        free_lists: HashMap::new(),
        share: opts.share_free_stacks,
        contexts: opts.share_free_stacks && opts.share_contexts,
        block_lists: HashMap::new(),
        seg_device: 0,
        alloc_shares: HashMap::new(),
        prev: None,
        last_list: 0,
    };
    sw.w.empty_dict();
    sw.w.mark();
    sw.w.str("segments");
    sw.list_of(&s.segments, |sw, g| sw.segment(g));
    sw.w.str("device_traces");
    let mut dev = 0;
    sw.list_of(&s.device_traces, |sw, t| {
        sw.start_trace(dev, t);
        dev += 1;
        sw.list_iter(t.iter().enumerate(), |sw, (i, e)| sw.entry(i, &e));
    });
    if let Some(a) = &s.allocator_settings {
        sw.w.str("allocator_settings");
        sw.settings(a);
    }
    sw.w.str("external_annotations");
    sw.list_of(&s.external_annotations, |sw, a| sw.annotation(a));
    if let Some(v) = &s.host_segments {
        sw.w.str("host_segments");
        sw.w.value(v);
    }
    if let Some(v) = &s.host_traces {
        sw.w.str("host_traces");
        sw.w.value(v);
    }
    for (k, v) in &s.other {
        sw.w.str(k);
        sw.w.value(v);
    }
    sw.w.raw(b"u");
    sw.w.finish()
}

/// Serialise `s` to a pickle in memory.
pub fn snapshot_to_bytes(s: &Snapshot, opts: &WriteOptions) -> Vec<u8> {
    // Writing into a Vec cannot fail.
    write_snapshot(s, Vec::new(), opts).unwrap_or_default()
}

/// Serialise `s` to a file.
pub fn write_snapshot_file(
    s: &Snapshot,
    path: impl AsRef<Path>,
    opts: &WriteOptions,
) -> Result<(), Error> {
    let path = path.as_ref();
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let f = std::fs::File::create(path).map_err(io_err)?;
    let w = write_snapshot(s, io::BufWriter::with_capacity(1 << 20, f), opts).map_err(io_err)?;
    w.into_inner()
        .map_err(|e| io_err(e.into_error()))?
        .sync_all()
        .map_err(io_err)
}
