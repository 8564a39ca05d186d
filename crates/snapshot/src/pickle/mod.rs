//! A safe pickle reader: a stack machine for protocols 0–5 that never
//! imports or runs anything.
//!
//! [`parse`] decodes bytes into a [`Pickle`], an arena that holds every value;
//! [`ValueRef`] is a cheap `Copy` handle for walking it and [`Value`] an owned,
//! detached tree for small pieces.
//!
//! # What is accepted
//! Plain data only: `None`, bools, ints of any width, floats, str, bytes,
//! bytearray, list, tuple, dict, set and frozenset. Globals are refused
//! ([`Error::ForbiddenGlobal`]) unless they name one of these builtin
//! constructors, which are emulated here on plain data:
//! `collections.OrderedDict` (becomes a dict), `builtins`/`__builtin__`
//! `dict`, `list`, `tuple`, `set`, `frozenset`, `bytes`, `bytearray`, and
//! `_codecs.encode` (how protocol 2 pickles `bytes`). `BUILD` is accepted
//! only with empty state. Persistent ids, the extension registry and
//! out-of-band buffers are refused.
//!
//! # Semantics
//! Shared references behave as in Python: a memoized list that is mutated
//! after being stored elsewhere shows the change everywhere. Dict keys and set
//! members follow Python equality (`1 == 1.0 == True`; big ints and floats are
//! never considered equal to each other). Python 2 `str` (STRING opcodes)
//! becomes `str` when it is valid UTF-8 and `bytes` otherwise; text that is not
//! valid UTF-8 (e.g. lone surrogates) has the bad sequences replaced by U+FFFD.
//!
//! # Cost
//! Values are 8-byte handles. Strings are interned, containers are frozen
//! once stored inside another object: identical lists then share storage and
//! dicts with the same keys share one key list, so a snapshot's millions of
//! frame lists and trace dicts cost little more than their values.
//! Input up to 4 GiB of items per kind is supported.

mod input;
mod keys;
mod store;
mod text;
mod val;
mod vm;

use std::fmt;

use crate::Error;
pub(crate) use store::{le_to_i64, le_to_u64, IntRef, Store};
pub(crate) use val::{Tag, Val};
pub(crate) use vm::{op_name, Absorb, Splice, BAIL};

/// Decode a pickle. The bytes are not borrowed by the result.
///
/// Decoding stops at the first `STOP` opcode; any bytes after it are ignored,
/// as `pickle.loads` does.
pub fn parse(bytes: &[u8]) -> Result<Pickle, Error> {
    vm::Vm::new(input::SliceInput::new(bytes), Some(bytes.len() as u64), ())
        .run()
        .0
}

/// [`parse`], every opcode executed one by one (never a trace entry's dict
/// in one step): for tests and fuzzing, which hold both to the same result.
#[doc(hidden)]
pub fn parse_stepwise(bytes: &[u8]) -> Result<Pickle, Error> {
    vm::Vm::new(input::SliceInput::new(bytes), Some(bytes.len() as u64), ())
        .stepwise()
        .run()
        .0
}

/// Decode with a hook, from a slice.
pub(crate) fn parse_slice_with<A: Absorb>(bytes: &[u8], ab: A) -> (Result<Pickle, Error>, A) {
    let (r, ab, _) = vm::Vm::new(input::SliceInput::new(bytes), Some(bytes.len() as u64), ab).run();
    (r, ab)
}

/// Decode a pickle from a reader, streaming it through a 1 MiB buffer (the
/// input is never held whole). `len_hint` is the input length when known
/// (e.g. a file's size); it lets oversized length fields fail early.
///
/// An I/O error while reading is reported as [`Error::Io`] with an empty path.
pub fn parse_reader(reader: impl std::io::Read, len_hint: Option<u64>) -> Result<Pickle, Error> {
    let inp = input::ReadInput::new(reader, len_hint);
    let (r, _, mut inp) = vm::Vm::new(inp, len_hint, ()).run();
    match (r, inp.err.take()) {
        (Err(_), Some(source)) => Err(Error::Io {
            path: Default::default(),
            source,
        }),
        (r, _) => r,
    }
}

/// Decode a file (`len` bytes) with a hook, reading it on a helper thread
/// while decoding.
pub(crate) fn parse_file_with<A: Absorb>(
    file: impl std::io::Read + Send + 'static,
    len: u64,
    ab: A,
) -> (Result<Pickle, Error>, A) {
    let io = |source| Error::Io {
        path: Default::default(),
        source,
    };
    let inp = match input::ThreadedInput::new(file, Some(len)) {
        Ok(i) => i,
        Err(e) => return (Err(io(e)), ab),
    };
    let (r, ab, mut inp) = vm::Vm::new(inp, Some(len), ab).run();
    match (r, inp.err.take()) {
        (Err(_), Some(source)) => (Err(io(source)), ab),
        (r, _) => (r, ab),
    }
}

/// Decode a file (`len` bytes) with a hook, read through a buffer on
/// this thread (a file the hook may have decoding jump through: see
/// [`Absorb::splice`]).
pub(crate) fn parse_file_jumping_with<A: Absorb>(
    file: std::fs::File,
    len: u64,
    ab: A,
) -> (Result<Pickle, Error>, A) {
    use std::io::{Seek, SeekFrom};
    let inp =
        input::ReadInput::seekable(file, Some(len), |f, to| f.seek(SeekFrom::Start(to)).is_ok());
    let (r, ab, mut inp) = vm::Vm::new(inp, Some(len), ab).run();
    match (r, inp.err.take()) {
        (Err(_), Some(source)) => (
            Err(Error::Io {
                path: Default::default(),
                source,
            }),
            ab,
        ),
        (r, _) => (r, ab),
    }
}

/// A decoded pickle: an arena holding every value, plus the root.
pub struct Pickle {
    pub(crate) st: Store,
    pub(crate) root: Val,
    pub(crate) proto: u8,
}

impl Pickle {
    /// The object the pickle encodes.
    pub fn root(&self) -> ValueRef<'_> {
        ValueRef {
            st: &self.st,
            v: self.root,
        }
    }

    /// The protocol given by the `PROTO` opcode (0 when absent).
    pub fn protocol(&self) -> u8 {
        self.proto
    }

    /// Approximate heap bytes held by the arena.
    pub fn heap_bytes(&self) -> usize {
        self.st.heap_bytes()
    }
}

impl fmt::Debug for Pickle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pickle")
            .field("protocol", &self.proto)
            .field("root", &self.root())
            .finish()
    }
}

/// A borrowed handle to one value inside a [`Pickle`]. `Copy`, 16 bytes.
#[derive(Clone, Copy)]
pub struct ValueRef<'a> {
    st: &'a Store,
    v: Val,
}

/// What a [`ValueRef`] is, with its contents borrowed.
#[derive(Clone, Copy, Debug)]
pub enum View<'a> {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int that fits `i64`.
    Int(i64),
    /// An int that does not fit `i64`: little-endian two's complement bytes,
    /// minimal length.
    BigInt(&'a [u8]),
    /// A float.
    Float(f64),
    /// A str.
    Str(&'a str),
    /// A bytes object.
    Bytes(&'a [u8]),
    /// A bytearray.
    ByteArray(&'a [u8]),
    /// A list.
    List(Seq<'a>),
    /// A tuple.
    Tuple(Seq<'a>),
    /// A set (insertion order kept).
    Set(Seq<'a>),
    /// A frozenset (insertion order kept).
    FrozenSet(Seq<'a>),
    /// A dict (insertion order kept).
    Dict(DictRef<'a>),
    /// A whitelisted global that was referenced but never called.
    Global {
        /// Module name.
        module: &'a str,
        /// Attribute name.
        name: &'a str,
    },
}

impl<'a> ValueRef<'a> {
    pub(crate) fn new(st: &'a Store, v: Val) -> Self {
        ValueRef { st, v }
    }

    /// Borrowed view of the value.
    pub fn view(self) -> View<'a> {
        let st = self.st;
        let v = self.v;
        match v.tag() {
            Tag::None | Tag::Empty => View::None,
            Tag::Bool => View::Bool(v.0 & 1 == 1),
            Tag::Int | Tag::IntBox | Tag::BigInt => match st.int(v) {
                Some(IntRef::Small(i)) => View::Int(i),
                Some(IntRef::Big(b)) => View::BigInt(b),
                None => View::None,
            },
            Tag::Float => View::Float(st.float(v).unwrap_or(f64::NAN)),
            Tag::Str => View::Str(st.strs.get(v.id())),
            Tag::Bytes => View::Bytes(st.blob(v).unwrap_or(&[])),
            Tag::ByteArray => View::ByteArray(st.blob(v).unwrap_or(&[])),
            Tag::List => View::List(self.seq()),
            Tag::Tuple => View::Tuple(self.seq()),
            Tag::Set => View::Set(self.seq()),
            Tag::FrozenSet => View::FrozenSet(self.seq()),
            Tag::Dict => {
                let (keys, vals) = st
                    .dict_parts(v)
                    .map(|(_, k, v)| (k, v))
                    .unwrap_or((&[], &[]));
                View::Dict(DictRef { st, keys, vals })
            }
            Tag::Global => {
                let (m, n) = st.globals.get(v.idx()).copied().unwrap_or((0, 0));
                View::Global {
                    module: st.strs.get(m),
                    name: st.strs.get(n),
                }
            }
        }
    }

    fn seq(self) -> Seq<'a> {
        Seq {
            st: self.st,
            items: self.st.seq_items(self.v).unwrap_or(&[]),
        }
    }

    /// The Python type name (`"int"`, `"dict"`, ...).
    pub fn type_name(self) -> &'static str {
        val::type_name(self.v.tag())
    }

    /// `true` for `None`.
    pub fn is_none(self) -> bool {
        self.v.tag() == Tag::None
    }

    /// The bool, if this is a bool.
    pub fn as_bool(self) -> Option<bool> {
        (self.v.tag() == Tag::Bool).then_some(self.v.0 & 1 == 1)
    }

    /// The int, if this is an int that fits `i64` (bools are not ints here).
    pub fn as_i64(self) -> Option<i64> {
        match self.st.int(self.v)? {
            IntRef::Small(i) => Some(i),
            IntRef::Big(b) => le_to_i64(b),
        }
    }

    /// The int, if this is a non-negative int that fits `u64`.
    pub fn as_u64(self) -> Option<u64> {
        match self.st.int(self.v)? {
            IntRef::Small(i) => u64::try_from(i).ok(),
            IntRef::Big(b) => le_to_u64(b),
        }
    }

    /// The number as `f64` (floats, and ints converted).
    pub fn as_f64(self) -> Option<f64> {
        match self.view() {
            View::Float(f) => Some(f),
            View::Int(i) => Some(i as f64),
            _ => None,
        }
    }

    /// The str, if this is a str.
    pub fn as_str(self) -> Option<&'a str> {
        self.st.str(self.v)
    }

    /// The bytes, if this is bytes or a bytearray.
    pub fn as_bytes(self) -> Option<&'a [u8]> {
        self.st.blob(self.v)
    }

    /// The items, if this is a list, tuple, set or frozenset.
    pub fn as_seq(self) -> Option<Seq<'a>> {
        match self.v.tag() {
            Tag::List | Tag::Tuple | Tag::Set | Tag::FrozenSet => Some(self.seq()),
            _ => None,
        }
    }

    /// The dict, if this is a dict.
    pub fn as_dict(self) -> Option<DictRef<'a>> {
        match self.view() {
            View::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// `dict[key]` for a str key; `None` if this is not a dict or has no such key.
    pub fn get(self, key: &str) -> Option<ValueRef<'a>> {
        self.as_dict()?.get(key)
    }

    /// Whether both handles denote the same Python object (identity, as
    /// `is`). Equal immutable values may or may not be the same object.
    pub fn same_object(self, other: ValueRef<'_>) -> bool {
        std::ptr::eq(self.st, other.st) && self.v == other.v
    }

    /// Copy the value out into an owned [`Value`]. Shared sub-objects are
    /// copied once per reference; nesting deeper than 128 levels (including
    /// self-references) fails with [`Error::LimitExceeded`]; a copy of
    /// more than [`EXPANSION_PER_BYTE`] values per byte of the pickle with
    /// [`Error::ExpansionLimit`], after at most that much work.
    pub fn to_value(self) -> Result<Value, Error> {
        let items = (self.st.seq_pool.len() + self.st.dict_vals.len()) as u64;
        let total = (items * 4).max(self.st.input_len * EXPANSION_PER_BYTE) + 64;
        let mut budget = total;
        to_value(self, 0, &mut budget).map_err(|e| match e {
            Error::LimitExceeded { what, .. } if what == EXPANSION => Error::ExpansionLimit {
                copied: total - budget,
                budget: total,
                file_len: self.st.input_len,
            },
            e => e,
        })
    }
}

/// How many values [`ValueRef::to_value`] may copy out per byte of the
/// pickle: a shared frame dict fetched by a 2-byte `BINGET` is 7 values,
/// a whole shared frames list a few hundred for 5 bytes, so real snapshots
/// stay far below it, while 60 nested lists that each hold the previous one
/// twice (2^60 values from 2 KB) are refused after a few kilobytes' work.
pub const EXPANSION_PER_BYTE: u64 = 16;

/// The internal marker of an exhausted copy budget (reported as
/// [`Error::ExpansionLimit`]).
const EXPANSION: &str = "expanding shared references into an owned tree";

/// Deepest nesting [`ValueRef::to_value`] copies (snapshots are ~5 deep).
const MAX_DEPTH: u32 = 128;

fn to_value(r: ValueRef<'_>, depth: u32, budget: &mut u64) -> Result<Value, Error> {
    if depth > MAX_DEPTH {
        return Err(Error::LimitExceeded {
            offset: None,
            what: "nesting deeper than 128 levels (or a recursive structure)",
        });
    }
    if *budget == 0 {
        return Err(Error::LimitExceeded {
            offset: None,
            what: EXPANSION,
        });
    }
    *budget -= 1;
    let seq = |s: Seq<'_>, budget: &mut u64| -> Result<Vec<Value>, Error> {
        s.iter().map(|x| to_value(x, depth + 1, budget)).collect()
    };
    Ok(match r.view() {
        View::None => Value::None,
        View::Bool(b) => Value::Bool(b),
        View::Int(i) => Value::Int(i),
        View::BigInt(b) => Value::BigInt(BigInt(b.into())),
        View::Float(f) => Value::Float(f),
        View::Str(s) => Value::Str(s.to_owned()),
        View::Bytes(b) => Value::Bytes(b.to_vec()),
        View::ByteArray(b) => Value::ByteArray(b.to_vec()),
        View::List(_) if r.st.native_run(r.v).is_some() => {
            return Err(Error::LimitExceeded {
                offset: None,
                what: BAIL,
            })
        }
        View::List(s) => Value::List(seq(s, budget)?),
        View::Tuple(s) => Value::Tuple(seq(s, budget)?),
        View::Set(s) => Value::Set(seq(s, budget)?),
        View::FrozenSet(s) => Value::FrozenSet(seq(s, budget)?),
        View::Dict(_) if r.st.native(r.v).is_some() => {
            return Err(Error::LimitExceeded {
                offset: None,
                what: BAIL,
            })
        }
        View::Dict(d) => {
            let mut out = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                out.push((
                    to_value(k, depth + 1, budget)?,
                    to_value(v, depth + 1, budget)?,
                ));
            }
            Value::Dict(out)
        }
        View::Global { module, name } => Value::Global {
            module: module.to_owned(),
            name: name.to_owned(),
        },
    })
}

impl fmt::Debug for ValueRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_ref(*self, f, 0)
    }
}

fn debug_ref(r: ValueRef<'_>, f: &mut fmt::Formatter<'_>, depth: u32) -> fmt::Result {
    const MAX_ITEMS: usize = 8;
    if depth > 6 {
        return f.write_str("…");
    }
    let seq = |f: &mut fmt::Formatter<'_>, open: &str, close: &str, s: Seq<'_>| -> fmt::Result {
        f.write_str(open)?;
        for (i, x) in s.iter().take(MAX_ITEMS).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            debug_ref(x, f, depth + 1)?;
        }
        if s.len() > MAX_ITEMS {
            write!(f, ", … ({} items)", s.len())?;
        }
        f.write_str(close)
    };
    match r.view() {
        View::None => f.write_str("None"),
        View::Bool(b) => f.write_str(if b { "True" } else { "False" }),
        View::Int(i) => write!(f, "{i}"),
        View::BigInt(b) => write!(f, "BigInt({b:02x?})"),
        View::Float(x) => write!(f, "{x:?}"),
        View::Str(s) => write!(f, "{s:?}"),
        View::Bytes(b) => write!(f, "b{:?}", String::from_utf8_lossy(&b[..b.len().min(64)])),
        View::ByteArray(b) => write!(f, "bytearray({} bytes)", b.len()),
        View::List(s) => seq(f, "[", "]", s),
        View::Tuple(s) => seq(f, "(", ")", s),
        View::Set(s) => seq(f, "{", "}", s),
        View::FrozenSet(s) => seq(f, "frozenset({", "})", s),
        View::Dict(d) => {
            f.write_str("{")?;
            for (i, (k, v)) in d.iter().take(MAX_ITEMS).enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                debug_ref(k, f, depth + 1)?;
                f.write_str(": ")?;
                debug_ref(v, f, depth + 1)?;
            }
            if d.len() > MAX_ITEMS {
                write!(f, ", … ({} items)", d.len())?;
            }
            f.write_str("}")
        }
        View::Global { module, name } => write!(f, "<global {module}.{name}>"),
    }
}

/// The items of a list, tuple, set or frozenset.
#[derive(Clone, Copy)]
pub struct Seq<'a> {
    st: &'a Store,
    items: &'a [Val],
}

impl<'a> Seq<'a> {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// `true` when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Item `i`.
    pub fn get(&self, i: usize) -> Option<ValueRef<'a>> {
        let st = self.st;
        self.items.get(i).map(|&v| ValueRef { st, v })
    }

    /// The items in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = ValueRef<'a>> + 'a {
        let st = self.st;
        self.items.iter().map(move |&v| ValueRef { st, v })
    }
}

impl fmt::Debug for Seq<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq(len={})", self.len())
    }
}

/// A dict's entries, in insertion order.
#[derive(Clone, Copy)]
pub struct DictRef<'a> {
    st: &'a Store,
    keys: &'a [Val],
    vals: &'a [Val],
}

impl<'a> DictRef<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// `true` when empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The value for a str key (a linear scan over the keys).
    pub fn get(&self, key: &str) -> Option<ValueRef<'a>> {
        let id = self.st.strs.lookup(key)?;
        let k = Val::new(Tag::Str, id);
        let i = self.keys.iter().position(|&x| x == k)?;
        let st = self.st;
        self.vals.get(i).map(|&v| ValueRef { st, v })
    }

    /// `(key, value)` pairs in insertion order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (ValueRef<'a>, ValueRef<'a>)> + 'a {
        let st = self.st;
        self.keys
            .iter()
            .zip(self.vals)
            .map(move |(&k, &v)| (ValueRef { st, v: k }, ValueRef { st, v }))
    }
}

impl fmt::Debug for DictRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DictRef(len={})", self.len())
    }
}

/// An int too wide for `i64`: little-endian two's complement bytes, minimal
/// length (as pickle's `LONG1` stores it).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BigInt(pub Box<[u8]>);

impl BigInt {
    /// The little-endian two's complement bytes.
    pub fn le_bytes(&self) -> &[u8] {
        &self.0
    }

    /// `true` when negative.
    pub fn is_negative(&self) -> bool {
        self.0.last().is_some_and(|&b| b & 0x80 != 0)
    }

    /// The value as `u64`, if it is non-negative and fits.
    pub fn to_u64(&self) -> Option<u64> {
        le_to_u64(&self.0)
    }

    /// The value as `i128`, if it fits.
    pub fn to_i128(&self) -> Option<i128> {
        if self.0.len() > 16 {
            return None;
        }
        let fill = if self.is_negative() { 0xff } else { 0 };
        let mut a = [fill; 16];
        a[..self.0.len()].copy_from_slice(&self.0);
        Some(i128::from_le_bytes(a))
    }
}

impl fmt::Debug for BigInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_i128() {
            Some(i) => write!(f, "BigInt({i})"),
            None => write!(f, "BigInt({} bytes)", self.0.len()),
        }
    }
}

/// An owned, detached pickle value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int that fits `i64`.
    Int(i64),
    /// An int that does not fit `i64`.
    BigInt(BigInt),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// A bytes object.
    Bytes(Vec<u8>),
    /// A bytearray.
    ByteArray(Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A dict, in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A set, in insertion order.
    Set(Vec<Value>),
    /// A frozenset, in insertion order.
    FrozenSet(Vec<Value>),
    /// A whitelisted global that was referenced but never called.
    Global {
        /// Module name.
        module: String,
        /// Attribute name.
        name: String,
    },
}

impl Value {
    /// `dict[key]` for a str key, if this is a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(d) => d
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The int, if this is an int fitting `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The str, if this is a str.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}
