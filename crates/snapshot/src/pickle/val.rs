//! `Val`: an 8-byte tagged handle for one pickle value.

/// Kind of a [`Val`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Tag {
    None = 0,
    Bool,
    /// Integer stored inline (56-bit signed).
    Int,
    /// Integer in `Store::ints` (fits i64 but not 56 bits).
    IntBox,
    /// Integer in `Store::bigints` (does not fit i64).
    BigInt,
    Float,
    Str,
    Bytes,
    ByteArray,
    List,
    Tuple,
    Dict,
    Set,
    FrozenSet,
    Global,
    /// Memo sentinel: no value.
    Empty,
}

const TAGS: [Tag; 16] = [
    Tag::None,
    Tag::Bool,
    Tag::Int,
    Tag::IntBox,
    Tag::BigInt,
    Tag::Float,
    Tag::Str,
    Tag::Bytes,
    Tag::ByteArray,
    Tag::List,
    Tag::Tuple,
    Tag::Dict,
    Tag::Set,
    Tag::FrozenSet,
    Tag::Global,
    Tag::Empty,
];

/// Tag in the top 8 bits, payload (an index or a 56-bit integer) below.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Val(pub(crate) u64);

const MASK: u64 = (1 << 56) - 1;
const INLINE_MIN: i64 = -(1 << 55);
const INLINE_MAX: i64 = (1 << 55) - 1;

impl Val {
    pub(crate) const NONE: Val = Val(0);
    pub(crate) const EMPTY: Val = Val((Tag::Empty as u64) << 56);

    #[inline]
    pub(crate) fn new(tag: Tag, payload: u32) -> Val {
        Val(((tag as u64) << 56) | u64::from(payload))
    }

    #[inline]
    pub(crate) fn boolean(b: bool) -> Val {
        Val(((Tag::Bool as u64) << 56) | u64::from(b))
    }

    /// The value in 32 bits (tag in the top 4), when its payload is below
    /// 2^28: containers, strings and small non-negative integers.
    #[inline]
    pub(crate) fn pack(self) -> Option<u32> {
        let payload = self.0 & MASK;
        (payload < 1 << 28).then_some(((((self.0 >> 56) & 15) as u32) << 28) | payload as u32)
    }

    /// The value [`Val::pack`] packed.
    #[inline]
    pub(crate) fn unpack(x: u32) -> Val {
        Val((u64::from(x >> 28) << 56) | u64::from(x & ((1 << 28) - 1)))
    }

    /// An inline integer, if `i` fits 56 bits.
    #[inline]
    pub(crate) fn small_int(i: i64) -> Option<Val> {
        if (INLINE_MIN..=INLINE_MAX).contains(&i) {
            Some(Val(((Tag::Int as u64) << 56) | (i as u64 & MASK)))
        } else {
            None
        }
    }

    #[inline]
    pub(crate) fn tag(self) -> Tag {
        TAGS[((self.0 >> 56) & 15) as usize]
    }

    /// The index payload.
    #[inline]
    pub(crate) fn idx(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }

    #[inline]
    pub(crate) fn id(self) -> u32 {
        (self.0 & 0xffff_ffff) as u32
    }

    /// The inline integer (only meaningful for `Tag::Int`).
    #[inline]
    pub(crate) fn inline_int(self) -> i64 {
        ((self.0 << 8) as i64) >> 8
    }

    #[inline]
    pub(crate) fn is_container(self) -> bool {
        // (on the tag bits: asked for every item stored anywhere)
        const MUTABLE: u32 = 1 << Tag::List as u32 | 1 << Tag::Dict as u32 | 1 << Tag::Set as u32;
        MUTABLE & (1 << ((self.0 >> 56) & 15)) != 0
    }
}

/// The Python type name of a tag, for error messages.
pub(crate) fn type_name(t: Tag) -> &'static str {
    match t {
        Tag::None => "NoneType",
        Tag::Bool => "bool",
        Tag::Int | Tag::IntBox | Tag::BigInt => "int",
        Tag::Float => "float",
        Tag::Str => "str",
        Tag::Bytes => "bytes",
        Tag::ByteArray => "bytearray",
        Tag::List => "list",
        Tag::Tuple => "tuple",
        Tag::Dict => "dict",
        Tag::Set => "set",
        Tag::FrozenSet => "frozenset",
        Tag::Global => "global",
        Tag::Empty => "<empty>",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_ints_round_trip() {
        for i in [0, 1, -1, INLINE_MIN, INLINE_MAX, 140451713646592, -5] {
            let v = Val::small_int(i).unwrap();
            assert_eq!(v.tag(), Tag::Int);
            assert_eq!(v.inline_int(), i);
        }
        assert!(Val::small_int(INLINE_MAX + 1).is_none());
        assert!(Val::small_int(i64::MIN).is_none());
    }

    #[test]
    fn containers_are_lists_dicts_and_sets() {
        for (i, t) in TAGS.iter().enumerate() {
            let v = Val::new(*t, 3);
            assert_eq!(
                v.is_container(),
                matches!(t, Tag::List | Tag::Dict | Tag::Set),
                "{i}"
            );
        }
    }

    #[test]
    fn packing_into_32_bits() {
        let fits = [
            Val::NONE,
            Val::EMPTY,
            Val::boolean(true),
            Val::new(Tag::Dict, (1 << 28) - 1),
            Val::new(Tag::Str, 7),
            Val::small_int(5).unwrap(),
        ];
        for v in fits {
            assert_eq!(Val::unpack(v.pack().unwrap()), v, "{v:?}");
        }
        for v in [
            Val::new(Tag::List, 1 << 28),
            Val::small_int(-1).unwrap(),
            Val::small_int(1 << 40).unwrap(),
        ] {
            assert_eq!(v.pack(), None, "{v:?}");
        }
    }
}
