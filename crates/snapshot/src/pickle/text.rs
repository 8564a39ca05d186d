//! Decoders for the protocol-0 text forms (INT, LONG, FLOAT, STRING, UNICODE).

/// Python 3.11's default cap on int/str conversion digits.
const MAX_DIGITS: usize = 4300;

/// Parse a Python integer literal as `int(text, 0)` would (lenient about
/// leading zeros). Returns little-endian two's complement bytes.
pub(crate) fn parse_int(text: &[u8]) -> Result<Vec<u8>, &'static str> {
    let s = trim(text);
    let (neg, s) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (base, digits) = if s.len() > 2 && s[0] == b'0' {
        match s[1] | 0x20 {
            b'x' => (16u32, &s[2..]),
            b'o' => (8, &s[2..]),
            b'b' => (2, &s[2..]),
            _ => (10, s),
        }
    } else {
        (10, s)
    };
    if digits.is_empty() {
        return Err("empty integer literal");
    }
    if digits.len() > MAX_DIGITS {
        return Err("integer literal longer than 4300 digits");
    }
    // magnitude as little-endian u32 limbs
    let mut limbs: Vec<u32> = vec![0];
    let mut prev_us = true;
    for &c in digits {
        if c == b'_' {
            if prev_us {
                return Err("misplaced underscore in integer literal");
            }
            prev_us = true;
            continue;
        }
        prev_us = false;
        let d = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'a'..=b'z' => u32::from(c - b'a') + 10,
            b'A'..=b'Z' => u32::from(c - b'A') + 10,
            _ => return Err("invalid character in integer literal"),
        };
        if d >= base {
            return Err("invalid digit for the base in integer literal");
        }
        let mut carry = u64::from(d);
        for l in limbs.iter_mut() {
            let x = u64::from(*l) * u64::from(base) + carry;
            *l = x as u32;
            carry = x >> 32;
        }
        if carry != 0 {
            limbs.push(carry as u32);
        }
    }
    if prev_us {
        return Err("trailing underscore in integer literal");
    }
    let mut bytes: Vec<u8> = limbs.iter().flat_map(|l| l.to_le_bytes()).collect();
    bytes.push(0); // room for the sign bit
    if neg {
        // two's complement negate
        let mut carry = 1u16;
        for b in bytes.iter_mut() {
            let x = u16::from(!*b) + carry;
            *b = x as u8;
            carry = x >> 8;
        }
    }
    Ok(bytes)
}

/// Parse a float as Python's `float()` would for the forms pickle writes.
pub(crate) fn parse_float(text: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(trim(text)).ok()?;
    if s.contains('_') {
        s.replace('_', "").parse().ok()
    } else {
        s.parse().ok()
    }
}

fn trim(s: &[u8]) -> &[u8] {
    let a = s
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(s.len());
    let b = s
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(a, |i| i + 1);
    &s[a..b.max(a)]
}

fn hex(c: u8) -> Option<u32> {
    (c as char).to_digit(16)
}

/// `codecs.escape_decode`, as used by the STRING opcode (quotes already removed).
pub(crate) fn escape_decode(s: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        i += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let Some(&e) = s.get(i) else {
            return Err("trailing \\ in string");
        };
        i += 1;
        match e {
            b'\n' => {}
            b'\\' => out.push(b'\\'),
            b'\'' => out.push(b'\''),
            b'"' => out.push(b'"'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match s.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'x' => {
                let (Some(h), Some(l)) = (
                    s.get(i).and_then(|&c| hex(c)),
                    s.get(i + 1).and_then(|&c| hex(c)),
                ) else {
                    return Err("invalid \\x escape");
                };
                out.push((h * 16 + l) as u8);
                i += 2;
            }
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    Ok(out)
}

/// The `raw-unicode-escape` codec, as used by the UNICODE opcode.
pub(crate) fn raw_unicode_escape(s: &[u8]) -> Result<String, &'static str> {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c != b'\\' {
            out.push(char::from(c));
            i += 1;
            continue;
        }
        let start = i;
        while i < s.len() && s[i] == b'\\' {
            i += 1;
        }
        let k = i - start;
        let is_escape = k % 2 == 1 && matches!(s.get(i), Some(b'u' | b'U'));
        let keep = if is_escape { k - 1 } else { k };
        for _ in 0..keep {
            out.push('\\');
        }
        if !is_escape {
            continue;
        }
        let n = if s[i] == b'u' { 4 } else { 8 };
        i += 1;
        let digits = s.get(i..i + n).ok_or("truncated \\uXXXX escape")?;
        let mut v: u32 = 0;
        for &d in digits {
            v = v.checked_mul(16).ok_or("bad \\U escape")? + hex(d).ok_or("bad \\uXXXX escape")?;
        }
        if v > 0x10ffff {
            return Err("\\Uxxxxxxxx out of range");
        }
        // lone surrogates cannot live in a Rust string: replace them
        out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
        i += n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pickle::store::le_to_i64;

    #[test]
    fn ints() {
        assert_eq!(le_to_i64(&parse_int(b"123").unwrap()), Some(123));
        assert_eq!(le_to_i64(&parse_int(b"-123\n").unwrap()), Some(-123));
        assert_eq!(le_to_i64(&parse_int(b"0x10").unwrap()), Some(16));
        assert_eq!(le_to_i64(&parse_int(b"1_000").unwrap()), Some(1000));
        assert_eq!(
            le_to_i64(&parse_int(b"-9223372036854775808").unwrap()),
            Some(i64::MIN)
        );
        assert_eq!(le_to_i64(&parse_int(b"9223372036854775808").unwrap()), None);
        assert!(parse_int(b"").is_err());
        assert!(parse_int(b"12a").is_err());
        assert!(parse_int(&vec![b'9'; 5000]).is_err());
    }

    #[test]
    fn strings() {
        assert_eq!(escape_decode(br"a\nb\x41\101\\").unwrap(), b"a\nbAA\\");
        assert!(escape_decode(b"\\").is_err());
        assert_eq!(
            raw_unicode_escape(br"caf\u00e9 \\u0041").unwrap(),
            "caf\u{e9} \\\\u0041"
        );
        assert_eq!(raw_unicode_escape(b"\xe9").unwrap(), "\u{e9}");
        assert_eq!(raw_unicode_escape(br"\ud800").unwrap(), "\u{fffd}");
    }
}
