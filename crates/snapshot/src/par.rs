//! The parallel decoder of a snapshot's trace.
//!
//! In a protocol-4 pickle only `MEMOIZE` stores (`Lib/pickle.py`'s
//! `load_memoize`: at the memo's size), so [`crate::lex::memo_table`] gives,
//! for every memo index, the offset of the object it stores. A device's
//! trace (`EMPTY_LIST MEMOIZE MARK` then entry dicts, `APPENDS MARK` every
//! 1000, a last `APPENDS`: `_pickle.c`'s `batch_list_exact`) is cut into
//! pieces at frame starts; each piece finds its first entry (`EMPTY_DICT
//! MEMOIZE MARK` and the key `'action'`), decodes its entries with a memo of
//! its own (its indices from its first `MEMOIZE`'s), and decodes the few
//! objects of earlier bytes it names (frame dicts, frames lists, strs) from
//! their bytes. Strings, frames and stacks get ids local to the piece, in
//! the order the piece meets them; [`crate::convert`] then maps them to
//! the global ones piece by piece, which is the order the sequential reader
//! interns them in (first seen, in file order). The pieces are chained in
//! file order: a piece whose first entry is not where the previous one
//! stopped is decoded again from there.
//!
//! The next devices' lists are taken too while they follow (`EMPTY_LIST
//! MEMOIZE`, then `MARK` and an entry, or nothing: an empty trace; a
//! snapshot lists every device, and each trace names the frame dicts and
//! frames lists of those before it, which the VM would otherwise need):
//! a piece notes where each starts among its entries.
//!
//! Only what PyTorch writes is accepted: keys that are strs, values that
//! are strs, ints, `None` and frames lists of frame dicts (`name`,
//! `filename`, `line`), each container filled right after its `MEMOIZE`;
//! anything else (another opcode, a key no trace entry has, a value of
//! another type, an integer a field refuses, a memo index the table does
//! not place) gives up, and the sequential reader decodes the file.
//! One exception: a frames list item that is no frame dict (what a memo
//! get with a wrong index makes) is an error whatever else the file holds
//! (no opcode turns a value into a dict), so the piece keeps decoding and
//! notes the entry ([`Fault`]); the conversion then reports it as the
//! sequential reader would, with its byte, without a second decode.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::frames::At;
use crate::hash::{hash_words, IdBuild};
use crate::intern::Interner;
use crate::lex::{declared_len, op_len};
use crate::model::{StackId, Sym};
use crate::trace::{Trace, TraceEntry};
use vramscope_alloc::TraceAction;

const NIL: u32 = u32::MAX;
/// A frame dict without `name` or `filename` (as the sequential reader's
/// `NO_SYM`: resolves to "").
pub(crate) const NO_SYM: u32 = u32::MAX;

const MEMOIZE: u8 = 0x94;
const MARK: u8 = b'(';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const SETITEMS: u8 = b'u';
const APPENDS: u8 = b'e';
const APPEND: u8 = b'a';
const FRAME: u8 = 0x95;

/// What one piece decoded, with ids of its own (strs: ids of its
/// thread's [`Strs`]).
pub(crate) struct Piece {
    /// Which of [`Decoded::texts`] its str ids name.
    pub(crate) texts: usize,
    /// The strs it met, in the order it met them.
    pub(crate) order: Vec<u32>,
    /// Frames: `(name, filename, line)`, names as str ids
    /// ([`NO_SYM`] when absent), in the order the entries use them.
    pub(crate) frames: Vec<(u32, u32, i64)>,
    /// Stacks as `(start, len)` in `pool` (local frame ids); stack 0 is
    /// the empty one.
    pub(crate) stacks: Vec<(u32, u32)>,
    pub(crate) pool: Vec<u32>,
    /// Entries with local stack and str ids (shared with a pass that
    /// reads them while the rest of the file is read).
    pub(crate) entries: Arc<Trace>,
    /// Where a following device's list starts: the number of the
    /// piece's entries before it (an empty list's start is its next's).
    pub(crate) lists: Vec<u32>,
    /// Where its first entry starts.
    start: u64,
    /// Where it stopped.
    end: End,
    /// Memo indices before the trace it named.
    before: Vec<u64>,
    /// Its first entry whose frames list holds something other than a
    /// frame dict.
    pub(crate) fault: Option<Fault>,
}

/// A trace entry whose `frames` list holds an item that is no dict: the
/// sequential reader's conversion refuses it (`convert`'s `Cx::frame`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    /// Its index among the piece's entries (a default entry stands there).
    pub(crate) entry: usize,
    /// The offset of its `SETITEMS` (where its dict is completed).
    pub(crate) at: u64,
    /// `frames[k]: expected a frame dict, found T`, as `convert` says it.
    pub(crate) message: String,
}

/// What follows a device's list ([`Dec::next_lists`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Next {
    /// Nothing the pieces take: the VM decodes it.
    Done,
    /// A list whose entries come in `MARK ... APPENDS` batches.
    Batch,
    /// A list of one entry, then `APPEND` (`_pickle.c`'s
    /// `batch_list_exact` for a list of one).
    One,
}

/// How a piece's decoding ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// The next entry starts here, at or past the piece's end.
    Next(u64),
    /// The device's list ends here (after its last `APPENDS`).
    ListEnd(u64),
}

/// A device's trace decoded in pieces, for the sequential decoder to
/// splice in (`pickle::vm::Core::splice`).
pub(crate) struct Decoded {
    /// Offset of the first entry's `EMPTY_DICT`.
    pub(crate) at: u64,
    /// Offset just after the list's last `APPENDS`.
    pub(crate) to: u64,
    /// Memo indices the trace stores: `memo_from..memo_to`.
    pub(crate) memo_from: u64,
    pub(crate) memo_to: u64,
    /// The pieces, in file order.
    pub(crate) pieces: Vec<Piece>,
    /// The devices' lists after the first one that the pieces hold (the
    /// next devices' traces, `EMPTY_LIST MEMOIZE` right after the previous
    /// one's end): where each starts, counted in entries of the pieces.
    pub(crate) lists: Vec<u64>,
    /// Memo indices of the trace named after it (strs only), with their
    /// text.
    pub(crate) later: Vec<(u64, String)>,
    /// Memo indices before the trace that it names, with what their bytes
    /// hold: decoding must find them the same and never change them (a
    /// container filled again through a memo get).
    pub(crate) before: Vec<(u64, Named)>,
    /// Threads the pieces were decoded on (their rows are mapped on as
    /// many).
    pub(crate) threads: usize,
    /// The strs of each thread's pieces (and of those decoded again while
    /// chaining, last).
    pub(crate) texts: Vec<Interner>,
    /// The `allocator_settings` dict after the trace, its opcodes
    /// (`FRAME`s left out), when it names nothing before it: read ahead for
    /// a pass over the trace that needs the settings before the file is
    /// read ([`crate::EarlyTrace`]).
    pub(crate) settings: Option<Vec<u8>>,
}

/// The strs a thread decoded, shared by its pieces (each holding its own
/// copies, 64 pieces of a 46 MB file held 10 MB of text).
#[derive(Default)]
struct Strs {
    text: Interner,
    /// Str id → which key it is (index in `TRACE_KEYS`, or 16 + index in
    /// `FRAME_KEYS`), [`NO_KEY`], or [`UNKNOWN`] not yet looked.
    key_of: Vec<u8>,
    /// Str id → the number of the last piece that met it.
    met: Vec<u32>,
    /// The number of the piece being decoded (from 1).
    piece: u32,
}

/// An object before the trace that it names, as its bytes hold it.
#[derive(Debug, PartialEq)]
pub(crate) enum Named {
    Str(String),
    /// `(name, filename, line)` as the sequential reader converts a frame
    /// dict (`None`: absent; `line` 0 when absent).
    Frame(FrameText),
    List(Vec<FrameText>),
}

/// A frame dict's fields.
pub(crate) type FrameText = (Option<String>, Option<String>, i64);

/// Bytes by absolute offset: a slice, or a file read a window at a time.
enum Src<'a> {
    Slice(&'a [u8]),
    At {
        file: &'a dyn At,
        len: u64,
        buf: Vec<u8>,
        base: u64,
        n: usize,
        chunk: usize,
    },
}

impl Src<'_> {
    /// Up to `want` bytes at `pos` (fewer only where the input ends).
    #[inline]
    fn win(&mut self, pos: u64, want: usize) -> &[u8] {
        match self {
            Src::Slice(b) => {
                let Ok(p) = usize::try_from(pos) else {
                    return &[];
                };
                let p = p.min(b.len());
                &b[p..b.len().min(p.saturating_add(want))]
            }
            Src::At {
                file,
                len,
                buf,
                base,
                n,
                chunk,
            } => {
                let end = pos.saturating_add(want as u64).min(*len);
                if pos >= end {
                    return &[];
                }
                if pos < *base || end > *base + *n as u64 {
                    let k = want.max(*chunk);
                    if buf.len() < k {
                        buf.resize(k, 0);
                    }
                    // the bytes from `pos` the window holds already are
                    // moved to its start, not read again
                    let held = *base + *n as u64;
                    let keep = if pos >= *base && pos < held {
                        let o = (pos - *base) as usize;
                        buf.copy_within(o..*n, 0);
                        *n - o
                    } else {
                        0
                    };
                    *n = keep + file.read_at(&mut buf[keep..k], pos + keep as u64);
                    *base = pos;
                }
                let o = (pos - *base) as usize;
                let e = usize::try_from(end - *base).unwrap_or(0).min(*n);
                buf.get(o..e).unwrap_or(&[])
            }
        }
    }

    /// The length of the opcode at `pos` with its argument ([`op_len`]).
    /// A long argument is not read: its header gives its length (a window
    /// of its size would stay in each thread's memory).
    fn op_len(&mut self, pos: u64) -> O<usize> {
        let len = self.len();
        if let Some(n) = declared_len(self.win(pos, 64)) {
            return (pos.checked_add(n as u64)? <= len).then_some(n);
        }
        // (a text opcode's lines longer than the window)
        op_len(self.win(pos, 1 << 20))
    }

    fn len(&self) -> u64 {
        match self {
            Src::Slice(b) => b.len() as u64,
            Src::At { len, .. } => *len,
        }
    }

    fn new(file: Input<'_>, chunk: usize) -> Src<'_> {
        match file {
            Input::Slice(b) => Src::Slice(b),
            Input::At(file, len) => Src::At {
                file,
                len,
                buf: Vec::new(),
                base: 0,
                n: 0,
                chunk,
            },
        }
    }
}

/// The bytes decoded: in memory, or a file of `len` bytes.
#[derive(Clone, Copy)]
pub(crate) enum Input<'a> {
    Slice(&'a [u8]),
    At(&'a dyn At, u64),
}

impl Input<'_> {
    fn len(&self) -> u64 {
        match self {
            Input::Slice(b) => b.len() as u64,
            Input::At(_, n) => *n,
        }
    }
}

/// A decoded value, with the piece's ids.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum L {
    None,
    /// Anything no field takes (bools).
    Other,
    /// An int that fits `i64`.
    Int(i64),
    /// An int above `i64::MAX` that fits `u64`.
    U64(u64),
    /// An int wider than that.
    Big,
    Str(u32),
    /// A frame dict (index in `fdicts`).
    FDict(u32),
    /// A frames list (index in `lists`).
    List(u32),
    /// A trace entry's dict.
    Entry,
}

/// The fields of a trace entry (`convert`'s `f_trace`, same order).
const TRACE_KEYS: [&str; 9] = [
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "device_free",
    "frames",
    "compile_context",
    "user_metadata",
];
/// A frame dict's fields.
const FRAME_KEYS: [&str; 3] = ["name", "filename", "line"];
/// `key_of`'s value for a str that is no key.
const NO_KEY: u8 = 254;
const UNKNOWN: u8 = 255;

/// A memo: indices from `base`.
struct Ctx {
    base: u64,
    memo: Vec<L>,
}

/// Bytes being decoded: `b[0]` is at offset `off` of an input of `end`
/// bytes.
#[derive(Clone, Copy)]
struct W<'w> {
    b: &'w [u8],
    off: u64,
    end: u64,
}

/// Longest trace entry decoded from a file (read through a window of this
/// size; a longer one gives up). Small: each thread holds twice that.
const WIN: usize = 64 << 10;

/// The file's first bytes, which the pieces' decoders read objects of
/// earlier bytes from without a read of their own: the strs and frame
/// dicts a trace names again are mostly defined by its first entries
/// (on 16 threads, 41,256 of c50's 41,277 such reads and 41,987 of w50's
/// 42,009 fell in its first 512 KiB; `docs/inspect-speed.md`).
const PREFIX: usize = 512 << 10;

/// One piece's decoder state.
struct Dec<'t, 'a, 's> {
    input: Input<'a>,
    /// The file's first bytes, read once for all pieces ([`PREFIX`]).
    prefix: &'a [u8],
    table: &'t [u32],
    strs: &'s mut Strs,
    /// The strs the piece met, in order.
    order: Vec<u32>,
    /// `(name, filename, line)` of each frame dict met.
    fdicts: Vec<(u32, u32, i64)>,
    fdict_frame: Vec<u32>,
    /// Frames lists: `(start, len)` in `items` (fdict indices).
    lists: Vec<(u32, u32)>,
    list_stack: Vec<u32>,
    items: Vec<u32>,
    frames: Vec<(u32, u32, i64)>,
    frame_map: HashMap<(u32, u32, i64), u32>,
    stacks: Vec<(u32, u32)>,
    pool: Vec<u32>,
    /// Hash of a stack's frame ids → its newest id; `stack_prev` chains
    /// the older ones with the same hash.
    stack_map: HashMap<u64, u32, IdBuild>,
    stack_prev: Vec<u32>,
    scratch: Vec<u32>,
    /// Objects of earlier bytes decoded so far: a direct-mapped cache
    /// (index, value) in front of the map.
    hot: Vec<(u64, L)>,
    foreign: HashMap<u64, L, IdBuild>,
    /// Gets bodies of frames lists decoded, `(start, end)` of their bytes
    /// in `bodies` and the list, by hash: the newest body with that hash
    /// (index in `body_of`); `body_prev` chains the older ones (a `Vec`
    /// per hash took 5 MB in a 6 MB piece).
    body_map: HashMap<u64, u32, IdBuild>,
    body_of: Vec<(u32, u32, u32)>,
    body_prev: Vec<u32>,
    bodies: Vec<u8>,
    entries: Trace,
    /// Nesting of foreign decodes (bounded by the grammar; checked).
    depth: u32,
    /// Memo indices below this one named (the objects before the trace).
    before_below: u64,
    before: Vec<u64>,
    /// Frames lists holding an item that is no frame dict: the first such
    /// item's index and its type's name.
    bad: HashMap<u32, (u32, &'static str), IdBuild>,
    fault: Option<Fault>,
}

/// A thread's piece tables, kept from one piece to the next, emptied:
/// dropped after each piece, their pages went back to the system at once
/// (the binary runs with mimalloc's purge delay at 0) and the next piece
/// faulted them in again (c500 on 2 threads: 94k minor faults while the
/// pieces decode; `docs/inspect-speed.md`, session 14).
#[derive(Default)]
struct Scratch {
    fdicts: Vec<(u32, u32, i64)>,
    fdict_frame: Vec<u32>,
    lists: Vec<(u32, u32)>,
    list_stack: Vec<u32>,
    items: Vec<u32>,
    frame_map: HashMap<(u32, u32, i64), u32>,
    stack_map: HashMap<u64, u32, IdBuild>,
    stack_prev: Vec<u32>,
    scratch: Vec<u32>,
    hot: Vec<(u64, L)>,
    foreign: HashMap<u64, L, IdBuild>,
    body_map: HashMap<u64, u32, IdBuild>,
    body_of: Vec<(u32, u32, u32)>,
    body_prev: Vec<u32>,
    bodies: Vec<u8>,
    memo: Vec<L>,
}

/// `v` emptied, its memory kept.
fn emptied<T>(v: &mut Vec<T>) -> Vec<T> {
    let mut v = std::mem::take(v);
    v.clear();
    v
}

/// `m` emptied, its memory kept.
fn emptied_map<K, V, S: Default>(m: &mut HashMap<K, V, S>) -> HashMap<K, V, S> {
    let mut m = std::mem::take(m);
    m.clear();
    m
}

type O<T> = Option<T>;

impl<'t, 'a, 's> Dec<'t, 'a, 's> {
    /// A piece's decoder with `sc`'s tables, emptied.
    fn new(input: Input<'a>, table: &'t [u32], strs: &'s mut Strs, sc: &mut Scratch) -> Self {
        strs.piece += 1;
        let mut stack_prev = emptied(&mut sc.stack_prev);
        stack_prev.push(NIL);
        let mut hot = emptied(&mut sc.hot);
        hot.resize(HOT, (u64::MAX, L::None));
        let mut d = Dec {
            input,
            prefix: &[],
            table,
            strs,
            order: Vec::new(),
            fdicts: emptied(&mut sc.fdicts),
            fdict_frame: emptied(&mut sc.fdict_frame),
            lists: emptied(&mut sc.lists),
            list_stack: emptied(&mut sc.list_stack),
            items: emptied(&mut sc.items),
            frames: Vec::new(),
            frame_map: emptied_map(&mut sc.frame_map),
            stacks: vec![(0, 0)],
            pool: Vec::new(),
            stack_map: emptied_map(&mut sc.stack_map),
            stack_prev,
            scratch: emptied(&mut sc.scratch),
            hot,
            foreign: emptied_map(&mut sc.foreign),
            body_map: emptied_map(&mut sc.body_map),
            body_of: emptied(&mut sc.body_of),
            body_prev: emptied(&mut sc.body_prev),
            bodies: emptied(&mut sc.bodies),
            entries: Trace::new(),
            depth: 0,
            before_below: 0,
            before: Vec::new(),
            bad: HashMap::default(),
            fault: None,
        };
        d.stack_map.insert(stack_hash(&[]), 0);
        d
    }

    /// The opcode at `p`, after any `FRAME` headers (which `p` then
    /// passes). A header declaring more bytes than the input holds after
    /// it gives up: the VM refuses it (`vm.rs`'s `FRAME`: `has_at_least`),
    /// wherever it stands.
    #[inline]
    fn op(w: W<'_>, p: &mut usize) -> O<u8> {
        loop {
            let b = *w.b.get(*p)?;
            if b != FRAME {
                return Some(b);
            }
            let n = u64::from_le_bytes(w.b.get(*p + 1..*p + 9)?.try_into().ok()?);
            let after = w.off + *p as u64 + 9;
            if n > w.end.saturating_sub(after) {
                return None;
            }
            *p += 9;
        }
    }

    /// A `MEMOIZE` at `p`, storing `v`: checked against the table (the
    /// object of its index starts before it, the next index's after it).
    #[inline]
    fn memoize(&self, cx: &mut Ctx, w: W<'_>, p: &mut usize, v: L) -> O<()> {
        let i = usize::try_from(cx.base + cx.memo.len() as u64).ok()?;
        let at = w.off + *p as u64;
        if u64::from(*self.table.get(i)?) >= at
            || self.table.get(i + 1).is_some_and(|&n| u64::from(n) <= at)
        {
            return None;
        }
        cx.memo.push(v);
        *p += 1;
        Some(())
    }

    /// `MEMOIZE` if one is next (after a str or a new container).
    #[inline]
    fn maybe_memoize(&self, cx: &mut Ctx, w: W<'_>, p: &mut usize, v: L) -> O<()> {
        if *w.b.get(*p)? == MEMOIZE {
            self.memoize(cx, w, p, v)?;
        }
        Some(())
    }

    /// The value memo index `i` holds.
    #[inline]
    fn get(&mut self, cx: &Ctx, i: u64) -> O<L> {
        if i >= cx.base {
            return cx.memo.get(usize::try_from(i - cx.base).ok()?).copied();
        }
        let h = self.hot[(i as usize) & (HOT - 1)];
        if h.0 == i {
            return Some(h.1);
        }
        self.get_cold(i)
    }

    fn get_cold(&mut self, i: u64) -> O<L> {
        if let Some(&v) = self.foreign.get(&i) {
            self.hot[(i as usize) & (HOT - 1)] = (i, v);
            return Some(v);
        }
        let v = self.foreign_object(i)?;
        self.foreign.insert(i, v);
        self.hot[(i as usize) & (HOT - 1)] = (i, v);
        if i < self.before_below {
            self.before.push(i);
        }
        Some(v)
    }

    /// Memo index `i`'s object, decoded from its bytes.
    fn foreign_object(&mut self, i: u64) -> O<L> {
        if self.depth > 4 {
            return None;
        }
        let start = u64::from(*self.table.get(usize::try_from(i).ok()?)?);
        self.depth += 1;
        let v = match self.input {
            Input::Slice(b) => {
                let w = W {
                    b: b.get(usize::try_from(start).ok()?..)?,
                    off: start,
                    end: b.len() as u64,
                };
                self.foreign_in(i, w)
            }
            Input::At(file, len) => {
                let prefix = self.prefix;
                let mut v = usize::try_from(start)
                    .ok()
                    .and_then(|s| prefix.get(s..))
                    .and_then(|b| {
                        self.foreign_in(
                            i,
                            W {
                                b,
                                off: start,
                                end: len,
                            },
                        )
                    });
                if v.is_some() {
                    self.depth -= 1;
                    return v;
                }
                // (most are a few hundred bytes: a str, a frame dict; a
                // frame dict with a long C++ name, a few kB)
                for size in [512u64, 4 << 10, 64 << 10, 1 << 20] {
                    let n = usize::try_from(size.min(len.saturating_sub(start))).ok()?;
                    let mut buf = vec![0u8; n];
                    if file.read_at(&mut buf, start) != n {
                        break;
                    }
                    v = self.foreign_in(
                        i,
                        W {
                            b: &buf,
                            off: start,
                            end: len,
                        },
                    );
                    if v.is_some() || (n as u64) < size {
                        break;
                    }
                }
                v
            }
        };
        self.depth -= 1;
        v
    }

    /// Memo index `i`'s object in `w` (which starts with it; its
    /// `MEMOIZE` follows its opcode).
    fn foreign_in(&mut self, i: u64, w: W<'_>) -> O<L> {
        let mut cx = Ctx {
            base: i,
            memo: Vec::new(),
        };
        let mut p = 0;
        match *w.b.first()? {
            0x8c | b'X' => {
                let s = self.str_op(w, &mut p)?;
                (w.b.get(p) == Some(&MEMOIZE)).then_some(L::Str(s))
            }
            EMPTY_DICT => self.fdict(&mut cx, w, &mut p).map(L::FDict),
            EMPTY_LIST => self.list(&mut cx, w, &mut p).map(L::List),
            _ => None,
        }
    }

    /// A `SHORT_BINUNICODE` or `BINUNICODE` at `p` (no MEMOIZE).
    #[inline]
    fn str_op(&mut self, w: W<'_>, p: &mut usize) -> O<u32> {
        let (hl, n) = match *w.b.get(*p)? {
            0x8c => (2usize, usize::from(*w.b.get(*p + 1)?)),
            b'X' => (
                5,
                usize::try_from(u32::from_le_bytes(
                    w.b.get(*p + 1..*p + 5)?.try_into().ok()?,
                ))
                .ok()?,
            ),
            _ => return None,
        };
        let a = *p + hl;
        let b = w.b.get(a..a.checked_add(n)?)?;
        let s = std::str::from_utf8(b).ok()?;
        let id = self.strs.text.intern(s)?;
        let i = id as usize;
        let met = &mut self.strs.met;
        if i >= met.len() {
            met.resize(i + 1, 0);
        }
        if met[i] != self.strs.piece {
            met[i] = self.strs.piece;
            self.order.push(id);
        }
        *p = a + n;
        Some(id)
    }

    /// A str, an int, `None`, a memo get or a frames list at `p`.
    #[inline]
    fn value(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<L> {
        let op = Self::op(w, p)?;
        let b = w.b.get(*p..)?;
        let (v, n) = match op {
            b'h' => {
                let i = u64::from(*b.get(1)?);
                *p += 2;
                return self.get(cx, i);
            }
            b'j' => {
                let i = u64::from(u32::from_le_bytes(b.get(1..5)?.try_into().ok()?));
                *p += 5;
                return self.get(cx, i);
            }
            0x8c | b'X' => {
                let s = self.str_op(w, p)?;
                self.maybe_memoize(cx, w, p, L::Str(s))?;
                return Some(L::Str(s));
            }
            b'N' => (L::None, 1),
            0x88 | 0x89 => (L::Other, 1),
            b'K' => (L::Int(i64::from(*b.get(1)?)), 2),
            b'M' => (
                L::Int(i64::from(u16::from_le_bytes(b.get(1..3)?.try_into().ok()?))),
                3,
            ),
            b'J' => (
                L::Int(i64::from(i32::from_le_bytes(b.get(1..5)?.try_into().ok()?))),
                5,
            ),
            0x8a => {
                let k = usize::from(*b.get(1)?);
                let x = b.get(2..2 + k)?;
                let v = match k {
                    0 => L::Int(0),
                    1..=8 => {
                        let mut raw = [0u8; 8];
                        raw[..k].copy_from_slice(x);
                        let shift = 64 - 8 * k as u32;
                        L::Int((i64::from_le_bytes(raw) << shift) >> shift)
                    }
                    9 => {
                        let lo = u64::from_le_bytes(x[..8].try_into().ok()?);
                        match (x[8], lo >> 63) {
                            (0, 1) => L::U64(lo),
                            (0, 0) | (0xff, 1) => L::Int(lo as i64),
                            _ => L::Big,
                        }
                    }
                    _ => L::Big,
                };
                (v, 2 + k)
            }
            EMPTY_LIST => return self.list(cx, w, p).map(L::List),
            _ => return None,
        };
        *p += n;
        Some(v)
    }

    /// Which key the str `s` is ([`NO_KEY`] for none).
    #[inline]
    fn key(&mut self, s: u32) -> u8 {
        let i = s as usize;
        let strs = &mut *self.strs;
        if let Some(&k) = strs.key_of.get(i) {
            if k != UNKNOWN {
                return k;
            }
        }
        if i >= strs.key_of.len() {
            strs.key_of.resize(i + 1, UNKNOWN);
        }
        let t = strs.text.get(s);
        strs.key_of[i] = if let Some(k) = TRACE_KEYS.iter().position(|&n| n == t) {
            k as u8
        } else if let Some(k) = FRAME_KEYS.iter().position(|&n| n == t) {
            16 + k as u8
        } else {
            NO_KEY
        };
        strs.key_of[i]
    }

    /// A key at `p`: a str or a memo get of one.
    #[inline]
    fn key_at(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<u8> {
        match self.value(cx, w, p)? {
            L::Str(s) => Some(self.key(s)),
            _ => None,
        }
    }

    /// A frame dict from its `EMPTY_DICT` at `p`: its index in `fdicts`.
    fn fdict(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<u32> {
        *p += 1;
        let id = u32::try_from(self.fdicts.len()).ok()?;
        self.maybe_memoize(cx, w, p, L::FDict(id))?;
        // its fields are set before anything can name it (a value here is
        // never a container)
        if Self::op(w, p)? != MARK {
            return None;
        }
        *p += 1;
        let (mut name, mut file, mut line) = (NO_SYM, NO_SYM, 0i64);
        let mut seen = 0u8;
        loop {
            if Self::op(w, p)? == SETITEMS {
                *p += 1;
                break;
            }
            let k = self.key_at(cx, w, p)?;
            let v = self.value(cx, w, p)?;
            let bit = 1u8 << (k.checked_sub(16).filter(|&k| k < 3)?);
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match (k - 16, v) {
                (0, L::Str(s)) => name = s,
                (1, L::Str(s)) => file = s,
                (2, L::Int(i)) => line = i,
                // an unknown line, 2**64-1: kept as -1 (`convert::line_of`)
                (2, L::U64(u)) => line = u as i64,
                _ => return None,
            }
        }
        self.fdicts.push((name, file, line));
        self.fdict_frame.push(NIL);
        Some(id)
    }

    /// A frames list item: a frame dict, or a memo get of one; `Err`
    /// with its type's name for a value that is no dict.
    #[inline]
    fn item(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<Result<u32, &'static str>> {
        let op = Self::op(w, p)?;
        if op == EMPTY_DICT {
            return self.fdict(cx, w, p).map(Ok);
        }
        let mut q = *p;
        match self.value(cx, w, &mut q) {
            Some(L::FDict(f)) => {
                *p = q;
                Some(Ok(f))
            }
            Some(v) => {
                *p = q;
                not_a_dict(v).map(Err)
            }
            None => {
                // a get of an earlier object this decoder does not take (a
                // list of other things, a tuple): its type by the opcode
                // that made it (the memo table's offset)
                let b = w.b.get(*p..)?;
                let (i, n) = match op {
                    b'h' => (u64::from(*b.get(1)?), 2),
                    b'j' => (
                        u64::from(u32::from_le_bytes(b.get(1..5)?.try_into().ok()?)),
                        5,
                    ),
                    _ => return None,
                };
                if i >= cx.base {
                    return None;
                }
                let start = u64::from(*self.table.get(usize::try_from(i).ok()?)?);
                let mut made = [0u8; 1];
                let got = match self.input {
                    Input::Slice(s) => usize::try_from(start)
                        .ok()
                        .and_then(|a| s.get(a))
                        .map(|&x| made[0] = x)
                        .is_some(),
                    Input::At(f, _) => f.read_at(&mut made, start) == 1,
                };
                // (the opcodes that make a list or a tuple; a dict may
                // convert as a frame: the sequential reader decides)
                let t = match made[0] {
                    _ if !got => return None,
                    EMPTY_LIST | b'l' => "list",
                    b')' | b't' | 0x85 | 0x86 | 0x87 => "tuple",
                    _ => return None,
                };
                *p += n;
                Some(Err(t))
            }
        }
    }

    /// A frames list from its `EMPTY_LIST` at `p`: its index in `lists`.
    ///
    /// `MEMOIZE MARK (BINGET | LONG_BINGET)* APPENDS` whose gets were seen
    /// before (the same bytes: the same memo indices, so the same frame
    /// dicts) is the list decoded then, not decoded again (as the
    /// sequential decoder's `list_of_gets`).
    fn list(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<u32> {
        *p += 1;
        let body = gets_body(w.b, *p);
        if let Some((a, e, h)) = body {
            if let Some(id) = self.known_list(h, &w.b[a..e]) {
                self.memoize(cx, w, p, L::List(id))?;
                *p = e + 1;
                return Some(id);
            }
        }
        let id = self.list_slow(cx, w, p)?;
        if let Some((a, e, h)) = body {
            let start = u32::try_from(self.bodies.len()).ok()?;
            self.bodies.extend_from_slice(&w.b[a..e]);
            let end = u32::try_from(self.bodies.len()).ok()?;
            let i = self.body_of.len();
            self.body_of.push((start, end, id));
            let prev = self.body_map.insert(h, u32::try_from(i).ok()?);
            self.body_prev.push(prev.unwrap_or(NIL));
        }
        Some(id)
    }

    /// The list a gets body `b` (hashed `h`) made before.
    #[inline]
    fn known_list(&self, h: u64, b: &[u8]) -> Option<u32> {
        let mut i = *self.body_map.get(&h)?;
        while i != NIL {
            let (s, e, id) = *self.body_of.get(i as usize)?;
            if self.bodies.get(s as usize..e as usize) == Some(b) {
                return Some(id);
            }
            i = *self.body_prev.get(i as usize)?;
        }
        None
    }

    fn list_slow(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<u32> {
        let id = u32::try_from(self.lists.len()).ok()?;
        self.lists.push((0, 0));
        self.list_stack.push(NIL);
        self.maybe_memoize(cx, w, p, L::List(id))?;
        // the items gathered aside: an item may be decoded from earlier
        // bytes, and a list met there adds its own items first
        let mut items = std::mem::take(&mut self.scratch);
        items.clear();
        let mut bad = None;
        let r = self.list_items(cx, w, p, &mut items, &mut bad);
        let start = u32::try_from(self.items.len()).ok()?;
        let n = u32::try_from(items.len()).ok()?;
        self.items.extend_from_slice(&items);
        self.scratch = items;
        r?;
        self.lists[id as usize] = (start, n);
        if let Some(b) = bad {
            self.bad.insert(id, b);
        }
        Some(id)
    }

    /// A frames list's items into `items`; the first that is no frame
    /// dict (its index and type) into `bad`, [`NIL`] standing in `items`.
    fn list_items(
        &mut self,
        cx: &mut Ctx,
        w: W<'_>,
        p: &mut usize,
        items: &mut Vec<u32>,
        bad: &mut Option<(u32, &'static str)>,
    ) -> O<()> {
        let mut push = |items: &mut Vec<u32>, x: Result<u32, &'static str>| -> O<()> {
            match x {
                Ok(f) => items.push(f),
                Err(t) => {
                    if bad.is_none() {
                        *bad = Some((u32::try_from(items.len()).ok()?, t));
                    }
                    items.push(NIL);
                }
            }
            Some(())
        };
        match Self::op(w, p)? {
            MARK => loop {
                *p += 1;
                while Self::op(w, p)? != APPENDS {
                    let x = self.item(cx, w, p)?;
                    push(items, x)?;
                }
                *p += 1;
                // another batch of a list of more than 1000 frames (a key
                // or SETITEMS follows a list in a trace entry, never MARK)
                if Self::op(w, p)? != MARK {
                    break;
                }
            },
            EMPTY_DICT => {
                let x = self.item(cx, w, p)?;
                push(items, x)?;
                if Self::op(w, p)? != APPEND {
                    return None;
                }
                *p += 1;
            }
            b'h' | b'j' => {
                // one frame (then APPEND) or an empty list and the next key
                let mut q = *p;
                let v = self.value(cx, w, &mut q)?;
                if let L::FDict(f) = v {
                    if Self::op(w, &mut q)? != APPEND {
                        return None;
                    }
                    items.push(f);
                    *p = q + 1;
                } else if Self::op(w, &mut q)? == APPEND {
                    // one item that is no frame dict (a key is followed by
                    // its value, never APPEND)
                    push(items, Err(not_a_dict(v)?))?;
                    *p = q + 1;
                }
            }
            _ => {}
        }
        Some(())
    }

    /// The local stack of frames list `l`.
    fn stack_of(&mut self, l: u32) -> O<u32> {
        let s = *self.list_stack.get(l as usize)?;
        if s != NIL {
            return Some(s);
        }
        let (a, n) = self.lists[l as usize];
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        for k in a..a + n {
            let fd = self.items[k as usize] as usize;
            let mut f = self.fdict_frame[fd];
            if f == NIL {
                let rec = self.fdicts[fd];
                f = match self.frame_map.get(&rec) {
                    Some(&f) => f,
                    None => {
                        let f = u32::try_from(self.frames.len()).ok()?;
                        self.frames.push(rec);
                        self.frame_map.insert(rec, f);
                        f
                    }
                };
                self.fdict_frame[fd] = f;
            }
            scratch.push(f);
        }
        let h = stack_hash(&scratch);
        let head = self.stack_map.get(&h).copied().unwrap_or(NIL);
        let mut s = head;
        while s != NIL {
            let (a, k) = self.stacks[s as usize];
            if self.pool[a as usize..(a + k) as usize] == scratch[..] {
                break;
            }
            s = self.stack_prev[s as usize];
        }
        if s == NIL {
            s = u32::try_from(self.stacks.len()).ok()?;
            let start = u32::try_from(self.pool.len()).ok()?;
            self.pool.extend_from_slice(&scratch);
            self.stacks.push((start, n));
            self.stack_prev.push(head);
            self.stack_map.insert(h, s);
        }
        self.scratch = scratch;
        self.list_stack[l as usize] = s;
        Some(s)
    }

    /// After a device's list ends at `p`, the next devices' lists (the
    /// `device_traces` list's items): `EMPTY_LIST MEMOIZE` then `MARK` and
    /// an entry ([`Next::Batch`], `p` at it), an entry alone (a list of
    /// one: the entry, then `APPEND`; [`Next::One`]), or another list or
    /// the `APPENDS` that ends `device_traces` (an empty trace, taken; the
    /// next is looked at). [`Next::Done`] (`p` after the last list taken)
    /// for anything else, which the VM decodes. Each list taken pushes the
    /// number of entries before it to `lists`.
    fn next_lists(
        &mut self,
        cx: &mut Ctx,
        w: W<'_>,
        p: &mut usize,
        lists: &mut Vec<u32>,
    ) -> O<Next> {
        loop {
            let mut q = *p;
            if Self::op(w, &mut q)? != EMPTY_LIST || *w.b.get(q + 1)? != MEMOIZE {
                return Some(Next::Done);
            }
            let mut r = q + 2;
            let next = match Self::op(w, &mut r)? {
                MARK => {
                    r += 1;
                    if Self::op(w, &mut r)? != EMPTY_DICT {
                        return Some(Next::Done);
                    }
                    Next::Batch
                }
                EMPTY_DICT => Next::One,
                EMPTY_LIST | APPENDS => Next::Done,
                _ => return Some(Next::Done),
            };
            q += 1;
            // (a list no entry names: a get of it gives up, as of an entry)
            self.memoize(cx, w, &mut q, L::Entry)?;
            lists.push(u32::try_from(self.entries.len()).ok()?);
            if next != Next::Done {
                *p = r;
                return Some(next);
            }
            *p = q;
        }
    }

    /// A trace entry from its `EMPTY_DICT` at `p`, converted as
    /// `convert`'s `trace_fields` converts one.
    fn entry(&mut self, cx: &mut Ctx, w: W<'_>, p: &mut usize) -> O<()> {
        *p += 1;
        self.maybe_memoize(cx, w, p, L::Entry)?;
        if Self::op(w, p)? != MARK {
            return None;
        }
        *p += 1;
        let mut f = [L::Other; 9];
        let mut seen = 0u16;
        let setitems = loop {
            if Self::op(w, p)? == SETITEMS {
                *p += 1;
                break w.off + *p as u64 - 1;
            }
            let k = self.key_at(cx, w, p)?;
            let v = self.value(cx, w, p)?;
            if k >= 9 || seen & (1 << k) != 0 {
                return None;
            }
            seen |= 1 << k;
            f[usize::from(k)] = v;
        };
        let has = |k: usize| seen & (1 << k) != 0;
        let u64_of = |v: L| match v {
            L::Int(i) => u64::try_from(i).ok(),
            L::U64(u) => Some(u),
            _ => None,
        };
        let (action, other_action) = match f[0] {
            L::Str(s) if has(0) => match TraceAction::parse(self.strs.text.get(s)) {
                Some(a) => (Some(a), None),
                None => (None, Some(Sym(s))),
            },
            _ => return None,
        };
        let opt_sym = |k: usize| -> O<Option<Sym>> {
            match f[k] {
                _ if !has(k) => Some(None),
                L::None => Some(None),
                L::Str(s) => Some(Some(Sym(s))),
                _ => None,
            }
        };
        let (frames, bad) = match f[6] {
            _ if !has(6) => (0, None),
            L::None => (0, None),
            L::List(l) => match self.bad.get(&l) {
                Some(&b) => (0, Some(b)),
                None => (self.stack_of(l)?, None),
            },
            _ => return None,
        };
        let e = TraceEntry {
            action,
            other_action,
            addr: if has(1) { u64_of(f[1])? } else { 0 },
            size: if has(2) { u64_of(f[2])? } else { 0 },
            stream: match f[3] {
                _ if !has(3) => 0,
                L::Int(i) => i as u64,
                L::U64(u) => u,
                _ => return None,
            },
            time_us: match f[4] {
                _ if !has(4) => None,
                L::Int(i) => Some(i),
                _ => return None,
            },
            device_free: if has(5) { Some(u64_of(f[5])?) } else { None },
            frames: StackId(frames),
            compile_context: opt_sym(7)?,
            user_metadata: opt_sym(8)?,
        };
        if let Some((k, t)) = bad {
            // the fields before `frames` converted: the sequential reader
            // names this one (a default entry stands in its place)
            if self.fault.is_none() {
                self.fault = Some(Fault {
                    entry: self.entries.len(),
                    at: setitems,
                    message: format!("frames[{k}]: expected a frame dict, found {t}"),
                });
            }
            self.entries.push(TraceEntry {
                action: Some(TraceAction::Alloc),
                other_action: None,
                addr: 0,
                size: 0,
                stream: 0,
                time_us: None,
                device_free: None,
                frames: StackId(0),
                compile_context: None,
                user_metadata: None,
            });
            return Some(());
        }
        self.entries.push(e);
        Some(())
    }

    /// A frame dict's fields as text.
    fn frame_text(&self, f: u32) -> O<FrameText> {
        let &(n, file, line) = self.fdicts.get(f as usize)?;
        let t = |s: u32| (s != NO_SYM).then(|| self.strs.text.get(s).to_owned());
        Some((t(n), t(file), line))
    }

    /// What memo index `i` (before the trace) holds, as text.
    fn named(&mut self, i: u64) -> O<Named> {
        Some(match self.get_cold(i)? {
            L::Str(s) => Named::Str(self.strs.text.get(s).to_owned()),
            L::FDict(f) => Named::Frame(self.frame_text(f)?),
            L::List(l) => {
                let (a, n) = *self.lists.get(l as usize)?;
                let mut out = Vec::new();
                for k in a..a + n {
                    out.push(self.frame_text(*self.items.get(k as usize)?)?);
                }
                Named::List(out)
            }
            _ => return None,
        })
    }

    /// Whether an entry starts at `w.b[p]`: `EMPTY_DICT MEMOIZE MARK` and
    /// the key `'action'` (a str or a get of one).
    fn entry_starts(&mut self, w: W<'_>, p: usize) -> bool {
        let b = w.b.get(p..).unwrap_or(&[]);
        if b.get(..3) != Some(&[EMPTY_DICT, MEMOIZE, MARK]) {
            return false;
        }
        let i = match b.get(3..) {
            Some([0x8c, 6, ..]) => return b.get(5..11) == Some(b"action"),
            Some([b'h', x, ..]) => u64::from(*x),
            Some([b'j', a, b, c, d, ..]) => u64::from(u32::from_le_bytes([*a, *b, *c, *d])),
            _ => return false,
        };
        let Some(start) = usize::try_from(i)
            .ok()
            .and_then(|i| self.table.get(i))
            .map(|&s| u64::from(s))
        else {
            return false;
        };
        let mut head = [0u8; 9];
        let want = b"\x8c\x06action\x94";
        match self.input {
            Input::Slice(s) => {
                usize::try_from(start).ok().and_then(|a| s.get(a..a + 9)) == Some(want)
            }
            Input::At(f, _) => f.read_at(&mut head, start) == 9 && &head == want,
        }
    }
}

/// The type name `convert` gives a frames list item `v` that is no dict
/// (`pickle::val::type_name`); `None` for a dict (a trace entry's: the
/// sequential reader decides what it makes of it).
fn not_a_dict(v: L) -> O<&'static str> {
    Some(match v {
        L::None => "NoneType",
        L::Other => "bool",
        L::Int(_) | L::U64(_) | L::Big => "int",
        L::Str(_) => "str",
        L::List(_) => "list",
        L::FDict(_) | L::Entry => return None,
    })
}

/// Slots of [`Dec`]'s cache of objects of earlier bytes (a piece names a
/// few hundred, millions of times).
const HOT: usize = 4096;

fn stack_hash(frames: &[u32]) -> u64 {
    hash_words(0x7061_7273_7461_636b, frames.iter().map(|&f| u64::from(f)))
}

/// After an `EMPTY_LIST` (`b[p]` on): `MEMOIZE MARK`, memo gets only,
/// `APPENDS` not followed by another batch: the gets' bytes `a..e` (`e`
/// the `APPENDS`) and their hash.
#[inline]
fn gets_body(b: &[u8], p: usize) -> Option<(usize, usize, u64)> {
    if b.get(p..p + 2)? != [MEMOIZE, MARK] {
        return None;
    }
    let a = p + 2;
    let mut q = a;
    loop {
        match *b.get(q)? {
            b'h' => q += 2,
            b'j' => q += 5,
            APPENDS => break,
            _ => return None,
        }
    }
    if matches!(b.get(q + 1), Some(&MARK) | Some(&FRAME) | None) {
        return None;
    }
    let body = &b[a..q];
    let h = hash_words(
        body.len() as u64,
        body.chunks(8).map(|c| {
            let mut x = [0u8; 8];
            x[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(x)
        }),
    );
    Some((a, q, h))
}

/// The first memo index whose `MEMOIZE` is at or after `pos`.
fn memo_index_at(table: &[u32], pos: u64) -> u64 {
    // (objects and MEMOIZEs alternate: the first object starting at or
    // after `pos` is the first whose MEMOIZE is)
    table.partition_point(|&s| u64::from(s) < pos) as u64
}

/// Decode entries from the one at `start` until one starts at or past
/// `until`, or the list ends.
#[allow(clippy::too_many_arguments)]
fn decode<'a>(
    main: &mut Src<'_>,
    input: Input<'a>,
    prefix: &'a [u8],
    table: &[u32],
    start: u64,
    until: u64,
    before_below: u64,
    strs: &mut Strs,
    texts: usize,
    sc: &mut Scratch,
) -> O<Piece> {
    let mut d = Dec::new(input, table, strs, sc);
    d.prefix = prefix;
    d.before_below = before_below;
    d.entries
        .reserve_rows(usize::try_from((until - start) / 64).unwrap_or(usize::MAX));
    let mut cx = Ctx {
        base: memo_index_at(table, start),
        memo: emptied(&mut sc.memo),
    };
    let mut pos = start;
    let mut devs = Vec::new();
    // whether the entry next is a list of one's
    let mut one = false;
    let end = 'out: loop {
        let w = W {
            b: main.win(pos, WIN),
            off: pos,
            end: input.len(),
        };
        let mut p = 0;
        // entries while the window holds WIN/2 more bytes (or the rest)
        let room = if w.b.len() == WIN { WIN / 2 } else { w.b.len() };
        while p < room {
            if Dec::op(w, &mut p)? != EMPTY_DICT {
                return None;
            }
            // (a list of one is decoded with its entry: a piece starting
            // there would not know it ends with `APPEND`)
            if pos + p as u64 >= until && !one {
                break 'out End::Next(pos + p as u64);
            }
            d.entry(&mut cx, w, &mut p)?;
            match Dec::op(w, &mut p)? {
                EMPTY_DICT if !one => {}
                APPEND if one => {
                    p += 1;
                    match d.next_lists(&mut cx, w, &mut p, &mut devs)? {
                        Next::Done => break 'out End::ListEnd(pos + p as u64),
                        n => one = n == Next::One,
                    }
                }
                APPENDS if !one => {
                    p += 1;
                    match w.b.get(p..p + 2) {
                        Some([MARK, EMPTY_DICT | FRAME]) => p += 1,
                        Some([EMPTY_DICT, ..]) => {
                            // Python's pickler: a last batch of one, then APPEND
                            d.entry(&mut cx, w, &mut p)?;
                            if Dec::op(w, &mut p)? != APPEND {
                                return None;
                            }
                            p += 1;
                            match d.next_lists(&mut cx, w, &mut p, &mut devs)? {
                                Next::Done => break 'out End::ListEnd(pos + p as u64),
                                n => one = n == Next::One,
                            }
                        }
                        _ => match d.next_lists(&mut cx, w, &mut p, &mut devs)? {
                            Next::Done => break 'out End::ListEnd(pos + p as u64),
                            n => one = n == Next::One,
                        },
                    }
                }
                _ => return None,
            }
        }
        if p == 0 {
            return None;
        }
        pos += p as u64;
    };
    let Dec {
        order,
        fdicts,
        fdict_frame,
        lists,
        list_stack,
        items,
        frames,
        frame_map,
        stacks,
        pool,
        stack_map,
        stack_prev,
        scratch,
        hot,
        foreign,
        body_map,
        body_of,
        body_prev,
        bodies,
        entries,
        before,
        fault,
        ..
    } = d;
    *sc = Scratch {
        fdicts,
        fdict_frame,
        lists,
        list_stack,
        items,
        frame_map,
        stack_map,
        stack_prev,
        scratch,
        hot,
        foreign,
        body_map,
        body_of,
        body_prev,
        bodies,
        memo: cx.memo,
    };
    Some(Piece {
        texts,
        order,
        frames,
        stacks,
        pool,
        entries: Arc::new(entries),
        lists: devs,
        start,
        end,
        before,
        fault,
    })
}

/// The first entry at or after `from` (an opcode boundary) and before
/// `until`.
fn first_entry(
    main: &mut Src<'_>,
    input: Input<'_>,
    table: &[u32],
    from: u64,
    until: u64,
) -> O<u64> {
    let mut strs = Strs::default();
    let mut d = Dec::new(input, table, &mut strs, &mut Scratch::default());
    let mut pos = from;
    while pos < until {
        let w = W {
            b: main.win(pos, 64),
            off: pos,
            end: input.len(),
        };
        if d.entry_starts(w, 0) {
            return Some(pos);
        }
        pos += main.op_len(pos)? as u64;
    }
    None
}

/// Where the first device trace's entries start: after the key
/// `'device_traces'`, the first `EMPTY_LIST MEMOIZE MARK EMPTY_DICT`
/// among the next few opcodes. `None` when there is none.
fn region_start(src: &mut Src<'_>) -> O<u64> {
    let mut pos = 0u64;
    let key = b"\x8c\x0ddevice_traces";
    // the key comes after the segments, which may be long: walk opcodes
    while !src.win(pos, key.len()).starts_with(key) {
        pos += src.op_len(pos)? as u64;
    }
    pos += key.len() as u64;
    for _ in 0..64 {
        let w = src.win(pos, 6);
        if w.starts_with(&[EMPTY_LIST, MEMOIZE, MARK, EMPTY_DICT]) {
            return Some(pos + 3);
        }
        pos += src.op_len(pos)? as u64;
    }
    None
}

/// Decode the device traces of the pickle in `input` (whose frames start
/// at `starts` and whose memo table is `table`) on `threads` threads: the
/// first with entries and those following it. `None` when the pickle does
/// not fit (see the module's doc).
pub(crate) fn decode_trace(
    input: Input<'_>,
    table: &[u32],
    starts: &[u64],
    threads: usize,
) -> O<Decoded> {
    let len = input.len();
    let mut src = Src::new(input, 1 << 16);
    let at = region_start(&mut src)?;
    let memo_from = memo_index_at(table, at);
    let prefix = match input {
        Input::Slice(_) => Vec::new(),
        Input::At(file, len) => {
            let mut b = vec![0u8; usize::try_from(len).map_or(PREFIX, |n| n.min(PREFIX))];
            let got = file.read_at(&mut b, 0);
            b.truncate(got);
            b
        }
    };
    // pieces: frame starts about `piece` apart
    let rest = len - at;
    let piece = (rest / (threads as u64 * 4).max(1)).clamp(256 << 10, 8 << 20);
    let mut cuts = vec![at];
    for &s in starts {
        if s >= cuts[cuts.len() - 1] + piece && s < len {
            cuts.push(s);
        }
    }
    cuts.push(len);
    let n = cuts.len() - 1;
    let next = AtomicUsize::new(0);
    // each thread's pieces name the strs it keeps, `texts[k]`
    let work = |k: usize| {
        let mut main = Src::new(input, 2 * WIN);
        let mut strs = Strs::default();
        let mut sc = Scratch::default();
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return (done, strs.text);
            }
            let start = if i == 0 {
                Some(at)
            } else {
                first_entry(&mut main, input, table, cuts[i], cuts[i + 1])
            };
            let p = start.and_then(|s| {
                decode(
                    &mut main,
                    input,
                    &prefix,
                    table,
                    s,
                    cuts[i + 1],
                    memo_from,
                    &mut strs,
                    k,
                    &mut sc,
                )
            });
            done.push((i, p));
        }
    };
    let threads = threads.clamp(1, n.max(1));
    let mut results: Vec<Option<Piece>> = (0..n).map(|_| None).collect();
    let mut texts = Vec::with_capacity(threads + 1);
    let mut done = Vec::new();
    if threads == 1 {
        let (d, t) = work(0);
        done = d;
        texts.push(t);
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads).map(|k| s.spawn(move || work(k))).collect();
            for h in hs {
                // (a thread that panicked: its pieces are decoded again)
                let (d, t) = h.join().unwrap_or_default();
                done.extend(d);
                texts.push(t);
            }
        });
    }
    for (i, p) in done {
        results[i] = p;
    }
    // chain them in file order
    let mut main = Src::new(input, 2 * WIN);
    let mut strs = Strs::default();
    let mut sc = Scratch::default();
    let again = texts.len();
    let mut pieces = Vec::new();
    let mut cur = at;
    let mut to = None;
    for (i, r) in results.into_iter().enumerate() {
        if cur >= cuts[i + 1] {
            continue;
        }
        let p = match r {
            Some(p) if p.start == cur => p,
            _ => decode(
                &mut main,
                input,
                &prefix,
                table,
                cur,
                cuts[i + 1],
                memo_from,
                &mut strs,
                again,
                &mut sc,
            )?,
        };
        let end = p.end;
        pieces.push(p);
        match end {
            End::Next(x) => cur = x,
            End::ListEnd(x) => {
                to = Some(x);
                break;
            }
        }
    }
    let to = to?;
    let memo_to = memo_index_at(table, to);
    let (later, settings) = named_later(&mut main, table, to, memo_from, memo_to)?;
    let mut idx: Vec<u64> = pieces
        .iter()
        .flat_map(|p| p.before.iter().copied())
        .collect();
    idx.sort_unstable();
    idx.dedup();
    texts.push(strs.text);
    let mut lists = Vec::new();
    let mut n = 0u64;
    for p in &pieces {
        lists.extend(p.lists.iter().map(|&k| n + u64::from(k)));
        n += p.entries.len() as u64;
    }
    let mut strs = Strs::default();
    let mut d = Dec::new(input, table, &mut strs, &mut Scratch::default());
    let mut before = Vec::with_capacity(idx.len());
    for i in idx {
        before.push((i, d.named(i)?));
    }
    Some(Decoded {
        texts,
        threads,
        before,
        at,
        to,
        memo_from,
        memo_to,
        pieces,
        lists,
        later,
        settings,
    })
}

/// The memo indices in `from..to` that memo gets after offset `pos` name
/// (to its `STOP`), each with its text: strs only (`None` for anything
/// else, or opcodes the walk cannot follow); and the opcodes of the
/// `allocator_settings` dict met on the way ([`settings_dict`]).
fn named_later(
    src: &mut Src<'_>,
    table: &[u32],
    mut pos: u64,
    from: u64,
    to: u64,
) -> O<(Later, Option<Vec<u8>>)> {
    let mut out: Vec<(u64, String)> = Vec::new();
    let mut settings = None;
    loop {
        if settings.is_none() && src.win(pos, SETTINGS_KEY.len()) == SETTINGS_KEY {
            settings = settings_dict(src, table, pos + SETTINGS_KEY.len() as u64);
        }
        let i = match src.win(pos, 5) {
            [b'.', ..] => return Some((out, settings)),
            [b'h', x, ..] => Some(u64::from(*x)),
            [b'j', a, b, c, d, ..] => Some(u64::from(u32::from_le_bytes([*a, *b, *c, *d]))),
            _ => None,
        };
        pos += src.op_len(pos)? as u64;
        let Some(i) = i.filter(|i| (from..to).contains(i)) else {
            continue;
        };
        if out.iter().any(|(k, _)| *k == i) {
            continue;
        }
        out.push((i, memo_str(src, table, i)?));
        if out.len() > 4096 {
            return None;
        }
    }
}

/// Memo indices with the strs they store.
type Later = Vec<(u64, String)>;

/// The str memo index `i` stores (`None` for anything else).
fn memo_str(src: &mut Src<'_>, table: &[u32], i: u64) -> O<String> {
    let start = u64::from(*table.get(usize::try_from(i).ok()?)?);
    let h = src.win(start, 5);
    let (hl, n) = match *h.first()? {
        0x8c => (2u64, u64::from(*h.get(1)?)),
        b'X' => (
            5,
            u64::from(u32::from_le_bytes(h.get(1..5)?.try_into().ok()?)),
        ),
        _ => return None,
    };
    let n = usize::try_from(n).ok()?;
    let b = src.win(start + hl, n + 1);
    if b.get(n) != Some(&MEMOIZE) {
        return None;
    }
    Some(std::str::from_utf8(&b[..n]).ok()?.to_owned())
}

/// The key `'allocator_settings'`, memoized (`memory_snapshot.cpp` writes
/// the settings after the device traces).
const SETTINGS_KEY: &[u8] = b"\x8c\x12allocator_settings\x94";

/// The opcodes of the dict at `at`, `FRAME`s left out and memo gets of
/// strs replaced by the strs (PyTorch's empty conf string is one): up to
/// the `SETITEMS` that closes its first `MARK` (or its one `SETITEM`).
/// `None` for a get of anything else, or past 64 KiB.
fn settings_dict(src: &mut Src<'_>, table: &[u32], at: u64) -> O<Vec<u8>> {
    if src.win(at, 1) != [EMPTY_DICT] {
        return None;
    }
    let mut out = Vec::new();
    let mut pos = at;
    let mut depth = 0u32;
    loop {
        let op = *src.win(pos, 1).first()?;
        let n = src.op_len(pos)?;
        let get = match src.win(pos, 5) {
            [b'h', x, ..] => Some(u64::from(*x)),
            [b'j', a, b, c, d] => Some(u64::from(u32::from_le_bytes([*a, *b, *c, *d]))),
            _ => None,
        };
        match op {
            b'h' | b'j' => {
                let t = memo_str(src, table, get?)?;
                out.push(b'X');
                out.extend_from_slice(&u32::try_from(t.len()).ok()?.to_le_bytes());
                out.extend_from_slice(t.as_bytes());
                pos += n as u64;
                continue;
            }
            // a text memo get, the end
            b'g' | b'.' => return None,
            MARK => depth += 1,
            // (opcodes that pop to the mark)
            SETITEMS | APPENDS | b't' | b'l' | b'd' | b'1' | 0x90 | 0x91 => {
                depth = depth.checked_sub(1)?;
            }
            _ => {}
        }
        if op != FRAME {
            out.extend_from_slice(src.win(pos, n));
        }
        pos += n as u64;
        if depth == 0 && (op == SETITEMS || op == b's') {
            return Some(out);
        }
        if out.len() > 1 << 16 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_window_gives_the_bytes_a_slice_does() {
        // windows forward with overlaps (what the held bytes serve), back,
        // past the end and larger than the chunk
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let file: &[u8] = &bytes;
        let mut src = Src::new(Input::At(&file, bytes.len() as u64), 1000);
        let mut slice = Src::new(Input::Slice(&bytes), 1000);
        for &(pos, want) in &[
            (0u64, 600usize),
            (300, 600),
            (700, 600),
            (1_100, 900),
            (1_150, 2_500),
            (50, 100),
            (9_800, 600),
            (9_999, 5),
            (10_000, 5),
            (4_000, 64),
            (4_010, 1_500),
        ] {
            let a = src.win(pos, want).to_vec();
            assert_eq!(a, slice.win(pos, want), "{pos} {want}");
        }
    }
}

#[cfg(test)]
mod unknown_line_tests {
    use crate::convert::tests::{assert_unknown_line, lines, UNKNOWN_LINE};

    #[test]
    fn the_parallel_decoder_keeps_an_unknown_line_as_minus_one() {
        // protocol 4, as PyTorch writes it (the decoder takes no other)
        for threads in [1, 2, 4] {
            let s = crate::read_parallel(UNKNOWN_LINE[2], threads)
                .expect("the parallel decoder gave up")
                .unwrap();
            assert_unknown_line(&s);
            let seq = crate::read_snapshot_sequential(UNKNOWN_LINE[2]).unwrap();
            assert_eq!(lines(&s), lines(&seq));
        }
    }
}
