//! `Store`: the arena holding every decoded value.

use super::val::{Tag, Val};
use crate::chunked::ChunkedVec;
use crate::intern::Interner;

/// A frozen tuple or frozenset: a span of `Store::seq_pool`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) start: u32,
    pub(crate) len: u32,
}

/// State of a mutable container (list, dict, set).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Slot {
    /// Still being filled by the VM.
    Building {
        /// Index of its builder (dict or sequence builder).
        b: u32,
        /// Whether it is a dict.
        dict: bool,
        /// Set once the container was mutated after being frozen: it then
        /// stays a builder until the end, so freeze/thaw cannot ping-pong.
        volatile: bool,
    },
    /// A list or set whose items are `seq_pool[start..start+len]`.
    Seq(Span),
    /// A dict whose keys are shape `shape`, values `dict_vals[start..]`.
    Rec { shape: u32, start: u32 },
    /// A dict taken over by an [`Absorb`](super::vm::Absorb) hook (item
    /// `n` of the hook's own storage); only the snapshot reader uses this.
    Native(u32),
    /// A list holding exactly the dicts the hook took over as items
    /// `first..first + len`, in order (a device's trace): its items are not
    /// stored, the VM rebuilds them if they are ever needed.
    NativeRun { first: u32, len: u32 },
}

/// The slots of all containers, 8 bytes each: a [`Slot`] packed with a
/// 3-bit tag and two fields of 32 and 29 bits (a slot whose second field
/// does not fit, such as a list of 2^29 items or more, is kept aside).
#[derive(Default, Debug)]
pub(crate) struct Slots {
    packed: ChunkedVec<u64>,
    /// Slots too wide to pack.
    wide: Vec<Slot>,
    /// One bit per slot: `Building` and not `volatile` (asked for every
    /// item stored anywhere, so kept where it is one load away).
    stable: Vec<u64>,
}

const T_BUILDING: u64 = 0;
const T_SEQ: u64 = 1;
const T_REC: u64 = 2;
const T_NATIVE: u64 = 3;
const T_RUN: u64 = 4;
const T_WIDE: u64 = 5;
const HI_BITS: u32 = 29;

impl Slots {
    fn pack(&mut self, s: Slot) -> u64 {
        let two = |tag: u64, lo: u32, hi: u32| -> Option<u64> {
            (hi < 1 << HI_BITS).then(|| tag << 61 | u64::from(hi) << 32 | u64::from(lo))
        };
        let p = match s {
            Slot::Building { b, dict, volatile } => {
                two(T_BUILDING, b, u32::from(dict) | u32::from(volatile) << 1)
            }
            Slot::Seq(sp) => two(T_SEQ, sp.start, sp.len),
            Slot::Rec { shape, start } => two(T_REC, start, shape),
            Slot::Native(n) => two(T_NATIVE, n, 0),
            Slot::NativeRun { first, len } => two(T_RUN, first, len),
        };
        p.unwrap_or_else(|| {
            self.wide.push(s);
            T_WIDE << 61 | (self.wide.len() - 1) as u64
        })
    }

    fn unpack(&self, p: u64) -> Slot {
        let (lo, hi) = (p as u32, ((p >> 32) as u32) & ((1 << HI_BITS) - 1));
        match p >> 61 {
            T_BUILDING => Slot::Building {
                b: lo,
                dict: hi & 1 == 1,
                volatile: hi & 2 == 2,
            },
            T_SEQ => Slot::Seq(Span { start: lo, len: hi }),
            T_REC => Slot::Rec {
                shape: hi,
                start: lo,
            },
            T_NATIVE => Slot::Native(lo),
            T_RUN => Slot::NativeRun { first: lo, len: hi },
            _ => self.wide[(p & ((1 << 61) - 1)) as usize],
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.packed.len()
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<Slot> {
        self.packed.get(i).map(|&p| self.unpack(p))
    }

    /// `(builder, is a dict)` if slot `i` is a container still being built
    /// for the first time (`Building` and not `volatile`); checked on the
    /// packed form, as it is asked for every item stored anywhere.
    #[inline]
    pub(crate) fn stable_builder(&self, i: usize) -> Option<(u32, bool)> {
        if self.stable.get(i / 64)? & (1 << (i % 64)) == 0 {
            return None;
        }
        let p = *self.packed.get(i)?;
        Some((p as u32, p & (1 << 32) != 0))
    }

    /// Slot `i` (which must exist).
    #[inline]
    pub(crate) fn at(&self, i: usize) -> Slot {
        self.unpack(self.packed[i])
    }

    #[inline]
    fn mark(&mut self, i: usize, s: Slot) {
        let stable = matches!(
            s,
            Slot::Building {
                volatile: false,
                ..
            }
        );
        let w = i / 64;
        if w >= self.stable.len() {
            if !stable {
                return;
            }
            self.stable.resize(w + 1, 0);
        }
        if stable {
            self.stable[w] |= 1 << (i % 64);
        } else {
            self.stable[w] &= !(1 << (i % 64));
        }
    }

    #[inline]
    pub(crate) fn set(&mut self, i: usize, s: Slot) {
        let p = self.pack(s);
        self.packed[i] = p;
        self.mark(i, s);
    }

    #[inline]
    pub(crate) fn push(&mut self, s: Slot) {
        let p = self.pack(s);
        self.mark(self.packed.len(), s);
        self.packed.push(p);
    }

    pub(crate) fn pop(&mut self) -> Option<Slot> {
        let p = self.packed.pop()?;
        let i = self.packed.len();
        self.mark(i, Slot::Native(0));
        Some(self.unpack(p))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.packed.iter().map(|&p| self.unpack(p))
    }

    fn heap_bytes(&self) -> usize {
        self.packed.capacity() * 8
            + self.wide.capacity() * std::mem::size_of::<Slot>()
            + self.stable.capacity() * 8
    }
}

/// All decoded values. Containers are addressed by id so shared references
/// (memo gets) keep Python's identity semantics; once frozen, identical
/// list contents share one span and dicts share their key lists ("shapes").
#[derive(Default, Debug)]
pub(crate) struct Store {
    pub(crate) strs: Interner,
    /// `bytes` and `bytearray` payloads.
    pub(crate) blobs: Vec<Box<[u8]>>,
    pub(crate) ints: Vec<i64>,
    /// Little-endian two's complement, minimal length, never fits i64.
    pub(crate) bigints: Vec<Box<[u8]>>,
    pub(crate) floats: Vec<f64>,
    /// (module, name) string ids.
    pub(crate) globals: Vec<(u32, u32)>,
    pub(crate) seq_pool: Vec<Val>,
    /// Tuples and frozensets.
    pub(crate) tuples: Vec<Span>,
    /// Lists, dicts and sets.
    /// (Packed, in chunks: a trace holds millions of containers.)
    pub(crate) slots: Slots,
    pub(crate) shapes: Vec<Span>,
    pub(crate) shape_pool: Vec<Val>,
    pub(crate) dict_vals: Vec<Val>,
    /// Bytes of pickle decoded (what bounds the work of copying values out).
    pub(crate) input_len: u64,
}

/// An integer read out of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntRef<'a> {
    Small(i64),
    Big(&'a [u8]),
}

impl Store {
    #[inline]
    fn span(pool: &[Val], s: Span) -> &[Val] {
        let a = s.start as usize;
        pool.get(a..a + s.len as usize).unwrap_or(&[])
    }

    /// Items of a frozen list/set/tuple/frozenset.
    pub(crate) fn seq_items(&self, v: Val) -> Option<&[Val]> {
        match v.tag() {
            Tag::List | Tag::Set => match self.slots.get(v.idx())? {
                Slot::Seq(s) => Some(Self::span(&self.seq_pool, s)),
                _ => None,
            },
            Tag::Tuple | Tag::FrozenSet => {
                Some(Self::span(&self.seq_pool, *self.tuples.get(v.idx())?))
            }
            _ => None,
        }
    }

    /// Span of a frozen list (identity of its contents after hash-consing).
    pub(crate) fn list_span(&self, v: Val) -> Option<Span> {
        match (v.tag(), self.slots.get(v.idx())) {
            (Tag::List, Some(Slot::Seq(s))) => Some(s),
            _ => None,
        }
    }

    /// (shape id, keys, values) of a frozen dict.
    pub(crate) fn dict_parts(&self, v: Val) -> Option<(u32, &[Val], &[Val])> {
        if v.tag() != Tag::Dict {
            return None;
        }
        match self.slots.get(v.idx())? {
            Slot::Rec { shape, start } => {
                let sp = *self.shapes.get(shape as usize)?;
                let keys = Self::span(&self.shape_pool, sp);
                let a = start as usize;
                let vals = self.dict_vals.get(a..a + keys.len()).unwrap_or(&[]);
                Some((shape, keys, vals))
            }
            _ => None,
        }
    }

    /// Keys of a shape.
    pub(crate) fn shape_keys(&self, shape: u32) -> &[Val] {
        match self.shapes.get(shape as usize) {
            Some(sp) => Self::span(&self.shape_pool, *sp),
            None => &[],
        }
    }

    pub(crate) fn int(&self, v: Val) -> Option<IntRef<'_>> {
        match v.tag() {
            Tag::Int => Some(IntRef::Small(v.inline_int())),
            Tag::IntBox => self.ints.get(v.idx()).map(|&i| IntRef::Small(i)),
            Tag::BigInt => self.bigints.get(v.idx()).map(|b| IntRef::Big(b)),
            _ => None,
        }
    }

    pub(crate) fn float(&self, v: Val) -> Option<f64> {
        match v.tag() {
            Tag::Float => self.floats.get(v.idx()).copied(),
            _ => None,
        }
    }

    pub(crate) fn str(&self, v: Val) -> Option<&str> {
        match v.tag() {
            Tag::Str => Some(self.strs.get(v.id())),
            _ => None,
        }
    }

    pub(crate) fn blob(&self, v: Val) -> Option<&[u8]> {
        match v.tag() {
            Tag::Bytes | Tag::ByteArray => self.blobs.get(v.idx()).map(|b| &b[..]),
            _ => None,
        }
    }

    /// The absorbed index of a dict taken over by a hook.
    pub(crate) fn native(&self, v: Val) -> Option<u32> {
        match (v.tag(), self.slots.get(v.idx())) {
            (Tag::Dict, Some(Slot::Native(n))) => Some(n),
            _ => None,
        }
    }

    /// The hook's items a [`Slot::NativeRun`] list holds: (first, len).
    pub(crate) fn native_run(&self, v: Val) -> Option<(u32, u32)> {
        match (v.tag(), self.slots.get(v.idx())) {
            (Tag::List, Some(Slot::NativeRun { first, len })) => Some((first, len)),
            _ => None,
        }
    }

    /// Approximate heap bytes used.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.strs.heap_bytes()
            + self.blobs.iter().map(|b| b.len() + 16).sum::<usize>()
            + self.ints.capacity() * 8
            + self.bigints.iter().map(|b| b.len() + 16).sum::<usize>()
            + self.floats.capacity() * 8
            + self.globals.capacity() * 8
            + self.seq_pool.capacity() * 8
            + self.tuples.capacity() * 8
            + self.slots.heap_bytes()
            + self.shapes.capacity() * 8
            + self.shape_pool.capacity() * 8
            + self.dict_vals.capacity() * 8
    }
}

/// Convert little-endian two's complement bytes (any length) to i64 if it fits.
pub(crate) fn le_to_i64(b: &[u8]) -> Option<i64> {
    let neg = b.last().is_some_and(|&x| x & 0x80 != 0);
    let fill = if neg { 0xff } else { 0 };
    if b.len() > 8 {
        if b[8..].iter().any(|&x| x != fill) {
            return None;
        }
        // the sign of the low 8 bytes must agree
        if (b[7] & 0x80 != 0) != neg {
            return None;
        }
    }
    let mut a = [fill; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    Some(i64::from_le_bytes(a))
}

/// Convert little-endian two's complement bytes to u64 if non-negative and fits.
pub(crate) fn le_to_u64(b: &[u8]) -> Option<u64> {
    if b.last().is_some_and(|&x| x & 0x80 != 0) {
        return None;
    }
    if b.len() > 8 && b[8..].iter().any(|&x| x != 0) {
        return None;
    }
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    Some(u64::from_le_bytes(a))
}

/// Strip redundant sign-extension bytes.
pub(crate) fn normalize_le(b: &[u8]) -> &[u8] {
    let mut n = b.len();
    while n > 1 {
        let top = b[n - 1];
        let next_sign = b[n - 2] & 0x80;
        if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
            n -= 1;
        } else {
            break;
        }
    }
    &b[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_pack_into_8_bytes_or_are_kept_aside() {
        let all = [
            Slot::Building {
                b: u32::MAX,
                dict: true,
                volatile: false,
            },
            Slot::Building {
                b: 3,
                dict: false,
                volatile: true,
            },
            Slot::Seq(Span {
                start: u32::MAX,
                len: (1 << 29) - 1,
            }),
            Slot::Seq(Span {
                start: 1,
                len: 1 << 29,
            }),
            Slot::Rec {
                shape: 1 << 30,
                start: 9,
            },
            Slot::Rec {
                shape: 5,
                start: u32::MAX,
            },
            Slot::Native(u32::MAX),
            Slot::NativeRun {
                first: 7,
                len: u32::MAX,
            },
            Slot::NativeRun { first: 0, len: 12 },
        ];
        let mut s = Slots::default();
        for x in all {
            s.push(x);
        }
        assert_eq!(s.wide.len(), 3, "the three with a wide second field");
        let back: Vec<String> = s.iter().map(|x| format!("{x:?}")).collect();
        let want: Vec<String> = all.iter().map(|x| format!("{x:?}")).collect();
        assert_eq!(back, want);
        s.set(1, Slot::Native(4));
        assert!(matches!(s.at(1), Slot::Native(4)));
        assert!(matches!(
            s.get(8),
            Some(Slot::NativeRun { first: 0, len: 12 })
        ));
        assert!(s.get(9).is_none());
        assert!(matches!(s.pop(), Some(Slot::NativeRun { .. })));
        assert_eq!(s.len(), 8);
    }

    #[test]
    fn le_conversions() {
        assert_eq!(le_to_i64(&[]), Some(0));
        assert_eq!(le_to_i64(&[0xff]), Some(-1));
        assert_eq!(le_to_i64(&[0x00, 0x80]), Some(-32768));
        assert_eq!(le_to_i64(&[0xff, 0x00]), Some(255));
        // 2**63 as 9 bytes: does not fit i64, fits u64
        let b = [0, 0, 0, 0, 0, 0, 0, 0x80, 0];
        assert_eq!(le_to_i64(&b), None);
        assert_eq!(le_to_u64(&b), Some(1 << 63));
        // 2**64: fits neither
        let b = [0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(le_to_u64(&b), None);
        assert_eq!(normalize_le(&[1, 0, 0, 0]), &[1]);
        assert_eq!(normalize_le(&[0xff, 0xff]), &[0xff]);
        assert_eq!(normalize_le(&[0x80, 0xff]), &[0x80]);
        assert_eq!(normalize_le(&[0x80, 0x00]), &[0x80, 0x00]);
    }
}
