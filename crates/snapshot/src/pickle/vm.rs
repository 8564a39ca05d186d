//! The pickle virtual machine. It never imports or calls anything: the only
//! "callables" are a handful of whitelisted builtin constructors, which are
//! emulated here on plain data.

use std::collections::{BTreeMap, HashMap};

use super::input::{Eof, Input};
use super::keys::{key_eq, key_hash, KeyCx, KeyErr, UNSET};
use super::store::{le_to_i64, normalize_le, Slot, Span, Store};
use super::text;
use super::val::{type_name, Tag, Val};
use super::Pickle;
use crate::chunked::ChunkedVec;
use crate::hash::{hash_words, mix, random_seed, IdBuild};
use crate::Error;

type R<T> = Result<T, Error>;

const NIL: u32 = u32::MAX;
/// Dicts/sets up to this size are searched linearly.
const SMALL: usize = 12;
/// Lists up to this length are hash-consed when frozen.
const DEDUP_MAX_LIST: usize = 1024;
/// Shapes (dict key lists) up to this size are hash-consed.
const DEDUP_MAX_SHAPE: usize = 64;
/// The `what` of the error returned when an [`Absorb`] hook bails.
pub(crate) const BAIL: &str = "snapshot fast path gave up (internal; retried generically)";

#[derive(Default)]
struct KeyIndex {
    map: HashMap<u64, u32, IdBuild>,
    prev: Vec<u32>,
}

#[derive(Default)]
struct SeqB {
    items: Vec<Val>,
    index: Option<KeyIndex>,
}

#[derive(Default)]
struct DictB {
    keys: Vec<Val>,
    vals: Vec<Val>,
    index: Option<KeyIndex>,
}

/// The dense memo's cells: 4 bytes each while every value packs into 32
/// bits (what pickles memoize: containers and strings, with ids below
/// 2^28), 8 bytes each from the first one that does not.
enum Cells {
    Narrow(ChunkedVec<u32>),
    Wide(ChunkedVec<Val>),
}

impl Default for Cells {
    fn default() -> Self {
        Cells::Narrow(ChunkedVec::default())
    }
}

impl Cells {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Cells::Narrow(c) => c.len(),
            Cells::Wide(c) => c.len(),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<Val> {
        match self {
            Cells::Narrow(c) => c.get(i).map(|&x| Val::unpack(x)),
            Cells::Wide(c) => c.get(i).copied(),
        }
    }

    /// Switch to 8-byte cells.
    fn widen(&mut self) -> &mut ChunkedVec<Val> {
        if let Cells::Narrow(c) = self {
            *self = Cells::Wide(c.iter().map(|&x| Val::unpack(x)).collect());
        }
        match self {
            Cells::Wide(c) => c,
            Cells::Narrow(_) => unreachable!("just widened"),
        }
    }

    #[inline]
    fn push(&mut self, v: Val) {
        match (&mut *self, v.pack()) {
            (Cells::Narrow(c), Some(x)) => c.push(x),
            (Cells::Wide(c), _) => c.push(v),
            (Cells::Narrow(_), None) => self.widen().push(v),
        }
    }

    /// Set cell `i < len`.
    #[inline]
    fn set(&mut self, i: usize, v: Val) {
        match (&mut *self, v.pack()) {
            (Cells::Narrow(c), Some(x)) => c[i] = x,
            (Cells::Wide(c), _) => c[i] = v,
            (Cells::Narrow(_), None) => self.widen()[i] = v,
        }
    }
}

/// The memo: dense for the usual 0,1,2,... indices, sparse for odd ones,
/// and at most one hole: the indices a spliced trace memoized
/// ([`Vm::splice`]), none of them stored, all `None` but the few named
/// after the trace. Indices past the hole sit in `dense` moved down by its
/// length.
#[derive(Default)]
struct Memo {
    /// (In chunks, 4 bytes a cell: a trace memoizes millions of objects.)
    dense: Cells,
    sparse: BTreeMap<u64, Val>,
    count: u64,
    /// Whether an index was ever stored twice (Python's pickler never
    /// does): the same memo gets may then mean other objects.
    overwritten: bool,
    /// The hole's indices `hole.0..hole.1` (empty when there is none).
    hole: (u64, u64),
    /// The hole's indices that hold something, in increasing order.
    named: Vec<(u64, Val)>,
}

impl Memo {
    /// Where index `i` lies in `dense` (`Err`: inside the hole).
    #[inline]
    fn cell(&self, i: u64) -> Result<u64, ()> {
        let (from, to) = self.hole;
        if i < from {
            Ok(i)
        } else if i < to {
            Err(())
        } else {
            Ok(i - (to - from))
        }
    }

    /// One past the last index `dense` holds.
    #[inline]
    fn end(&self) -> u64 {
        self.dense.len() as u64 + (self.hole.1 - self.hole.0)
    }

    #[inline]
    fn get(&self, i: u64) -> Option<Val> {
        let Ok(c) = self.cell(i) else {
            let k = self.named.binary_search_by_key(&i, |&(k, _)| k);
            return Some(k.map_or(Val::NONE, |k| self.named[k].1));
        };
        if let Some(v) = usize::try_from(c).ok().and_then(|c| self.dense.get(c)) {
            return (v != Val::EMPTY).then_some(v);
        }
        self.sparse.get(&i).copied()
    }

    #[inline]
    fn put(&mut self, i: u64, v: Val) {
        let n = self.end();
        if i == n && self.sparse.is_empty() {
            self.dense.push(v);
            self.count += 1;
            return;
        }
        let Ok(c) = self.cell(i) else {
            // the hole's indices all hold something already
            self.overwritten = true;
            match self.named.binary_search_by_key(&i, |&(k, _)| k) {
                Ok(k) => self.named[k].1 = v,
                Err(k) => self.named.insert(k, (i, v)),
            }
            return;
        };
        if i < n {
            if self.dense.get(c as usize) == Some(Val::EMPTY) {
                self.count += 1;
            } else {
                self.overwritten = true;
            }
            self.dense.set(c as usize, v);
            return;
        }
        // grow the dense part only while it stays at least ~half full
        if i <= 2 * self.count + 64 && c < u64::from(u32::MAX) {
            while (self.dense.len() as u64) <= c {
                self.dense.push(Val::EMPTY);
            }
            if !self.sparse.is_empty() {
                let moved: Vec<(u64, Val)> =
                    self.sparse.range(n..=i).map(|(&k, &v)| (k, v)).collect();
                for (k, val) in moved {
                    self.sparse.remove(&k);
                    if let Ok(kc) = self.cell(k) {
                        self.dense.set(kc as usize, val);
                    }
                }
            }
            if self.dense.get(c as usize) == Some(Val::EMPTY) {
                self.count += 1;
            } else {
                self.overwritten = true;
            }
            self.dense.set(c as usize, v);
        } else if self.sparse.insert(i, v).is_none() {
            self.count += 1;
        } else {
            self.overwritten = true;
        }
    }

    /// Make `dense`'s end the start of a hole of `n` indices, holding
    /// `named` (increasing, inside it) and `None` elsewhere; `false` where
    /// the memo has a hole already, odd indices, or the names do not fit.
    fn hole(&mut self, n: u64, named: Vec<(u64, Val)>) -> bool {
        let from = self.dense.len() as u64;
        let Some(to) = from.checked_add(n) else {
            return false;
        };
        if self.hole.1 != 0
            || !self.sparse.is_empty()
            || self.count != from
            || named.iter().any(|&(k, _)| !(from..to).contains(&k))
            || named.windows(2).any(|w| w[0].0 >= w[1].0)
        {
            return false;
        }
        self.hole = (from, to);
        self.named = named;
        self.count = to;
        true
    }
}

/// Whitelisted globals. Everything else is refused at `GLOBAL` time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Callable {
    OrderedDict,
    Dict,
    List,
    Tuple,
    Set,
    FrozenSet,
    ByteArray,
    Bytes,
    Encode,
}

fn whitelist(module: &str, name: &str) -> Option<Callable> {
    match (module, name) {
        ("collections", "OrderedDict") => Some(Callable::OrderedDict),
        ("_codecs", "encode") => Some(Callable::Encode),
        ("builtins" | "__builtin__", n) => match n {
            "dict" => Some(Callable::Dict),
            "list" => Some(Callable::List),
            "tuple" => Some(Callable::Tuple),
            "set" => Some(Callable::Set),
            "frozenset" => Some(Callable::FrozenSet),
            "bytearray" => Some(Callable::ByteArray),
            "bytes" => Some(Callable::Bytes),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn op_name(op: u8) -> &'static str {
    match op {
        b'(' => "MARK",
        b'.' => "STOP",
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'L' => "LONG",
        b'M' => "BININT2",
        b'N' => "NONE",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'X' => "BINUNICODE",
        b'a' => "APPEND",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'd' => "DICT",
        b'}' => "EMPTY_DICT",
        b'e' => "APPENDS",
        b'g' => "GET",
        b'h' => "BINGET",
        b'i' => "INST",
        b'j' => "LONG_BINGET",
        b'l' => "LIST",
        b']' => "EMPTY_LIST",
        b'o' => "OBJ",
        b'p' => "PUT",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        b's' => "SETITEM",
        b't' => "TUPLE",
        b')' => "EMPTY_TUPLE",
        b'u' => "SETITEMS",
        b'G' => "BINFLOAT",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x80 => "PROTO",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x85 => "TUPLE1",
        0x86 => "TUPLE2",
        0x87 => "TUPLE3",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        0x8a => "LONG1",
        0x8b => "LONG4",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown opcode",
    }
}

/// A hook that may take over dicts as they are frozen (the snapshot reader
/// turns trace-entry dicts into `TraceEntry`s on the fly). It must be
/// conservative: whenever the VM would need the generic form of something
/// it took over or looked into, it calls [`Absorb::bail`] and the caller
/// redoes the work without the hook.
pub(crate) trait Absorb {
    /// Offered every dict at freeze time; `Some(n)` takes it over. `at`:
    /// the offset of the opcode that completes it (its `EMPTY_DICT` when a
    /// trace entry is decoded in one step, else its `SETITEMS` or the first
    /// opcode that uses it after).
    fn dict(&mut self, st: &Store, id: u32, shape: u32, vals: &[Val], at: usize) -> Option<u32>;
    /// Whether the hook read container `id` (it must then never change).
    fn observed(&self, id: usize) -> bool;
    /// Give up: the result must not be used.
    fn bail(&self);
    /// The offset of an `EMPTY_DICT` where the hook takes over a list's
    /// items ([`Absorb::splice`]); `usize::MAX` for none.
    fn jump_at(&self) -> usize {
        usize::MAX
    }
    /// Take over the list whose items start at [`Absorb::jump_at`]: the
    /// hook interns what they hold into `st` and says which of its items
    /// they are and where decoding goes on; `None` to give up.
    /// `memo` gives what a memo index holds now.
    fn splice(&mut self, st: &mut Store, memo: &dyn Fn(u64) -> Option<Val>) -> Option<Splice> {
        let _ = (st, memo);
        None
    }
}

/// What [`Absorb::splice`] took over: the hook's items from `first` on are
/// the list's (`lens[0]` of them) and the next lists' (`lens[1..]`, lists
/// that follow it in the pickle, each a new item of the list holding it),
/// decoding goes on at offset `to`, and the memo indices
/// `memo_from..memo_to` were stored meanwhile (`strs`: those named later,
/// each a str id in the store; the rest are never named).
pub(crate) struct Splice {
    pub(crate) first: u32,
    pub(crate) lens: Vec<u32>,
    pub(crate) to: usize,
    pub(crate) memo_from: u64,
    pub(crate) memo_to: u64,
    pub(crate) strs: Vec<(u64, u32)>,
}

/// No hook (generic decoding).
impl Absorb for () {
    #[inline]
    fn dict(&mut self, _: &Store, _: u32, _: u32, _: &[Val], _: usize) -> Option<u32> {
        None
    }
    #[inline]
    fn observed(&self, _: usize) -> bool {
        false
    }
    fn bail(&self) {}
}

pub(crate) struct Vm<I, A> {
    inp: I,
    c: Core<A>,
}

pub(crate) struct Core<A> {
    /// The absorb hook.
    ab: A,
    /// Scratch for dict values.
    scratch: Vec<Val>,
    /// Short strings decoded lately, by their bytes: PyTorch writes a
    /// fresh `'N/A'` (`compile_context`) into every trace entry, so most
    /// short strings need neither UTF-8 checking nor hashing again.
    short: [ShortStr; SHORT_SLOTS],
    /// Offset of the opcode being executed.
    at: usize,
    /// The opcode being executed.
    cur: u8,
    /// Whether the opcode byte itself is being read.
    reading_opcode: bool,
    st: Store,
    stack: Vec<Val>,
    marks: Vec<usize>,
    memo: Memo,
    seqb: Vec<SeqB>,
    seq_free: Vec<u32>,
    dictb: Vec<DictB>,
    dict_free: Vec<u32>,
    list_map: HashMap<u64, Span, IdBuild>,
    /// `MARK gets APPENDS` bodies (frames lists, as bytes) → the frozen list
    /// they made; see [`Core::list_of_gets`].
    gets_lists: HashMap<u64, (Box<[u8]>, Span), IdBuild>,
    shape_map: HashMap<u64, u32, IdBuild>,
    /// The shape of the dict frozen last (hash-consing looks there first).
    last_shape: Option<u32>,
    /// The one before it, when they differ: dicts of two shapes alternate
    /// (a trace's entries and the frame dicts first met inside them).
    other_shape: Option<u32>,
    /// Whether a trace entry's dict is decoded in one step
    /// ([`Core::trace_entry`]); off only to test it against the opcodes
    /// one by one.
    whole_entries: bool,
    /// Trace entries decoded in one step so far.
    whole: u64,
    /// The shape of the last of them and its keys' memo indices.
    entry_keys: (u32, [u32; MAX_KEYS]),
    kc: KeyCx,
    proto: u8,
    /// [`Absorb::jump_at`], until the jump.
    jump_at: usize,
}

/// Most keys of a trace entry decoded in one step (an entry has 7 to 9).
const MAX_KEYS: usize = 12;

/// A value of a trace entry's dict, checked but not yet stored
/// ([`Core::trace_entry`]).
#[derive(Clone, Copy)]
enum Part {
    /// A value as it is.
    Val(Val),
    /// `SHORT_BINUNICODE` at `w[at]`, its bytes `w[from..from + len]`,
    /// then a MEMOIZE or not.
    Str {
        at: usize,
        from: usize,
        len: usize,
        memo: bool,
    },
    /// A fresh frames list: its items.
    List(Span),
    /// `LONG1` at `w[at]` of an int too wide to be inline (stored when
    /// the dict is).
    Int { at: usize, i: i64 },
}

/// Longest string kept in [`Core`]'s cache of short strings.
const SHORT_LEN: usize = 15;
/// Slots of that cache (direct-mapped by length and first byte).
const SHORT_SLOTS: usize = 16;

/// One short string's bytes and the interned value they decoded to.
#[derive(Clone, Copy)]
struct ShortStr {
    /// Its length; `u8::MAX` for an empty slot.
    len: u8,
    bytes: [u8; SHORT_LEN],
    val: Val,
}

impl ShortStr {
    const EMPTY: ShortStr = ShortStr {
        len: u8::MAX,
        bytes: [0; SHORT_LEN],
        val: Val::NONE,
    };
}

/// The int `LONG1` of `n` bytes (at most 8) encodes, its bytes the first
/// `n` of `raw` (little-endian two's complement, as `pickle.encode_long`
/// writes them): one 8-byte load and a sign-extending shift instead of a
/// copy of `n` bytes, whose store the load then waits on.
#[inline]
fn long1(raw: [u8; 8], n: u8) -> i64 {
    if n == 0 {
        return 0;
    }
    let shift = 64 - 8 * u32::from(n);
    (i64::from_le_bytes(raw) << shift) >> shift
}

fn u32_of(n: usize, at: usize) -> R<u32> {
    u32::try_from(n).map_err(|_| Error::LimitExceeded {
        offset: Some(at),
        what: "more than 4 Gi items of one kind",
    })
}

impl<I: Input, A: Absorb> Vm<I, A> {
    /// `len_hint`: input length if known (bounds the key-comparison budget).
    pub(crate) fn new(inp: I, len_hint: Option<u64>, ab: A) -> Self {
        Vm {
            inp,
            c: Core::new(len_hint, ab),
        }
    }

    /// Decode every opcode one by one, never a trace entry in one step
    /// (for tests that hold the two to the same result).
    pub(crate) fn stepwise(mut self) -> Self {
        self.c.whole_entries = false;
        self
    }

    /// Decode; also hands back the hook and the input.
    pub(crate) fn run(mut self) -> (R<Pickle>, A, I) {
        let r = self.run_inner();
        let Core {
            mut st, proto, ab, ..
        } = self.c;
        st.input_len = self.inp.pos() as u64;
        (r.map(|root| Pickle { st, root, proto }), ab, self.inp)
    }

    fn run_inner(&mut self) -> R<Val> {
        let root = self.exec()?;
        let c = &mut self.c;

        // freeze whatever is still being built
        for id in 0..c.st.slots.len() {
            if let Slot::Building { b, dict, .. } = c.st.slots.at(id) {
                c.freeze(id, b, dict)?;
            }
        }
        Ok(root)
    }

    fn exec(&mut self) -> R<Val> {
        let Vm { inp, c } = self;
        macro_rules! byte {
            () => {
                inp.byte().map_err(|e| c.eof(e))?
            };
        }
        macro_rules! arr {
            ($n:expr) => {{
                let s = inp.take($n).map_err(|e| c.eof(e))?;
                let mut a = [0u8; $n];
                a.copy_from_slice(s);
                a
            }};
        }
        macro_rules! take {
            ($n:expr) => {
                inp.take($n).map_err(|e| c.eof(e))?
            };
        }
        macro_rules! line {
            () => {
                inp.line().map_err(|e| c.eof(e))?
            };
        }
        loop {
            c.at = inp.pos();
            // Fast path: the hottest fixed-size opcodes, decoded straight
            // from the buffered window.
            if let [op, a, b, cc, d, ..] = *inp.window() {
                match op {
                    b'h' | b'j' | b'K' | b'M' | b'J' | 0x8a | 0x94 => {
                        // A run of the small opcodes that make up trace
                        // entries and frames lists (memo gets, small ints,
                        // MEMOIZE), decoded in one tight loop from the
                        // window. An opcode that fails, or does not fit the
                        // window, ends the run and is left to the general
                        // path (which reports any error).
                        let _ = (a, b, cc, d);
                        let w = inp.window();
                        let mut p = 0;
                        loop {
                            // 10 bytes hold any of these opcodes (LONG1 of
                            // 8 bytes); the window's last few are left to
                            // the general path
                            let (v, len) = match w.get(p..p + 10) {
                                Some(&[b'h', x, ..]) => match c.memo.get(u64::from(x)) {
                                    Some(v) => (v, 2),
                                    None => break,
                                },
                                Some(&[b'j', x0, x1, x2, x3, ..]) => {
                                    let i = u32::from_le_bytes([x0, x1, x2, x3]);
                                    match c.memo.get(u64::from(i)) {
                                        Some(v) => (v, 5),
                                        None => break,
                                    }
                                }
                                Some(&[b'K', x, ..]) => (Val::new(Tag::Int, u32::from(x)), 2),
                                Some(&[b'M', x0, x1, ..]) => (
                                    Val::new(Tag::Int, u32::from(u16::from_le_bytes([x0, x1]))),
                                    3,
                                ),
                                Some(&[b'J', x0, x1, x2, x3, ..]) => {
                                    let i = i32::from_le_bytes([x0, x1, x2, x3]);
                                    match Val::small_int(i64::from(i)) {
                                        Some(v) => (v, 5),
                                        None => break,
                                    }
                                }
                                Some(&[0x8a, n, r0, r1, r2, r3, r4, r5, r6, r7]) if n <= 8 => {
                                    let i = long1([r0, r1, r2, r3, r4, r5, r6, r7], n);
                                    match Val::small_int(i) {
                                        Some(v) => (v, 2 + usize::from(n)),
                                        None => break,
                                    }
                                }
                                Some(&[0x94, ..]) => {
                                    match c.stack.last().filter(|_| c.stack.len() > c.floor()) {
                                        Some(&v) => {
                                            let i = c.memo.count;
                                            c.memo.put(i, v);
                                        }
                                        None => break,
                                    }
                                    p += 1;
                                    continue;
                                }
                                _ => break,
                            };
                            c.stack.push(v);
                            p += len;
                        }
                        if p > 0 {
                            inp.skip(p);
                            continue;
                        }
                    }
                    b'}' => {
                        if c.at == c.jump_at {
                            c.splice(inp)?;
                            continue;
                        }
                        if let Some(n) = c.trace_entry(inp.window())? {
                            inp.skip(n);
                            continue;
                        }
                    }
                    b'(' => {
                        if let Some(n) = c.list_of_gets(inp.window()) {
                            inp.skip(n);
                            continue;
                        }
                        inp.skip(1);
                        c.marks.push(c.stack.len());
                        continue;
                    }
                    _ => {}
                }
            }
            let op = match inp.byte() {
                Ok(op) => op,
                Err(e) => {
                    c.reading_opcode = true;
                    return Err(c.eof(e));
                }
            };
            c.cur = op;
            match op {
                0x80 => {
                    let v = byte!();
                    if v > 5 {
                        return Err(Error::UnsupportedProtocol {
                            offset: c.at,
                            protocol: v,
                        });
                    }
                    c.proto = v;
                }
                0x95 => {
                    let n = u64::from_le_bytes(arr!(8));
                    if inp.has_at_least(n) == Some(false) {
                        return Err(c.eof(Eof(inp.len_hint().unwrap_or(inp.pos()))));
                    }
                }
                b'.' => return c.pop(),
                b'(' => c.marks.push(c.stack.len()),
                b'0' => {
                    if c.marks.last() == Some(&c.stack.len()) {
                        c.marks.pop();
                    } else {
                        c.pop()?;
                    }
                }
                b'1' => {
                    let m = c.pop_mark()?;
                    c.stack.truncate(m);
                }
                b'2' => {
                    let v = c.top()?;
                    c.stack.push(v);
                }
                b'N' => c.stack.push(Val::NONE),
                0x88 => c.stack.push(Val::boolean(true)),
                0x89 => c.stack.push(Val::boolean(false)),
                b'J' => {
                    let x = i32::from_le_bytes(arr!(4));
                    let v = c.int(i64::from(x))?;
                    c.stack.push(v);
                }
                b'K' => {
                    let v = byte!();
                    c.stack.push(Val::new(Tag::Int, u32::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(arr!(2));
                    c.stack.push(Val::new(Tag::Int, u32::from(v)));
                }
                0x8a => {
                    let n = byte!();
                    let b = take!(u64::from(n));
                    let v = c.long(b)?;
                    c.stack.push(v);
                }
                0x8b => {
                    let n = i32::from_le_bytes(arr!(4));
                    if n < 0 {
                        return Err(c.bad("LONG pickle has negative byte count"));
                    }
                    let b = take!(n as u64);
                    let v = c.long(b)?;
                    c.stack.push(v);
                }
                b'I' => {
                    let l = line!();
                    let v = match l {
                        b"00" => Val::boolean(false),
                        b"01" => Val::boolean(true),
                        _ => {
                            let b = text::parse_int(l).map_err(|e| c.bad(e))?;
                            c.long(&b)?
                        }
                    };
                    c.stack.push(v);
                }
                b'L' => {
                    let mut l = line!();
                    if let Some(x) = l.strip_suffix(b"L") {
                        l = x;
                    }
                    let b = text::parse_int(l).map_err(|e| c.bad(e))?;
                    let v = c.long(&b)?;
                    c.stack.push(v);
                }
                b'F' => {
                    let l = line!();
                    let f = text::parse_float(l).ok_or_else(|| c.bad("invalid float literal"))?;
                    let v = c.float(f)?;
                    c.stack.push(v);
                }
                b'G' => {
                    let f = f64::from_be_bytes(arr!(8));
                    let v = c.float(f)?;
                    c.stack.push(v);
                }
                0x8c => {
                    let n = byte!();
                    let b = take!(u64::from(n));
                    let v = c.utf8(b)?;
                    c.stack.push(v);
                }
                b'X' => {
                    let n = u32::from_le_bytes(arr!(4));
                    let b = take!(u64::from(n));
                    let v = c.utf8(b)?;
                    c.stack.push(v);
                }
                0x8d => {
                    let n = u64::from_le_bytes(arr!(8));
                    let b = take!(n);
                    let v = c.utf8(b)?;
                    c.stack.push(v);
                }
                b'V' => {
                    let l = line!();
                    let s = text::raw_unicode_escape(l).map_err(|e| c.bad(e))?;
                    let v = c.str(&s)?;
                    c.stack.push(v);
                }
                b'S' => {
                    let l = line!();
                    let q = match l {
                        [a, inner @ .., b] if a == b && (*a == b'\'' || *a == b'"') => inner,
                        _ => return Err(c.bad("the STRING opcode argument must be quoted")),
                    };
                    let d = text::escape_decode(q).map_err(|e| c.bad(e))?;
                    let v = c.py2_str(&d)?;
                    c.stack.push(v);
                }
                b'T' => {
                    let n = i32::from_le_bytes(arr!(4));
                    if n < 0 {
                        return Err(c.bad("BINSTRING pickle has negative byte count"));
                    }
                    let b = take!(n as u64);
                    let v = c.py2_str(b)?;
                    c.stack.push(v);
                }
                b'U' => {
                    let n = byte!();
                    let b = take!(u64::from(n));
                    let v = c.py2_str(b)?;
                    c.stack.push(v);
                }
                b'B' => {
                    let n = u32::from_le_bytes(arr!(4));
                    let b = take!(u64::from(n)).to_vec();
                    let v = c.blob(b, Tag::Bytes)?;
                    c.stack.push(v);
                }
                b'C' => {
                    let n = byte!();
                    let b = take!(u64::from(n)).to_vec();
                    let v = c.blob(b, Tag::Bytes)?;
                    c.stack.push(v);
                }
                0x8e | 0x96 => {
                    let n = u64::from_le_bytes(arr!(8));
                    let b = take!(n).to_vec();
                    let v = c.blob(
                        b,
                        if op == 0x8e {
                            Tag::Bytes
                        } else {
                            Tag::ByteArray
                        },
                    )?;
                    c.stack.push(v);
                }
                b']' => {
                    let (_, v) = c.new_list()?;
                    c.stack.push(v);
                }
                b'}' if c.at == c.jump_at => {
                    // (the opcode is read: the splice goes on from its start)
                    c.splice(inp)?;
                }
                b'}' => {
                    let (_, v) = c.new_dict()?;
                    c.stack.push(v);
                }
                0x8f => {
                    let (_, v) = c.new_set()?;
                    c.stack.push(v);
                }
                b')' => {
                    let v = c.new_tuple(&[], false)?;
                    c.stack.push(v);
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if c.stack.len() < c.floor() + n {
                        return Err(c.underflow());
                    }
                    let from = c.stack.len() - n;
                    let v = c.make_tuple_from(from)?;
                    c.stack.push(v);
                }
                b't' => {
                    let m = c.pop_mark()?;
                    let v = c.make_tuple_from(m.min(c.stack.len()))?;
                    c.stack.push(v);
                }
                b'l' => {
                    let m = c.pop_mark()?.min(c.stack.len());
                    let items: Vec<Val> = c.stack[m..].to_vec();
                    c.stack.truncate(m);
                    let v = c.make_list(&items)?;
                    c.stack.push(v);
                }
                b'd' => {
                    let m = c.pop_mark()?.min(c.stack.len());
                    if (c.stack.len() - m) & 1 == 1 {
                        return Err(c.bad("odd number of items for DICT"));
                    }
                    let pairs: Vec<(Val, Val)> =
                        c.stack[m..].chunks_exact(2).map(|c| (c[0], c[1])).collect();
                    c.stack.truncate(m);
                    let v = c.make_dict(&pairs)?;
                    c.stack.push(v);
                }
                0x91 => {
                    let m = c.pop_mark()?.min(c.stack.len());
                    let items: Vec<Val> = c.stack[m..].to_vec();
                    c.stack.truncate(m);
                    let v = c.make_frozenset(&items)?;
                    c.stack.push(v);
                }
                b'a' => {
                    let v = c.pop()?;
                    let target = c.top()?;
                    c.stack.push(v);
                    let from = c.stack.len() - 1;
                    c.append_items(target, from)?;
                }
                b'e' => {
                    let (m, target) = c.pop_mark_with_target()?;
                    c.append_items(target, m)?;
                }
                b's' => {
                    let v = c.pop()?;
                    let k = c.pop()?;
                    let target = c.top()?;
                    c.stack.push(k);
                    c.stack.push(v);
                    let from = c.stack.len() - 2;
                    c.set_items(target, from)?;
                }
                b'u' => {
                    let (m, target) = c.pop_mark_with_target()?;
                    c.set_items(target, m)?;
                }
                0x90 => {
                    let (m, target) = c.pop_mark_with_target()?;
                    if target.tag() != Tag::Set {
                        return Err(c.wrong("set", target));
                    }
                    c.seal_all(m)?;
                    let b = c.thaw(target)? as usize;
                    for i in m..c.stack.len() {
                        let k = c.stack[i];
                        c.set_add(b, k)?;
                    }
                    c.stack.truncate(m);
                }
                b'h' => {
                    let i = byte!();
                    c.get(u64::from(i))?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(arr!(4));
                    c.get(u64::from(i))?;
                }
                b'g' => {
                    let i = c.parse_index(line!())?;
                    c.get(i)?;
                }
                b'q' => {
                    let i = byte!();
                    let v = c.top()?;
                    c.memo.put(u64::from(i), v);
                }
                b'r' => {
                    let i = u32::from_le_bytes(arr!(4));
                    let v = c.top()?;
                    c.memo.put(u64::from(i), v);
                }
                b'p' => {
                    let i = c.parse_index(line!())?;
                    let v = c.top()?;
                    c.memo.put(i, v);
                }
                0x94 => {
                    let v = c.top()?;
                    let i = c.memo.count;
                    c.memo.put(i, v);
                }
                b'c' => {
                    let m = String::from_utf8_lossy(line!()).into_owned();
                    let n = String::from_utf8_lossy(line!()).into_owned();
                    let v = c.global(&m, &n)?;
                    c.stack.push(v);
                }
                0x93 => {
                    let n = c.pop()?;
                    let m = c.pop()?;
                    let (Some(ms), Some(ns)) = (c.st.str(m), c.st.str(n)) else {
                        return Err(c.bad("STACK_GLOBAL requires str module and name"));
                    };
                    let (ms, ns) = (ms.to_owned(), ns.to_owned());
                    let v = c.global(&ms, &ns)?;
                    c.stack.push(v);
                }
                b'i' => {
                    let m = String::from_utf8_lossy(line!()).into_owned();
                    let n = String::from_utf8_lossy(line!()).into_owned();
                    let f = c.global(&m, &n)?;
                    let mark = c.pop_mark()?.min(c.stack.len());
                    c.seal_all(mark)?;
                    let args: Vec<Val> = c.stack.drain(mark..).collect();
                    let v = c.call(f, &args, false)?;
                    c.stack.push(v);
                }
                b'o' => {
                    let mark = c.pop_mark()?.min(c.stack.len());
                    if c.stack.len() == mark {
                        return Err(c.underflow());
                    }
                    c.seal_all(mark)?;
                    let items: Vec<Val> = c.stack.drain(mark..).collect();
                    let v = c.call(items[0], &items[1..], false)?;
                    c.stack.push(v);
                }
                b'R' => {
                    let args = c.pop()?;
                    let f = c.pop()?;
                    let args = c.tuple_args(args)?;
                    let v = c.call(f, &args, false)?;
                    c.stack.push(v);
                }
                0x81 => {
                    let args = c.pop()?;
                    let cls = c.pop()?;
                    let args = c.tuple_args(args)?;
                    let v = c.call(cls, &args, true)?;
                    c.stack.push(v);
                }
                0x92 => {
                    let kwargs = c.pop()?;
                    let args = c.pop()?;
                    let cls = c.pop()?;
                    if kwargs.tag() != Tag::Dict || !c.is_empty_state_shallow(kwargs) {
                        return Err(c.bad("NEWOBJ_EX with keyword arguments is not supported"));
                    }
                    let args = c.tuple_args(args)?;
                    let v = c.call(cls, &args, true)?;
                    c.stack.push(v);
                }
                b'b' => {
                    let state = c.pop()?;
                    c.top()?;
                    if !c.is_empty_state(state) {
                        return Err(Error::UnsupportedOpcode {
                            offset: c.at,
                            opcode: "BUILD",
                            reason: "setting object state (attributes) is not supported in plain-data pickles",
                        });
                    }
                }
                b'P' | b'Q' => {
                    return Err(Error::UnsupportedOpcode {
                        offset: c.at,
                        opcode: c.opname(),
                        reason: "persistent ids are not supported",
                    })
                }
                0x82..=0x84 => {
                    return Err(Error::UnsupportedOpcode {
                        offset: c.at,
                        opcode: c.opname(),
                        reason: "the copyreg extension registry is not supported",
                    })
                }
                0x97 | 0x98 => {
                    return Err(Error::UnsupportedOpcode {
                        offset: c.at,
                        opcode: c.opname(),
                        reason: "out-of-band buffers are not supported",
                    })
                }
                _ => {
                    return Err(Error::UnknownOpcode {
                        offset: c.at,
                        opcode: op,
                    })
                }
            }
        }
    }
}

impl<A: Absorb> Core<A> {
    fn new(len_hint: Option<u64>, ab: A) -> Self {
        let seed = random_seed();
        let jump_at = ab.jump_at();
        Core {
            ab,
            scratch: Vec::new(),
            short: [ShortStr::EMPTY; SHORT_SLOTS],
            at: 0,
            cur: 0,
            reading_opcode: false,
            st: Store::default(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            seqb: Vec::new(),
            seq_free: Vec::new(),
            dictb: Vec::new(),
            dict_free: Vec::new(),
            list_map: HashMap::default(),
            gets_lists: HashMap::default(),
            shape_map: HashMap::default(),
            last_shape: None,
            other_shape: None,
            whole_entries: true,
            whole: 0,
            entry_keys: (u32::MAX, [0; MAX_KEYS]),
            kc: KeyCx {
                seed,
                tup_hash: Vec::new(),
                budget: len_hint
                    .unwrap_or(1 << 34)
                    .saturating_mul(64)
                    .saturating_add(1 << 24),
            },
            proto: 0,
            jump_at,
        }
    }

    /// The hook takes over the list being filled (its `MARK` just set,
    /// the item at `inp` its first), then decoding goes on where the hook
    /// says, past the list's last `APPENDS` (see [`Absorb::splice`]).
    fn splice(&mut self, inp: &mut impl Input) -> R<()> {
        self.jump_at = usize::MAX;
        let bail = |at| Error::LimitExceeded {
            offset: Some(at),
            what: BAIL,
        };
        let list = match self.stack.last() {
            Some(&v) if v.tag() == Tag::List && self.marks.last() == Some(&self.stack.len()) => v,
            _ => return Err(bail(self.at)),
        };
        let b = match self.st.slots.at(list.idx()) {
            Slot::Building {
                b, volatile: false, ..
            } if self.seqb[b as usize].items.is_empty() => b,
            _ => return Err(bail(self.at)),
        };
        let memo = &self.memo;
        let Some(sp) = self.ab.splice(&mut self.st, &|i| memo.get(i)) else {
            return Err(bail(self.at));
        };
        if self.memo.count != sp.memo_from
            || self.memo.end() != sp.memo_from
            || !self.memo.sparse.is_empty()
            || sp.memo_to < sp.memo_from
            || sp.to < self.at
        {
            return Err(bail(self.at));
        }
        let Some((&len, more)) = sp.lens.split_first() else {
            return Err(bail(self.at));
        };
        self.st.slots.set(
            list.idx(),
            Slot::NativeRun {
                first: sp.first,
                len,
            },
        );
        self.seq_free.push(b);
        self.marks.pop();
        // the next lists, on the stack above it as their opcodes leave them
        let mut first = sp.first;
        let mut len = len;
        for &n in more {
            first = first.checked_add(len).ok_or_else(|| bail(self.at))?;
            len = n;
            let (b, v) = self.new_list()?;
            self.st.slots.set(v.idx(), Slot::NativeRun { first, len });
            self.seq_free.push(b);
            self.stack.push(v);
        }
        // the trace's memo indices: `None` (nothing after the trace names
        // them) but the strs named after it, in increasing index order, a
        // hole in the memo (not millions of cells written)
        let named = sp
            .strs
            .iter()
            .map(|&(k, id)| (k, Val::new(Tag::Str, id)))
            .collect();
        if !self.memo.hole(sp.memo_to - sp.memo_from, named) {
            return Err(bail(self.at));
        }
        if !inp.jump(sp.to) {
            return Err(bail(self.at));
        }
        Ok(())
    }

    // ----- errors -----------------------------------------------------------

    fn opname(&self) -> &'static str {
        if self.reading_opcode {
            "opcode"
        } else {
            op_name(self.cur)
        }
    }

    fn eof(&self, e: Eof) -> Error {
        Error::UnexpectedEof {
            offset: e.0,
            opcode_offset: self.at,
            reading: self.opname(),
        }
    }

    fn bad(&self, detail: impl Into<String>) -> Error {
        Error::InvalidArgument {
            offset: self.at,
            opcode: self.opname(),
            detail: detail.into(),
        }
    }

    fn wrong(&self, expected: &'static str, found: Val) -> Error {
        Error::WrongType {
            offset: self.at,
            opcode: self.opname(),
            expected,
            found: type_name(found.tag()),
        }
    }

    fn key_err(&self, e: KeyErr) -> Error {
        match e {
            KeyErr::Unhashable(kind) => Error::Unhashable {
                offset: self.at,
                opcode: self.opname(),
                kind,
            },
            KeyErr::Limit => Error::LimitExceeded {
                offset: Some(self.at),
                what:
                    "dict key / set member comparison work (nesting too deep or adversarial keys)",
            },
        }
    }

    fn underflow(&self) -> Error {
        Error::StackUnderflow {
            offset: self.at,
            opcode: self.opname(),
        }
    }

    fn parse_index(&self, l: &[u8]) -> R<u64> {
        let bytes = text::parse_int(l).map_err(|e| self.bad(e))?;
        match le_to_i64(&bytes) {
            Some(i) if i >= 0 => Ok(i as u64),
            Some(_) => Err(self.bad("negative memo index")),
            None => Err(self.bad("memo index too large")),
        }
    }

    // ----- stack ------------------------------------------------------------

    #[inline]
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline]
    fn pop(&mut self) -> R<Val> {
        if self.stack.len() <= self.floor() {
            return Err(self.underflow());
        }
        self.stack.pop().ok_or_else(|| self.underflow())
    }

    #[inline]
    fn top(&self) -> R<Val> {
        if self.stack.len() <= self.floor() {
            return Err(self.underflow());
        }
        self.stack.last().copied().ok_or_else(|| self.underflow())
    }

    #[inline]
    fn pop_mark(&mut self) -> R<usize> {
        // (`ok_or_else`: naming the opcode costs a lookup, only on error.)
        self.marks.pop().ok_or_else(|| Error::MarkMissing {
            offset: self.at,
            opcode: self.opname(),
        })
    }

    /// Pop to the mark; returns the stack index of the first item and checks
    /// that a target object sits just below it (for APPENDS etc.).
    fn pop_mark_with_target(&mut self) -> R<(usize, Val)> {
        let m = self.pop_mark()?;
        if m == 0 || m - 1 < self.floor() || m > self.stack.len() {
            return Err(self.underflow());
        }
        Ok((m, self.stack[m - 1]))
    }

    // ----- value construction -------------------------------------------------

    fn int(&mut self, i: i64) -> R<Val> {
        if let Some(v) = Val::small_int(i) {
            return Ok(v);
        }
        let id = u32_of(self.st.ints.len(), self.at)?;
        self.st.ints.push(i);
        Ok(Val::new(Tag::IntBox, id))
    }

    fn long(&mut self, le: &[u8]) -> R<Val> {
        if let Some(i) = le_to_i64(le) {
            return self.int(i);
        }
        let id = u32_of(self.st.bigints.len(), self.at)?;
        self.st.bigints.push(normalize_le(le).into());
        Ok(Val::new(Tag::BigInt, id))
    }

    fn float(&mut self, f: f64) -> R<Val> {
        let id = u32_of(self.st.floats.len(), self.at)?;
        self.st.floats.push(f);
        Ok(Val::new(Tag::Float, id))
    }

    fn str(&mut self, s: &str) -> R<Val> {
        match self.st.strs.intern(s) {
            Some(id) => Ok(Val::new(Tag::Str, id)),
            None => Err(Error::LimitExceeded {
                offset: Some(self.at),
                what: "more than 4 Gi strings",
            }),
        }
    }

    fn utf8(&mut self, b: &[u8]) -> R<Val> {
        if b.len() <= SHORT_LEN {
            let slot = (b.len() + usize::from(b.first().copied().unwrap_or(0))) % SHORT_SLOTS;
            let e = &self.short[slot];
            if usize::from(e.len) == b.len() && &e.bytes[..b.len()] == b {
                return Ok(e.val);
            }
            let val = self.utf8_slow(b)?;
            let mut bytes = [0u8; SHORT_LEN];
            bytes[..b.len()].copy_from_slice(b);
            self.short[slot] = ShortStr {
                len: b.len() as u8,
                bytes,
                val,
            };
            return Ok(val);
        }
        self.utf8_slow(b)
    }

    fn utf8_slow(&mut self, b: &[u8]) -> R<Val> {
        match std::str::from_utf8(b) {
            Ok(s) => self.str(s),
            // Python accepts lone surrogates ('surrogatepass'); a Rust
            // string cannot hold them, so invalid sequences become U+FFFD.
            Err(_) => self.str(&String::from_utf8_lossy(b)),
        }
    }

    fn blob(&mut self, b: Vec<u8>, tag: Tag) -> R<Val> {
        let id = u32_of(self.st.blobs.len(), self.at)?;
        self.st.blobs.push(b.into_boxed_slice());
        Ok(Val::new(tag, id))
    }

    /// Python 2 `str` (STRING/BINSTRING): text when it is valid UTF-8, else bytes.
    fn py2_str(&mut self, b: &[u8]) -> R<Val> {
        match std::str::from_utf8(b) {
            Ok(s) => self.str(s),
            Err(_) => self.blob(b.to_vec(), Tag::Bytes),
        }
    }

    fn new_slot(&mut self, dict: bool) -> R<(u32, Val)> {
        let b = if dict {
            match self.dict_free.pop() {
                Some(b) => b,
                None => {
                    let b = u32_of(self.dictb.len(), self.at)?;
                    self.dictb.push(DictB::default());
                    b
                }
            }
        } else {
            match self.seq_free.pop() {
                Some(b) => b,
                None => {
                    let b = u32_of(self.seqb.len(), self.at)?;
                    self.seqb.push(SeqB::default());
                    b
                }
            }
        };
        let id = u32_of(self.st.slots.len(), self.at)?;
        self.st.slots.push(Slot::Building {
            b,
            dict,
            volatile: false,
        });
        Ok((b, Val::new(Tag::List, id)))
    }

    fn new_list(&mut self) -> R<(u32, Val)> {
        self.new_slot(false)
    }

    fn new_set(&mut self) -> R<(u32, Val)> {
        let (b, v) = self.new_slot(false)?;
        Ok((b, Val::new(Tag::Set, v.id())))
    }

    fn new_dict(&mut self) -> R<(u32, Val)> {
        let (b, v) = self.new_slot(true)?;
        Ok((b, Val::new(Tag::Dict, v.id())))
    }

    /// Hash-cons a run of values into `seq_pool`.
    fn intern_seq(&mut self, items: &[Val]) -> R<Span> {
        if items.is_empty() {
            return Ok(Span { start: 0, len: 0 });
        }
        let len = u32_of(items.len(), self.at)?;
        let pool_len = self.st.seq_pool.len();
        let start = u32_of(pool_len, self.at)?;
        u32_of(pool_len + items.len(), self.at)?;
        if items.len() <= DEDUP_MAX_LIST {
            let h = hash_words(self.kc.seed, items.iter().map(|v| v.0));
            if let Some(&sp) = self.list_map.get(&h) {
                let a = sp.start as usize;
                if sp.len == len && self.st.seq_pool.get(a..a + items.len()) == Some(items) {
                    return Ok(sp);
                }
            }
            self.st.seq_pool.extend_from_slice(items);
            let sp = Span { start, len };
            self.list_map.insert(h, sp);
            return Ok(sp);
        }
        self.st.seq_pool.extend_from_slice(items);
        Ok(Span { start, len })
    }

    fn intern_shape(&mut self, keys: &[Val]) -> R<u32> {
        if let Some(id) = self.last_shape {
            if self.shape_keys(id) == keys {
                return Ok(id);
            }
        }
        let id = self.intern_shape_slow(keys)?;
        self.other_shape = self.last_shape;
        self.last_shape = Some(id);
        Ok(id)
    }

    /// The keys of dict shape `id`.
    #[inline]
    fn shape_keys(&self, id: u32) -> &[Val] {
        let sp = self.st.shapes[id as usize];
        let a = sp.start as usize;
        &self.st.shape_pool[a..a + sp.len as usize]
    }

    fn intern_shape_slow(&mut self, keys: &[Val]) -> R<u32> {
        let len = u32_of(keys.len(), self.at)?;
        let h = hash_words(self.kc.seed ^ 0x5348_4150, keys.iter().map(|v| v.0));
        let dedup = keys.len() <= DEDUP_MAX_SHAPE;
        if dedup {
            if let Some(&id) = self.shape_map.get(&h) {
                let sp = self.st.shapes[id as usize];
                let a = sp.start as usize;
                if sp.len == len && self.st.shape_pool.get(a..a + keys.len()) == Some(keys) {
                    return Ok(id);
                }
            }
        }
        let start = u32_of(self.st.shape_pool.len(), self.at)?;
        u32_of(self.st.shape_pool.len() + keys.len(), self.at)?;
        self.st.shape_pool.extend_from_slice(keys);
        let id = u32_of(self.st.shapes.len(), self.at)?;
        self.st.shapes.push(Span { start, len });
        if dedup {
            self.shape_map.insert(h, id);
        }
        Ok(id)
    }

    fn new_tuple(&mut self, items: &[Val], frozenset: bool) -> R<Val> {
        let sp = self.intern_seq(items)?;
        let id = u32_of(self.st.tuples.len(), self.at)?;
        self.st.tuples.push(sp);
        self.kc.tup_hash.push(UNSET);
        Ok(Val::new(
            if frozenset {
                Tag::FrozenSet
            } else {
                Tag::Tuple
            },
            id,
        ))
    }

    // ----- freezing -----------------------------------------------------------

    /// `v` was just stored inside another object: freeze it if it is a
    /// container still being built.
    #[inline]
    fn seal(&mut self, v: Val) -> R<()> {
        if !v.is_container() {
            return Ok(());
        }
        if let Some((b, dict)) = self.st.slots.stable_builder(v.idx()) {
            self.freeze(v.idx(), b, dict)?;
        }
        Ok(())
    }

    fn seal_all(&mut self, from: usize) -> R<()> {
        // Most items are frozen already (a frames list's frame dicts): look
        // for one still being built first, with nothing borrowed mutably.
        let slots = &self.st.slots;
        let building = |v: &Val| v.is_container() && slots.stable_builder(v.idx()).is_some();
        if !self
            .stack
            .get(from..)
            .is_some_and(|s| s.iter().any(building))
        {
            return Ok(());
        }
        for i in from..self.stack.len() {
            let v = self.stack[i];
            self.seal(v)?;
        }
        Ok(())
    }

    fn freeze(&mut self, id: usize, b: u32, dict: bool) -> R<()> {
        if dict {
            let d = &mut self.dictb[b as usize];
            let keys = std::mem::take(&mut d.keys);
            let mut vals = std::mem::take(&mut d.vals);
            d.index = None;
            let shape = self.intern_shape(&keys)?;
            let native = self.ab.dict(&self.st, id as u32, shape, &vals, self.at);
            let start = u32_of(self.st.dict_vals.len(), self.at)?;
            if native.is_none() {
                u32_of(self.st.dict_vals.len() + vals.len(), self.at)?;
                self.st.dict_vals.extend_from_slice(&vals);
            }
            let mut keys = keys;
            keys.clear();
            vals.clear();
            if keys.capacity() > 4096 {
                keys = Vec::new();
                vals = Vec::new();
            }
            let d = &mut self.dictb[b as usize];
            d.keys = keys;
            d.vals = vals;
            self.dict_free.push(b);
            self.st.slots.set(
                id,
                match native {
                    Some(n) => Slot::Native(n),
                    None => Slot::Rec { shape, start },
                },
            );
        } else {
            let s = &mut self.seqb[b as usize];
            let mut items = std::mem::take(&mut s.items);
            s.index = None;
            let sp = self.intern_seq(&items)?;
            items.clear();
            if items.capacity() > 4096 {
                items = Vec::new();
            }
            self.seqb[b as usize].items = items;
            self.seq_free.push(b);
            self.st.slots.set(id, Slot::Seq(sp));
        }
        Ok(())
    }

    /// Make container `v` mutable again (copying frozen contents out) and
    /// return its builder. A thawed container stays mutable until the end.
    fn thaw(&mut self, v: Val) -> R<u32> {
        let id = v.idx();
        if let Slot::Building { b, .. } = self.st.slots.at(id) {
            return Ok(b);
        }
        if self.ab.observed(id) || matches!(self.st.slots.at(id), Slot::Native(_)) {
            self.ab.bail();
            return Err(Error::LimitExceeded {
                offset: Some(self.at),
                what: BAIL,
            });
        }
        match self.st.slots.at(id) {
            Slot::Building { b, .. } => Ok(b),
            Slot::Native(_) => Err(self.bad("internal: native dict")),
            Slot::NativeRun { first, len } => {
                let (b, _) = self.new_slot(false)?;
                self.st.slots.pop();
                let items = self.native_items(first, len)?;
                self.seqb[b as usize].items = items;
                self.st.slots.set(
                    id,
                    Slot::Building {
                        b,
                        dict: false,
                        volatile: true,
                    },
                );
                Ok(b)
            }
            Slot::Seq(sp) => {
                let (b, _) = self.new_slot(false)?;
                self.st.slots.pop();
                let a = sp.start as usize;
                let items = &self.st.seq_pool[a..a + sp.len as usize];
                self.seqb[b as usize].items.extend_from_slice(items);
                self.st.slots.set(
                    id,
                    Slot::Building {
                        b,
                        dict: false,
                        volatile: true,
                    },
                );
                Ok(b)
            }
            Slot::Rec { shape, start } => {
                let (b, _) = self.new_slot(true)?;
                self.st.slots.pop();
                let sp = self.st.shapes[shape as usize];
                let a = sp.start as usize;
                let n = sp.len as usize;
                let d = &mut self.dictb[b as usize];
                d.keys.extend_from_slice(&self.st.shape_pool[a..a + n]);
                let s = start as usize;
                d.vals.extend_from_slice(&self.st.dict_vals[s..s + n]);
                self.st.slots.set(
                    id,
                    Slot::Building {
                        b,
                        dict: true,
                        volatile: true,
                    },
                );
                Ok(b)
            }
        }
    }

    // ----- container mutation -------------------------------------------------

    fn append_items(&mut self, target: Val, from: usize) -> R<()> {
        if target.tag() != Tag::List {
            return Err(self.wrong("list", target));
        }
        self.seal_all(from)?;
        // A device's trace: dicts the hook took over, in order. The list
        // keeps only which ones (`Slot::NativeRun`), not 8 bytes per item.
        if let Some(n0) = self.native_run_at(from) {
            let count = u32_of(self.stack.len() - from, self.at)?;
            let run = match self.st.slots.at(target.idx()) {
                Slot::NativeRun { first, len } if first.checked_add(len) == Some(n0) => {
                    Some((first, len))
                }
                Slot::Building {
                    b, volatile: false, ..
                } if self.seqb[b as usize].items.is_empty() => {
                    self.seq_free.push(b);
                    Some((n0, 0))
                }
                _ => None,
            };
            if let Some((first, len)) = run {
                let len = len
                    .checked_add(count)
                    .ok_or_else(|| self.bad("more than 4 Gi trace entries"))?;
                self.st
                    .slots
                    .set(target.idx(), Slot::NativeRun { first, len });
                self.stack.truncate(from);
                return Ok(());
            }
        }
        // Fast path: a fresh empty list filled in one batch is frozen
        // straight from the stack (a later mutation thaws it again).
        if let Slot::Building {
            b, volatile: false, ..
        } = self.st.slots.at(target.idx())
        {
            if self.seqb[b as usize].items.is_empty() && self.stack.len() - from <= DEDUP_MAX_LIST {
                let items = std::mem::take(&mut self.stack);
                let sp = self.intern_seq(&items[from..]);
                self.stack = items;
                let sp = sp?;
                self.stack.truncate(from);
                self.seq_free.push(b);
                self.st.slots.set(target.idx(), Slot::Seq(sp));
                return Ok(());
            }
        }
        let b = self.thaw(target)?;
        self.seqb[b as usize]
            .items
            .extend_from_slice(&self.stack[from..]);
        self.stack.truncate(from);
        Ok(())
    }

    /// `MARK (BINGET | LONG_BINGET)* APPENDS` onto a fresh empty list, all
    /// in `w` (which starts at the MARK): a frames list. The same stack
    /// recurs millions of times as the same bytes (the same memo indices
    /// of the same frame dicts), so the bytes are looked up first and a
    /// known list is frozen without decoding its items again. Returns the
    /// bytes consumed, or `None` to leave them to the general path.
    ///
    /// Equal bytes mean equal items while no memo index is ever stored
    /// twice (then this is off); the items were sealed when first seen, and
    /// a container once frozen can only be thawed, never be sealed again,
    /// so skipping the APPENDS' sealing is exact.
    fn list_of_gets(&mut self, w: &[u8]) -> Option<usize> {
        if self.memo.overwritten {
            return None;
        }
        let &target = self
            .stack
            .last()
            .filter(|_| self.stack.len() > self.floor())?;
        if target.tag() != Tag::List {
            return None;
        }
        let (b, false) = self.st.slots.stable_builder(target.idx())? else {
            return None;
        };
        if !self.seqb[b as usize].items.is_empty() {
            return None;
        }
        let (p, h) = self.gets_body(w)?;
        let body = &w[1..p];
        if let Some(sp) = self.known_gets(h, body) {
            self.st.slots.set(target.idx(), Slot::Seq(sp));
            self.seq_free.push(b);
            return Some(p + 1);
        }
        // First time: decode the gets as the general path would.
        let from = self.stack.len();
        let mut q = 1;
        while q < p {
            let (i, len) = if w[q] == b'h' {
                (u32::from(w[q + 1]), 2)
            } else {
                (
                    u32::from_le_bytes([w[q + 1], w[q + 2], w[q + 3], w[q + 4]]),
                    5,
                )
            };
            match self.memo.get(u64::from(i)) {
                // (dicts the hook took over make a trace list: not here)
                Some(v) if self.st.native(v).is_none() => self.stack.push(v),
                _ => {
                    self.stack.truncate(from);
                    return None;
                }
            }
            q += len;
        }
        let frozen = self.seal_all(from).and_then(|()| {
            let items = std::mem::take(&mut self.stack);
            let sp = self.intern_seq(&items[from..]);
            self.stack = items;
            sp
        });
        self.stack.truncate(from);
        let sp = frozen.ok()?;
        self.st.slots.set(target.idx(), Slot::Seq(sp));
        self.seq_free.push(b);
        if self.gets_lists.len() < 1 << 16 {
            self.gets_lists.insert(h, (body.into(), sp));
        }
        Some(p + 1)
    }

    /// The body of `MARK (BINGET | LONG_BINGET)* APPENDS` in `w` (which
    /// starts at the MARK), of 2 to [`DEDUP_MAX_LIST`] gets: the offset of
    /// its APPENDS and the hash of its gets, each (opcode, index) hashed
    /// as it is read (the hash chain runs beside the scan's, so the body is
    /// read once).
    #[inline]
    fn gets_body(&self, w: &[u8]) -> Option<(usize, u64)> {
        let mut p = 1;
        let mut count = 0u64;
        let mut h = self.kc.seed ^ 0x4745_5453;
        loop {
            let word = match *w.get(p)? {
                b'h' => {
                    let x = *w.get(p + 1)?;
                    p += 2;
                    1 << 40 | u64::from(x)
                }
                b'j' => {
                    let &[a, b, c, d] = w.get(p + 1..p + 5)? else {
                        return None;
                    };
                    p += 5;
                    2 << 40 | u64::from(u32::from_le_bytes([a, b, c, d]))
                }
                b'e' => break,
                _ => return None,
            };
            h = (h ^ word)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29);
            count += 1;
        }
        if !(2..=DEDUP_MAX_LIST as u64).contains(&count) {
            return None;
        }
        Some((p, mix(h ^ count)))
    }

    /// The frozen list a gets body (`h`: its hash) made before, if any.
    #[inline]
    fn known_gets(&self, h: u64, body: &[u8]) -> Option<Span> {
        match self.gets_lists.get(&h) {
            Some((bytes, sp)) if **bytes == *body => Some(*sp),
            _ => None,
        }
    }

    /// [`Core::trace_entry`]'s check of `w` against shape `sid`: its
    /// values and the offset of its SETITEMS.
    /// Its keys' memo indices are written to `keys`.
    fn entry_parts(
        &self,
        w: &[u8],
        sid: u32,
        parts: &mut [Part; MAX_KEYS],
        keys: &mut [u32; MAX_KEYS],
    ) -> Option<usize> {
        // a get's value, when it is stored before this dict (never one of
        // the dict's own MEMOIZEs)
        let count = self.memo.count;
        let get = |i: u64| self.memo.get(i).filter(|_| i < count);
        let sp = self.st.shapes[sid as usize];
        let n = sp.len as usize;
        if n > MAX_KEYS {
            return None;
        }
        let a = sp.start as usize;
        let mut p = 3;
        for (k, part) in parts.iter_mut().enumerate().take(n) {
            let i = match w.get(p..p + 5) {
                Some(&[b'h', x, ..]) => {
                    p += 2;
                    u32::from(x)
                }
                Some(&[b'j', x0, x1, x2, x3]) => {
                    p += 5;
                    u32::from_le_bytes([x0, x1, x2, x3])
                }
                _ => return None,
            };
            // (the memo index of the last entry's key: the same str, as
            // no memo index is stored twice)
            if !(self.entry_keys.0 == sid && self.entry_keys.1[k] == i)
                && get(u64::from(i)) != Some(self.st.shape_pool[a + k])
            {
                return None;
            }
            keys[k] = i;
            let Some(&[op, x0, x1, x2, x3, ..]) = w.get(p..p + 10) else {
                return None;
            };
            let v = match op {
                b'h' | b'j' => {
                    let (i, len) = if op == b'h' {
                        (u32::from(x0), 2)
                    } else {
                        (u32::from_le_bytes([x0, x1, x2, x3]), 5)
                    };
                    p += len;
                    match get(u64::from(i)) {
                        Some(v) if !v.is_container() => v,
                        // a frozen list (a frames list shared with the
                        // entry before)
                        Some(v)
                            if v.tag() == Tag::List
                                && matches!(self.st.slots.get(v.idx()), Some(Slot::Seq(_))) =>
                        {
                            v
                        }
                        _ => return None,
                    }
                }
                b'K' => {
                    p += 2;
                    Val::new(Tag::Int, u32::from(x0))
                }
                b'M' => {
                    p += 3;
                    Val::new(Tag::Int, u32::from(u16::from_le_bytes([x0, x1])))
                }
                b'J' => match Val::small_int(i64::from(i32::from_le_bytes([x0, x1, x2, x3]))) {
                    Some(v) => {
                        p += 5;
                        v
                    }
                    None => return None,
                },
                0x8a if x0 <= 8 => {
                    let len = usize::from(x0);
                    let &[r0, r1, r2, r3, r4, r5, r6, r7] = w.get(p + 2..p + 10)? else {
                        return None;
                    };
                    let i = long1([r0, r1, r2, r3, r4, r5, r6, r7], x0);
                    let at = p;
                    p += 2 + len;
                    match Val::small_int(i) {
                        Some(v) => v,
                        None => {
                            *part = Part::Int { at, i };
                            continue;
                        }
                    }
                }
                b'N' => {
                    p += 1;
                    Val::NONE
                }
                0x88 | 0x89 => {
                    p += 1;
                    Val::boolean(op == 0x88)
                }
                0x8c => {
                    let (at, from, len) = (p, p + 2, usize::from(x0));
                    p = from + len;
                    let memo = w.get(p) == Some(&0x94);
                    p += usize::from(memo);
                    if p > w.len() {
                        return None;
                    }
                    *part = Part::Str {
                        at,
                        from,
                        len,
                        memo,
                    };
                    continue;
                }
                b']' if x0 == 0x94 => {
                    p += 2;
                    if x1 != b'(' {
                        // `[]` (frozen when the dict is)
                        *part = Part::List(Span { start: 0, len: 0 });
                        continue;
                    }
                    let (e, h) = self.gets_body(w.get(p..)?)?;
                    let sp = self.known_gets(h, &w[p + 1..p + e])?;
                    p += e + 1;
                    *part = Part::List(sp);
                    continue;
                }
                _ => return None,
            };
            *part = Part::Val(v);
        }
        (w.get(p) == Some(&b'u')).then_some(p)
    }

    /// A trace entry's whole dict in one step: `EMPTY_DICT MEMOIZE MARK
    /// (key value)* SETITEMS` in `w` (which starts at the EMPTY_DICT),
    /// whose keys are the memo gets of one of the last two shapes' keys in
    /// order (what [`Core::set_items`]' fast path takes) and whose values
    /// are memo gets of strs, ints, `None`, bools and frozen lists, ints
    /// (`LONG1` of any width), short strs (memoized or not) and frames
    /// lists (`EMPTY_LIST
    /// MEMOIZE`, then nothing or a body of gets seen before, see
    /// [`Core::list_of_gets`]). The bytes are checked first, changing
    /// nothing; then the memo, the slots and the hook are given what the
    /// opcodes one by one would give them. Returns the bytes consumed, or
    /// `None` to leave them to the general path.
    fn trace_entry(&mut self, w: &[u8]) -> R<Option<usize>> {
        if self.memo.overwritten || !self.whole_entries {
            return Ok(None);
        }
        if w.get(..3) != Some(&[b'}', 0x94, b'(']) {
            return Ok(None);
        }
        let mut parts = [Part::Val(Val::NONE); MAX_KEYS];
        let mut keys = self.entry_keys.1;
        let parsed = match (self.last_shape, self.other_shape) {
            (Some(last), other) => match self.entry_parts(w, last, &mut parts, &mut keys) {
                Some(p) => Some((last, p)),
                None => {
                    let other = other
                        .and_then(|o| Some((o, self.entry_parts(w, o, &mut parts, &mut keys)?)));
                    if other.is_some() {
                        // the most recent first
                        (self.last_shape, self.other_shape) = (self.other_shape, self.last_shape);
                    }
                    other
                }
            },
            (None, _) => None,
        };
        let Some((sid, p)) = parsed else {
            return Ok(None);
        };
        self.entry_keys = (sid, keys);
        let n = self.shape_keys(sid).len();
        // Every opcode checked: now what they do, in their order.
        let at = self.at;
        let id = u32_of(self.st.slots.len(), at)?;
        let dict = Val::new(Tag::Dict, id);
        self.st.slots.push(Slot::Seq(Span { start: 0, len: 0 }));
        self.memo.put(self.memo.count, dict);
        let mut vals = std::mem::take(&mut self.scratch);
        vals.clear();
        for part in &parts[..n] {
            let v = match *part {
                Part::Val(v) => v,
                Part::Str {
                    at: o,
                    from,
                    len,
                    memo,
                } => {
                    self.at = at + o;
                    let v = self.utf8(&w[from..from + len]);
                    self.at = at;
                    let v = v?;
                    if memo {
                        self.memo.put(self.memo.count, v);
                    }
                    v
                }
                Part::Int { at: o, i } => {
                    self.at = at + o;
                    let v = self.int(i);
                    self.at = at;
                    v?
                }
                Part::List(sp) => {
                    let v = Val::new(Tag::List, u32_of(self.st.slots.len(), at)?);
                    self.st.slots.push(Slot::Seq(sp));
                    self.memo.put(self.memo.count, v);
                    v
                }
            };
            vals.push(v);
        }
        let slot = match self.ab.dict(&self.st, id, sid, &vals, at) {
            Some(native) => Slot::Native(native),
            None => {
                let start = u32_of(self.st.dict_vals.len(), at)?;
                u32_of(self.st.dict_vals.len() + n, at)?;
                self.st.dict_vals.extend_from_slice(&vals);
                Slot::Rec { shape: sid, start }
            }
        };
        self.scratch = vals;
        self.st.slots.set(id as usize, slot);
        self.stack.push(dict);
        self.whole += 1;
        Ok(Some(p + 1))
    }

    /// If the stack from `from` holds dicts the hook took over as
    /// consecutive items `n0, n0 + 1, ...`, return `n0`. (The hook numbers
    /// the dicts it takes over, each once, so the dict is the item.)
    fn native_run_at(&self, from: usize) -> Option<u32> {
        let items = self.stack.get(from..)?;
        let n0 = self.st.native(*items.first()?)?;
        for (k, &v) in items.iter().enumerate() {
            if self.st.native(v) != n0.checked_add(u32::try_from(k).ok()?) {
                return None;
            }
        }
        Some(n0)
    }

    /// The items of a [`Slot::NativeRun`] list, rebuilt (rare: only when
    /// a trace list is used as something else): the dicts the hook took
    /// over as items `first..first + len`.
    fn native_items(&self, first: u32, len: u32) -> R<Vec<Val>> {
        let mut items = vec![Val::EMPTY; len as usize];
        for (id, slot) in self.st.slots.iter().enumerate() {
            if let Slot::Native(n) = slot {
                if let Some(k) = n.checked_sub(first).filter(|&k| k < len) {
                    items[k as usize] = Val::new(Tag::Dict, id as u32);
                }
            }
        }
        if items.contains(&Val::EMPTY) {
            return Err(self.bad("internal: unknown native dict"));
        }
        Ok(items)
    }

    fn set_items(&mut self, target: Val, from: usize) -> R<()> {
        if target.tag() != Tag::Dict {
            return Err(self.wrong("dict", target));
        }
        if (self.stack.len() - from) & 1 == 1 {
            return Err(self.bad("odd number of items for SETITEMS"));
        }
        self.seal_all(from)?;
        let b = self.thaw(target)? as usize;
        // Fast path: an empty dict receiving exactly the keys of one of the
        // last two frozen dict shapes, in order (a trace's millions of
        // entry dicts, between frame dicts met for the first time).
        let mut recent = [self.last_shape, self.other_shape].into_iter().flatten();
        let matching = recent.find(|&sid| {
            let (keys, items) = (self.shape_keys(sid), &self.stack[from..]);
            items.len() == 2 * keys.len()
                && keys
                    .iter()
                    .zip(items.chunks_exact(2))
                    .all(|(k, kv)| *k == kv[0])
        });
        if let Some(sid) = matching {
            if self.last_shape != Some(sid) {
                // the most recent first
                (self.last_shape, self.other_shape) = (self.other_shape, self.last_shape);
            }
            let sp = self.st.shapes[sid as usize];
            let a = sp.start as usize;
            let keys = &self.st.shape_pool[a..a + sp.len as usize];
            let items = &self.stack[from..];
            let d = &mut self.dictb[b];
            if d.keys.is_empty() && d.index.is_none() {
                if let Slot::Building {
                    volatile: false, ..
                } = self.st.slots.at(target.idx())
                {
                    // freeze straight from the stack (a later mutation thaws it)
                    let n = keys.len();
                    let mut vals = std::mem::take(&mut self.scratch);
                    vals.clear();
                    vals.extend(self.stack[from..].chunks_exact(2).map(|kv| kv[1]));
                    let id = target.id();
                    let slot = match self.ab.dict(&self.st, id, sid, &vals, self.at) {
                        Some(native) => Slot::Native(native),
                        None => {
                            let start = u32_of(self.st.dict_vals.len(), self.at)?;
                            u32_of(self.st.dict_vals.len() + n, self.at)?;
                            self.st.dict_vals.extend_from_slice(&vals);
                            Slot::Rec { shape: sid, start }
                        }
                    };
                    self.scratch = vals;
                    self.stack.truncate(from);
                    self.dict_free.push(b as u32);
                    self.st.slots.set(target.idx(), slot);
                    return Ok(());
                }
                d.keys.extend_from_slice(keys);
                d.vals.extend(items.chunks_exact(2).map(|kv| kv[1]));
                self.stack.truncate(from);
                return Ok(());
            }
        }
        let d = &self.dictb[b];
        let fresh = d.keys.is_empty()
            && matches!(
                self.st.slots.at(target.idx()),
                Slot::Building {
                    volatile: false,
                    ..
                }
            );
        let mut i = from;
        while i < self.stack.len() {
            let (k, v) = (self.stack[i], self.stack[i + 1]);
            self.dict_insert(b, k, v)?;
            i += 2;
        }
        self.stack.truncate(from);
        if fresh {
            // A dict filled by one SETITEMS is frozen (and offered to the
            // hook) now, as the fast path above does, so the hook sees
            // trace entries in their order whatever their shapes.
            self.freeze(target.idx(), b as u32, true)?;
        }
        Ok(())
    }

    fn dict_insert(&mut self, b: usize, k: Val, v: Val) -> R<()> {
        let d = &mut self.dictb[b];
        if k.tag() == Tag::Str && d.index.is_none() && d.keys.len() < SMALL {
            // a str only ever equals a str, and strs are interned
            match d.keys.iter().position(|&x| x == k) {
                Some(i) => d.vals[i] = v,
                None => {
                    d.keys.push(k);
                    d.vals.push(v);
                }
            }
            return Ok(());
        }
        let h = match key_hash(&self.st, &mut self.kc, k, 0) {
            Ok(h) => h,
            Err(e) => return Err(self.key_err(e)),
        };
        match find_key(&self.st, &mut self.kc, &d.keys, &mut d.index, k, h) {
            Ok(Some(i)) => d.vals[i] = v,
            Ok(None) => {
                let pos = u32_of(d.keys.len(), self.at)?;
                d.keys.push(k);
                d.vals.push(v);
                if let Some(ix) = &mut d.index {
                    ix.prev.push(ix.map.insert(h, pos).unwrap_or(NIL));
                }
            }
            Err(e) => return Err(self.key_err(e)),
        }
        Ok(())
    }

    fn set_add(&mut self, b: usize, k: Val) -> R<()> {
        let s = &mut self.seqb[b];
        let h = match key_hash(&self.st, &mut self.kc, k, 0) {
            Ok(h) => h,
            Err(e) => return Err(self.key_err(e)),
        };
        match find_key(&self.st, &mut self.kc, &s.items, &mut s.index, k, h) {
            Ok(Some(_)) => {}
            Ok(None) => {
                let pos = u32_of(s.items.len(), self.at)?;
                s.items.push(k);
                if let Some(ix) = &mut s.index {
                    ix.prev.push(ix.map.insert(h, pos).unwrap_or(NIL));
                }
            }
            Err(e) => return Err(self.key_err(e)),
        }
        Ok(())
    }

    /// Items of a list/tuple/set/frozenset/dict (keys), whatever its state.
    fn items_now(&self, v: Val) -> Option<Vec<Val>> {
        match v.tag() {
            Tag::Tuple | Tag::FrozenSet => self.st.seq_items(v).map(<[Val]>::to_vec),
            Tag::List | Tag::Set | Tag::Dict => match self.st.slots.get(v.idx())? {
                Slot::Building { b, dict: false, .. } => Some(self.seqb[b as usize].items.clone()),
                Slot::Building { b, dict: true, .. } => Some(self.dictb[b as usize].keys.clone()),
                Slot::Seq(_) => self.st.seq_items(v).map(<[Val]>::to_vec),
                Slot::Rec { .. } => self.st.dict_parts(v).map(|(_, k, _)| k.to_vec()),
                Slot::Native(_) => {
                    self.ab.bail();
                    None
                }
                Slot::NativeRun { first, len } => self.native_items(first, len).ok(),
            },
            _ => None,
        }
    }

    fn dict_pairs_now(&self, v: Val) -> Option<Vec<(Val, Val)>> {
        match self.st.slots.get(v.idx())? {
            Slot::Building { b, dict: true, .. } => {
                let d = &self.dictb[b as usize];
                Some(d.keys.iter().copied().zip(d.vals.iter().copied()).collect())
            }
            Slot::Rec { .. } => self
                .st
                .dict_parts(v)
                .map(|(_, k, v)| k.iter().copied().zip(v.iter().copied()).collect()),
            Slot::Native(_) => {
                self.ab.bail();
                None
            }
            _ => None,
        }
    }

    fn make_list(&mut self, items: &[Val]) -> R<Val> {
        for &v in items {
            self.seal(v)?;
        }
        let (b, v) = self.new_list()?;
        self.seqb[b as usize].items.extend_from_slice(items);
        Ok(v)
    }

    fn make_set(&mut self, items: &[Val]) -> R<Val> {
        for &v in items {
            self.seal(v)?;
        }
        let (b, v) = self.new_set()?;
        for &k in items {
            self.set_add(b as usize, k)?;
        }
        Ok(v)
    }

    fn make_frozenset(&mut self, items: &[Val]) -> R<Val> {
        // dedup through a temporary set builder
        let (b, tmp) = self.new_set()?;
        for &v in items {
            self.seal(v)?;
            self.set_add(b as usize, v)?;
        }
        let uniq = std::mem::take(&mut self.seqb[b as usize].items);
        self.seqb[b as usize].index = None;
        self.seq_free.push(b);
        // the temporary slot is the last one: drop it
        if self.st.slots.len() == tmp.idx() + 1 {
            self.st.slots.pop();
        }
        let v = self.new_tuple(&uniq, true);
        let mut uniq = uniq;
        uniq.clear();
        self.seqb[b as usize].items = uniq;
        v
    }

    fn make_dict(&mut self, pairs: &[(Val, Val)]) -> R<Val> {
        let (b, v) = self.new_dict()?;
        for &(k, x) in pairs {
            self.seal(k)?;
            self.seal(x)?;
            self.dict_insert(b as usize, k, x)?;
        }
        Ok(v)
    }

    fn make_tuple_from(&mut self, from: usize) -> R<Val> {
        self.seal_all(from)?;
        let items: Vec<Val> = self.stack.drain(from..).collect();
        self.new_tuple(&items, false)
    }

    // ----- globals & calls ------------------------------------------------------

    fn global(&mut self, module: &str, name: &str) -> R<Val> {
        if whitelist(module, name).is_none() {
            return Err(Error::ForbiddenGlobal {
                offset: self.at,
                module: module.to_owned(),
                name: name.to_owned(),
            });
        }
        let m = self.str(module)?.id();
        let n = self.str(name)?.id();
        let id = u32_of(self.st.globals.len(), self.at)?;
        self.st.globals.push((m, n));
        Ok(Val::new(Tag::Global, id))
    }

    fn callable(&self, f: Val) -> R<Callable> {
        if f.tag() != Tag::Global {
            return Err(self.wrong("a whitelisted class or function", f));
        }
        let (m, n) = self.st.globals.get(f.idx()).copied().unwrap_or((0, 0));
        whitelist(self.st.strs.get(m), self.st.strs.get(n))
            .ok_or_else(|| self.wrong("a whitelisted class", f))
    }

    fn encode(&mut self, s: Val, enc: Option<Val>) -> R<Vec<u8>> {
        let text = match self.st.str(s) {
            Some(t) => t.to_owned(),
            None => return Err(self.wrong("str", s)),
        };
        let enc = match enc {
            None => "utf-8".to_owned(),
            Some(e) => match self.st.str(e) {
                Some(e) => e.to_ascii_lowercase().replace('_', "-"),
                None => return Err(self.wrong("str (encoding name)", e)),
            },
        };
        match enc.as_str() {
            "utf-8" | "utf8" => Ok(text.into_bytes()),
            "latin-1" | "latin1" | "iso-8859-1" | "iso8859-1" | "l1" | "ascii" => {
                let max = if enc == "ascii" { 0x7f } else { 0xff };
                text.chars()
                    .map(|c| {
                        u8::try_from(u32::from(c))
                            .ok()
                            .filter(|&b| u32::from(b) <= max)
                    })
                    .collect::<Option<Vec<u8>>>()
                    .ok_or_else(|| self.bad(format!("cannot encode text as {enc}")))
            }
            _ => Err(self.bad(format!("unsupported encoding {enc:?}"))),
        }
    }

    fn bytes_arg(&mut self, args: &[Val]) -> R<Vec<u8>> {
        match args {
            [] => Ok(Vec::new()),
            [a] => {
                if let Some(b) = self.st.blob(*a) {
                    return Ok(b.to_vec());
                }
                if a.tag() == Tag::Str {
                    return Err(self.bad("string argument without an encoding"));
                }
                let items = self
                    .items_now(*a)
                    .ok_or_else(|| self.wrong("bytes or a sequence of ints", *a))?;
                items
                    .iter()
                    .map(|&i| match self.st.int(i) {
                        Some(super::store::IntRef::Small(x)) => u8::try_from(x).ok(),
                        _ => None,
                    })
                    .collect::<Option<Vec<u8>>>()
                    .ok_or_else(|| self.bad("bytes must be in range(0, 256)"))
            }
            [s, e] | [s, e, _] => self.encode(*s, Some(*e)),
            _ => Err(self.bad("too many arguments")),
        }
    }

    fn call(&mut self, f: Val, args: &[Val], newobj: bool) -> R<Val> {
        let c = self.callable(f)?;
        let one_iterable = |vm: &Self| -> R<Vec<Val>> {
            match args {
                [] => Ok(Vec::new()),
                [a] => vm
                    .items_now(*a)
                    .ok_or_else(|| vm.wrong("an iterable (list, tuple, set or dict)", *a)),
                _ => Err(vm.bad("expected at most 1 argument")),
            }
        };
        match c {
            Callable::OrderedDict | Callable::Dict => {
                if newobj || args.is_empty() {
                    return self.make_dict(&[]);
                }
                let [a] = args else {
                    return Err(self.bad("expected at most 1 argument"));
                };
                if a.tag() == Tag::Dict {
                    let pairs = self.dict_pairs_now(*a).unwrap_or_default();
                    return self.make_dict(&pairs);
                }
                let items = one_iterable(self)?;
                let mut pairs = Vec::with_capacity(items.len());
                for it in items {
                    match self.items_now(it) {
                        Some(p) if p.len() == 2 && matches!(it.tag(), Tag::Tuple | Tag::List) => {
                            pairs.push((p[0], p[1]))
                        }
                        _ => return Err(self.bad("dict() needs a sequence of (key, value) pairs")),
                    }
                }
                self.make_dict(&pairs)
            }
            Callable::List => {
                let items = if newobj {
                    Vec::new()
                } else {
                    one_iterable(self)?
                };
                self.make_list(&items)
            }
            Callable::Set => {
                let items = if newobj {
                    Vec::new()
                } else {
                    one_iterable(self)?
                };
                self.make_set(&items)
            }
            Callable::Tuple => {
                let items = one_iterable(self)?;
                for &v in &items {
                    self.seal(v)?;
                }
                self.new_tuple(&items, false)
            }
            Callable::FrozenSet => {
                let items = one_iterable(self)?;
                self.make_frozenset(&items)
            }
            Callable::ByteArray => {
                let b = if newobj {
                    Vec::new()
                } else {
                    self.bytes_arg(args)?
                };
                self.blob(b, Tag::ByteArray)
            }
            Callable::Bytes => {
                let b = self.bytes_arg(args)?;
                self.blob(b, Tag::Bytes)
            }
            Callable::Encode => {
                if newobj {
                    return Err(self.bad("_codecs.encode is not a class"));
                }
                let b = match args {
                    [s] => self.encode(*s, None)?,
                    [s, e] | [s, e, _] => self.encode(*s, Some(*e))?,
                    _ => return Err(self.bad("_codecs.encode takes 1 to 3 arguments")),
                };
                self.blob(b, Tag::Bytes)
            }
        }
    }

    fn tuple_args(&self, v: Val) -> R<Vec<Val>> {
        if v.tag() != Tag::Tuple {
            return Err(self.wrong("tuple (arguments)", v));
        }
        Ok(self.st.seq_items(v).unwrap_or(&[]).to_vec())
    }

    fn is_empty_state(&self, v: Val) -> bool {
        match v.tag() {
            Tag::None => true,
            Tag::Dict => self.items_now(v).is_some_and(|k| k.is_empty()),
            Tag::Tuple => self.st.seq_items(v).is_some_and(|it| {
                it.len() == 2 && it.iter().all(|&x| self.is_empty_state_shallow(x))
            }),
            _ => false,
        }
    }

    fn is_empty_state_shallow(&self, v: Val) -> bool {
        v.tag() == Tag::None
            || (v.tag() == Tag::Dict && self.items_now(v).is_some_and(|k| k.is_empty()))
    }

    // ----- the loop -------------------------------------------------------------

    #[inline]
    fn get(&mut self, i: u64) -> R<()> {
        match self.memo.get(i) {
            Some(v) => {
                self.stack.push(v);
                Ok(())
            }
            None => Err(Error::MemoMissing {
                offset: self.at,
                index: i,
            }),
        }
    }
}

fn find_key(
    st: &Store,
    kc: &mut KeyCx,
    keys: &[Val],
    index: &mut Option<KeyIndex>,
    k: Val,
    h: u64,
) -> Result<Option<usize>, KeyErr> {
    if index.is_none() && keys.len() <= SMALL {
        for (i, &x) in keys.iter().enumerate() {
            if key_eq(st, kc, x, k, 0)? {
                return Ok(Some(i));
            }
        }
        return Ok(None);
    }
    if index.is_none() {
        let mut ix = KeyIndex::default();
        for (i, &x) in keys.iter().enumerate() {
            let hx = key_hash(st, kc, x, 0)?;
            ix.prev.push(ix.map.insert(hx, i as u32).unwrap_or(NIL));
        }
        *index = Some(ix);
    }
    let Some(ix) = index.as_ref() else {
        return Ok(None);
    };
    let mut p = ix.map.get(&h).copied().unwrap_or(NIL);
    while p != NIL {
        let i = p as usize;
        if key_eq(st, kc, keys[i], k, 0)? {
            return Ok(Some(i));
        }
        p = ix.prev[i];
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pickle::input::SliceInput;

    /// A memo with a hole answers, counts and notes overwrites as one
    /// whose hole's cells were all stored (`None`, the named ones set),
    /// through puts after it, into it, before it and far past it.
    #[test]
    fn a_memo_hole_is_the_cells_it_stands_for() {
        let s = |k: u32| Val::new(Tag::Str, k);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..200 {
            let (mut holed, mut filled) = (Memo::default(), Memo::default());
            let before = round % 7;
            for i in 0..before {
                holed.put(i, s(i as u32));
                filled.put(i, s(i as u32));
            }
            let n = (round % 5) * 3;
            let named: Vec<(u64, Val)> = (0..n)
                .filter(|k| k % 3 == round % 3)
                .map(|k| (before + k, s(100 + k as u32)))
                .collect();
            assert!(holed.hole(n, named.clone()));
            for k in 0..n {
                filled.put(before + k, Val::NONE);
            }
            for &(k, v) in &named {
                filled.dense.set(k as usize, v);
            }
            if n > 0 {
                assert!(!holed.hole(1, Vec::new()), "a second hole");
            }
            for step in 0..40u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let end = holed.end();
                let i = match x % 5 {
                    0 | 1 => end,
                    2 => x % (end + 1),
                    3 => end + x % 9,
                    _ => end + 1000 + x % 50,
                };
                holed.put(i, s(1000 + step));
                filled.put(i, s(1000 + step));
            }
            assert_eq!(holed.count, filled.count, "round {round}");
            assert_eq!(holed.overwritten, filled.overwritten, "round {round}");
            for i in 0..filled.end() + 1100 {
                assert_eq!(holed.get(i), filled.get(i), "round {round} index {i}");
            }
        }
    }

    /// `long1` is the int `LONG1`'s bytes encode, for every width and
    /// sign (as Python's `int.from_bytes(b, "little", signed=True)`).
    #[test]
    fn long1_reads_every_width() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let raw = x.to_le_bytes();
            for n in 0..=8u8 {
                let want = if n == 0 {
                    0
                } else {
                    let k = usize::from(n);
                    let mut b = [if raw[k - 1] & 0x80 != 0 { 0xff } else { 0 }; 8];
                    b[..k].copy_from_slice(&raw[..k]);
                    i64::from_le_bytes(b)
                };
                assert_eq!(long1(raw, n), want, "{raw:?} {n}");
            }
        }
        assert_eq!(long1([0xff, 0, 0, 0, 0, 0, 0, 0x55], 1), -1);
        assert_eq!(long1([0xff, 0x00, 0, 0, 0, 0, 0, 0x55], 2), 255);
    }

    /// A real wrapped snapshot (3 streams, an OOM): nearly every trace
    /// entry is decoded in one step, and the pickle is the one its opcodes
    /// one by one make.
    #[test]
    fn trace_entries_decoded_whole_are_what_their_opcodes_make() {
        let bytes = vramscope_testkit::xz::fixture_bytes(
            "fixtures/snapshot_real/nanogpt_wrapped_3streams_expandable_oom_h200.pickle.xz",
        );
        let len = Some(bytes.len() as u64);
        let mut vm = Vm::new(SliceInput::new(&bytes), len, ());
        vm.exec().unwrap();
        // 17,654 entries
        eprintln!("{} of 17,654 entries decoded whole", vm.c.whole);
        assert!(vm.c.whole > 17_000, "{} entries decoded whole", vm.c.whole);
        let whole = Vm::new(SliceInput::new(&bytes), len, ()).run().0.unwrap();
        let stepwise = Vm::new(SliceInput::new(&bytes), len, ())
            .stepwise()
            .run()
            .0
            .unwrap();
        assert_eq!(
            whole.root().to_value().unwrap(),
            stepwise.root().to_value().unwrap()
        );
    }
}
