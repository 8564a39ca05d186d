//! Python hashing/equality for dict keys and set members.

use super::store::{IntRef, Store};
use super::val::{type_name, Tag, Val};
use crate::hash::{hash_bytes, hash_words, mix};

pub(crate) const UNSET: u64 = u64::MAX;
const MAX_DEPTH: u32 = 100;

pub(crate) enum KeyErr {
    Unhashable(&'static str),
    Limit,
}

/// Per-parse key state: tuple hash cache and a work budget that bounds the
/// time adversarial keys can cost.
pub(crate) struct KeyCx {
    pub(crate) seed: u64,
    pub(crate) tup_hash: Vec<u64>,
    pub(crate) budget: u64,
}

impl KeyCx {
    #[inline]
    fn spend(&mut self, n: u64) -> Result<(), KeyErr> {
        if self.budget < n {
            return Err(KeyErr::Limit);
        }
        self.budget -= n;
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Num<'a> {
    I(i64),
    F(f64),
    B(&'a [u8]),
}

fn num(st: &Store, v: Val) -> Option<Num<'_>> {
    match v.tag() {
        Tag::Bool => Some(Num::I((v.0 & 1) as i64)),
        Tag::Int | Tag::IntBox | Tag::BigInt => match st.int(v)? {
            IntRef::Small(i) => Some(Num::I(i)),
            IntRef::Big(b) => Some(Num::B(b)),
        },
        Tag::Float => st.float(v).map(Num::F),
        _ => None,
    }
}

fn float_as_int(f: f64) -> Option<i64> {
    if f.is_finite()
        && f.fract() == 0.0
        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
    {
        Some(f as i64)
    } else {
        None
    }
}

fn int_hash(seed: u64, i: i64) -> u64 {
    mix(seed ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d))
}

/// Python-compatible hash (consistent with [`key_eq`]).
pub(crate) fn key_hash(st: &Store, kc: &mut KeyCx, v: Val, depth: u32) -> Result<u64, KeyErr> {
    kc.spend(1)?;
    let seed = kc.seed;
    Ok(match v.tag() {
        Tag::Str => mix(seed ^ 0x5354_5200_0000_0000 ^ u64::from(v.id())),
        Tag::None => mix(seed ^ 0x4e4f_4e45),
        Tag::Bool | Tag::Int | Tag::IntBox | Tag::BigInt | Tag::Float => match num(st, v) {
            Some(Num::I(i)) => int_hash(seed, i),
            Some(Num::F(f)) => match float_as_int(f) {
                Some(i) => int_hash(seed, i),
                None => mix(seed ^ f.to_bits() ^ 0x464c_4f41),
            },
            Some(Num::B(b)) => hash_bytes(seed ^ 0x4249_4749, b),
            None => 0,
        },
        Tag::Bytes => {
            let b = st.blob(v).unwrap_or(&[]);
            kc.spend(b.len() as u64 / 8)?;
            hash_bytes(seed ^ 0x4259_5445, b)
        }
        Tag::Global => {
            let (m, n) = st.globals.get(v.idx()).copied().unwrap_or((0, 0));
            mix(seed ^ (u64::from(m) << 32) ^ u64::from(n) ^ 0x474c_4f42)
        }
        Tag::Tuple | Tag::FrozenSet => {
            if let Some(&h) = kc.tup_hash.get(v.idx()) {
                if h != UNSET {
                    return Ok(h);
                }
            }
            if depth > MAX_DEPTH {
                return Err(KeyErr::Limit);
            }
            let items = st.seq_items(v).unwrap_or(&[]);
            let mut hs = Vec::with_capacity(items.len());
            for &it in items {
                hs.push(key_hash(st, kc, it, depth + 1)?);
            }
            let h = if v.tag() == Tag::Tuple {
                hash_words(seed ^ 0x5455_504c, hs.into_iter())
            } else {
                // order independent
                mix(hs
                    .iter()
                    .fold(seed ^ 0x4653_4554, |a, &h| a.wrapping_add(mix(h))))
            };
            let h = if h == UNSET { UNSET - 1 } else { h };
            if let Some(slot) = kc.tup_hash.get_mut(v.idx()) {
                *slot = h;
            }
            h
        }
        t => return Err(KeyErr::Unhashable(type_name(t))),
    })
}

/// Python `==` for hashable values.
#[inline]
pub(crate) fn key_eq(
    st: &Store,
    kc: &mut KeyCx,
    a: Val,
    b: Val,
    depth: u32,
) -> Result<bool, KeyErr> {
    if a == b {
        return Ok(true);
    }
    if a.tag() == Tag::Str && b.tag() == Tag::Str {
        return Ok(false); // interned
    }
    key_eq_slow(st, kc, a, b, depth)
}

fn key_eq_slow(st: &Store, kc: &mut KeyCx, a: Val, b: Val, depth: u32) -> Result<bool, KeyErr> {
    kc.spend(1)?;
    if let (Some(x), Some(y)) = (num(st, a), num(st, b)) {
        return Ok(match (x, y) {
            (Num::I(x), Num::I(y)) => x == y,
            (Num::F(x), Num::F(y)) => x == y,
            (Num::I(i), Num::F(f)) | (Num::F(f), Num::I(i)) => float_as_int(f) == Some(i),
            (Num::B(x), Num::B(y)) => x == y,
            _ => false,
        });
    }
    match (a.tag(), b.tag()) {
        (Tag::Bytes, Tag::Bytes) => {
            let (x, y) = (st.blob(a).unwrap_or(&[]), st.blob(b).unwrap_or(&[]));
            kc.spend(x.len() as u64 / 8)?;
            Ok(x == y)
        }
        (Tag::Global, Tag::Global) => Ok(st.globals.get(a.idx()) == st.globals.get(b.idx())),
        (Tag::Tuple, Tag::Tuple) | (Tag::FrozenSet, Tag::FrozenSet) => {
            if depth > MAX_DEPTH {
                return Err(KeyErr::Limit);
            }
            let (x, y) = (
                st.seq_items(a).unwrap_or(&[]),
                st.seq_items(b).unwrap_or(&[]),
            );
            if x.len() != y.len() || key_hash(st, kc, a, depth)? != key_hash(st, kc, b, depth)? {
                return Ok(false);
            }
            if a.tag() == Tag::Tuple {
                for (&p, &q) in x.iter().zip(y) {
                    if !key_eq(st, kc, p, q, depth + 1)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            } else {
                'outer: for &p in x {
                    for &q in y {
                        if key_eq(st, kc, p, q, depth + 1)? {
                            continue 'outer;
                        }
                    }
                    return Ok(false);
                }
                Ok(true)
            }
        }
        _ => Ok(false),
    }
}
