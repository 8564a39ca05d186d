//! A corrupt byte found before decoding: every opcode's length is fixed by
//! the opcode and its length field (`Lib/pickletools.py`'s `ArgumentDescriptor`s),
//! so the file can be cut into opcode-length tokens without running the
//! VM. Protocol-4 frames start at opcode boundaries (Python's `_Framer`
//! commits a frame between opcodes), so the file is cut at frame starts and
//! the pieces are lexed on all cores at once; the pieces are then chained in
//! file order, a piece whose lex does not end where the next one starts
//! being lexed again from where it does. The opcodes seen are the decoder's
//! own, so the first one it would refuse outright (a byte that is no
//! opcode, or one of the refused ones) is named, with its offset, before
//! gigabytes are decoded; memory stays at a buffer per thread.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::frames::At;
use crate::pickle::op_name;
use crate::Error;

/// What an opcode's argument is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arg {
    /// `n` bytes.
    Fixed(u8),
    /// A little-endian length of `w` bytes, then that many bytes;
    /// `signed`: the length is an `i32` (negative is an error decoding reports).
    Counted { w: u8, signed: bool },
    /// `n` newline-terminated lines.
    Lines(u8),
    /// `STOP`: the pickle ends here.
    Stop,
    /// An opcode the decoder refuses whatever follows.
    Refused(&'static str),
    /// No opcode.
    Unknown,
}

/// Each byte's [`Arg`], as `Lib/pickletools.py` lists the opcodes.
const fn arg(op: u8) -> Arg {
    use Arg::*;
    match op {
        b'.' => Stop,
        b'(' | b'0' | b'1' | b'2' | b'N' | 0x88 | 0x89 | b']' | b'}' | 0x8f | b')' | 0x85
        | 0x86 | 0x87 | b't' | b'l' | b'd' | 0x91 | b'a' | b'e' | b's' | b'u' | 0x90 | 0x94
        | 0x93 | b'o' | b'R' | 0x81 | 0x92 | b'b' => Fixed(0),
        0x80 | b'K' | b'h' | b'q' => Fixed(1),
        b'M' => Fixed(2),
        b'J' | b'j' | b'r' => Fixed(4),
        0x95 | b'G' => Fixed(8),
        0x8a | 0x8c | b'U' | b'C' => Counted {
            w: 1,
            signed: false,
        },
        b'X' | b'B' => Counted {
            w: 4,
            signed: false,
        },
        0x8b | b'T' => Counted { w: 4, signed: true },
        0x8d | 0x8e | 0x96 => Counted {
            w: 8,
            signed: false,
        },
        b'I' | b'L' | b'F' | b'V' | b'S' | b'g' | b'p' => Lines(1),
        b'c' | b'i' => Lines(2),
        b'P' | b'Q' => Refused("persistent ids are not supported"),
        0x82..=0x84 => Refused("the copyreg extension registry is not supported"),
        0x97 | 0x98 => Refused("out-of-band buffers are not supported"),
        _ => Unknown,
    }
}

/// [`arg`] for every byte.
static ARGS: [Arg; 256] = {
    let mut t = [Arg::Unknown; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = arg(i as u8);
        i += 1;
    }
    t
};

/// [`HOT`]'s mark for a short counted opcode (a 1-byte length).
const SHORT: u8 = 255;
/// [`HOT`]'s mark for `MEMOIZE`.
const MEMOIZE: u8 = 254;
/// [`HOT`]'s mark for `BINGET`.
const GET1: u8 = 253;
/// [`HOT`]'s mark for `LONG_BINGET`.
const GET4: u8 = 252;

/// For the hot loop: an opcode's whole length when fixed, a mark for the
/// short counted opcodes and the memo's, 0 for the rest (the memo puts
/// among them: they end the memo check).
static HOT: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = match (i as u8, ARGS[i]) {
            (0x94, _) => MEMOIZE,
            (b'h', _) => GET1,
            (b'j', _) => GET4,
            (b'q' | b'r', _) => 0,
            (_, Arg::Fixed(k)) => 1 + k,
            (_, Arg::Counted { w: 1, .. }) => SHORT,
            _ => 0,
        };
        i += 1;
    }
    t
};

/// Memo gets that cannot be satisfied, found without the memo: with
/// `MEMOIZE` alone (Python's pickler at protocol 4 and 5 uses nothing
/// else), memo index `i` exists once `i + 1` `MEMOIZE`s have run, so a get
/// of `i` after `m` of a piece's own `MEMOIZE`s fails exactly when
/// `i - m` reaches the count before the piece, known once the pieces are
/// chained. Each piece keeps its gets whose `i - m` beat every earlier
/// one's (the first to reach the count is among them).
#[derive(Default, Debug)]
struct Memo {
    /// The piece's `MEMOIZE`s.
    count: u64,
    /// `(i - m, offset, i)` of each get that beat the earlier ones
    /// (the first [`STAIR`]).
    stair: Vec<(i64, u64, u64)>,
    /// The highest `i - m` so far.
    high: i64,
    /// A memo put with an index of its own (`PUT`, `BINPUT`,
    /// `LONG_BINPUT`) or a text `GET`: the check ends here.
    unknown: bool,
    /// Each of the piece's `MEMOIZE`s, in order, when asked for (see
    /// [`memo_table`]): the start of the opcode before it ([`NONE`] for
    /// the first: the opcode before lies in the piece before).
    offsets: Option<Vec<u32>>,
    /// The start of the last opcode lexed ([`NONE`] before the first).
    last: u64,
}

/// No offset.
const NONE: u64 = u64::MAX;
/// No offset, in the memo table (whose files are under 4 GiB).
const NONE32: u32 = u32::MAX;

/// Gets kept per piece for the memo check.
const STAIR: usize = 64;

impl Memo {
    /// A `MEMOIZE` at offset `at`.
    #[inline]
    fn put(&mut self, at: u64) {
        let _ = at;
        self.count += 1;
        if let Some(v) = &mut self.offsets {
            // (below 4 GiB, where a table is kept: see `memo_table`)
            v.push(u32::try_from(self.last).unwrap_or(NONE32));
        }
    }

    #[inline]
    fn get(&mut self, index: u64, at: u64) {
        let d = index as i64 - self.count as i64;
        if d > self.high && !self.unknown {
            self.high = d;
            if self.stair.len() < STAIR {
                self.stair.push((d, at, index));
            }
        }
    }
}

/// How a lex from some offset ended.
#[derive(Debug)]
enum End {
    /// The next opcode starts at this offset, at or past the piece's end.
    At(u64),
    /// A `STOP` at this offset: nothing after it is read by decoding.
    Stop,
    /// The first opcode decoding refuses whatever the stack holds.
    Refused(Error),
    /// The lex cannot go on (an argument runs past the file, a negative
    /// length, a line with no end): decoding says what it finds.
    Lost,
}

/// Bytes read at a time by each thread.
const BUF: usize = 1 << 20;
/// Pieces are about this large (many per thread, so that the threads stay
/// busy to the end).
pub(crate) const PIECE: u64 = 8 << 20;

/// Lex `file` (`len` bytes) from its start on `threads` threads; `starts`
/// are offsets where an opcode is known to begin (the frames, from
/// [`crate::frames`]), and the file is cut at those about `piece` bytes apart. The first opcode that decoding refuses outright,
/// before the first `STOP`, is the error; everything else, including what
/// the lex cannot follow, is left to decoding. `found` is set as soon as
/// any piece meets such an opcode (before the pieces are chained: the
/// error may yet lie after a `STOP` or in a piece entered mid-opcode),
/// and when the lex ends in an error; once `cancel` is set, the lex stops
/// early with `Ok`.
pub(crate) fn check(
    file: &dyn At,
    len: u64,
    starts: &[u64],
    piece: u64,
    threads: usize,
    found: &AtomicBool,
    cancel: &AtomicBool,
) -> Result<(), Error> {
    let lexed = pieces(file, len, starts, piece, threads, found, cancel, false);
    lexed.map(|_| ())
}

/// [`check`], also giving the memo table: for every `MEMOIZE` before the
/// first `STOP`, in memo index order (a `MEMOIZE` stores at the memo's
/// size, `Lib/pickle.py`'s `load_memoize`), the start of the opcode
/// before it (the `MEMOIZE` follows that opcode: its offset is that start
/// plus the opcode's length): the object it stores is the one that opcode
/// left on the stack (unless that opcode is a `FRAME` header, which Python's
/// picklers never write between an object and its `MEMOIZE`: they commit
/// frames at the start of a `save`). `None` when the pickle
/// stores with indices of its own (`PUT`, `BINPUT`, `LONG_BINPUT`) or uses a
/// text `GET`, or the lex cannot follow it to its `STOP`: then decoding
/// alone knows what the memo holds.
pub(crate) fn memo_table(
    file: &dyn At,
    len: u64,
    starts: &[u64],
    piece: u64,
    threads: usize,
) -> Result<Option<Vec<u32>>, Error> {
    // offsets as u32: half the memory (a table is 13% of these files' size
    // in u64s); a larger file is decoded sequentially
    if len >= u64::from(NONE32) {
        return Ok(None);
    }
    let (found, never) = (AtomicBool::new(false), AtomicBool::new(false));
    pieces(file, len, starts, piece, threads, &found, &never, true)
}

/// [`check`] and [`memo_table`]: `record`, whether the `MEMOIZE`s' offsets
/// are kept.
#[allow(clippy::too_many_arguments)]
fn pieces(
    file: &dyn At,
    len: u64,
    starts: &[u64],
    piece: u64,
    threads: usize,
    found: &AtomicBool,
    cancel: &AtomicBool,
    record: bool,
) -> Result<Option<Vec<u32>>, Error> {
    // Piece boundaries: frame starts about PIECE apart.
    let mut cuts = vec![0u64];
    for &s in starts {
        if s >= cuts[cuts.len() - 1] + piece && s < len {
            cuts.push(s);
        }
    }
    cuts.push(len);
    let pieces = cuts.len() - 1;
    let threads = threads.clamp(1, pieces.max(1));
    let next = AtomicUsize::new(0);
    let mut ends: Vec<Option<(End, Memo)>> = (0..pieces).map(|_| None).collect();
    // a buffer no larger than the file (small pickles are lexed often)
    // (a quarter of it for the memo table, made on every core before the
    // parallel decoder: each thread's buffer stays in the process's peak)
    let most = if record { BUF / 4 } else { BUF };
    let buf_len = usize::try_from(len).map_or(most, |n| n.clamp(16, most));
    let work = || {
        let mut buf = vec![0u8; buf_len];
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= pieces || cancel.load(Ordering::Relaxed) {
                return done;
            }
            let (end, memo) = lex(file, len, cuts[i], cuts[i + 1], &mut buf, record);
            if matches!(end, End::Refused(_)) {
                found.store(true, Ordering::Relaxed);
            }
            done.push((i, (end, memo)));
        }
    };
    let done: Vec<_> = if threads == 1 {
        work()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    for (i, e) in done {
        ends[i] = Some(e);
    }
    chain(file, len, &cuts, ends, buf_len, cancel, record, threads)
        .inspect_err(|_| found.store(true, Ordering::Relaxed))
}

/// [`check`]'s pieces, cut at `cuts`, chained in file order: piece i's
/// lex (`ends[i]`) holds when it began where the previous one's ended;
/// otherwise the piece is lexed again from there. With `record`, the
/// pieces' `MEMOIZE` offsets joined (see [`memo_table`]).
#[allow(clippy::too_many_arguments)]
fn chain(
    file: &dyn At,
    len: u64,
    cuts: &[u64],
    mut ends: Vec<Option<(End, Memo)>>,
    buf_len: usize,
    cancel: &AtomicBool,
    record: bool,
    threads: usize,
) -> Result<Option<Vec<u32>>, Error> {
    let pieces = cuts.len() - 1;
    let mut buf = vec![0u8; buf_len];
    let mut pos = 0u64;
    let mut i = 0;
    // the memo's size before the piece, while it is known
    let mut memo_size = Some(0u64);
    // the pieces' offsets in file order, joined at the end
    let mut table: Option<Vec<Vec<u32>>> = record.then(Vec::new);
    // the start of the last opcode of the pieces chained so far
    let mut last = NONE;
    while i < pieces {
        if cancel.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let end = if pos == cuts[i] { ends[i].take() } else { None };
        let (end, memo) = match end {
            Some(e) => e,
            // a thread that panicked, or a piece entered mid-opcode
            None => lex(file, len, pos, cuts[i + 1], &mut buf, record),
        };
        if let Some(size) = memo_size {
            let bad = memo.stair.iter().find(|&&(d, ..)| d >= size as i64);
            if let Some(&(_, offset, index)) = bad {
                return Err(Error::MemoMissing {
                    offset: offset as usize,
                    index,
                });
            }
            memo_size = (!memo.unknown).then_some(size + memo.count);
        }
        match (&mut table, memo.offsets) {
            (Some(t), Some(mut o)) if memo_size.is_some() => {
                // a MEMOIZE first in its piece stores the previous piece's
                // last opcode (Python's framer may end a frame between them)
                if let Some(first) = o.first_mut().filter(|f| **f == NONE32) {
                    *first = u32::try_from(last).unwrap_or(NONE32);
                }
                if o.first().is_some_and(|&f| f == NONE32) {
                    table = None;
                } else {
                    t.push(o);
                }
            }
            _ => table = None,
        }
        if memo.last != NONE {
            last = memo.last;
        }
        match end {
            End::At(p) => {
                pos = p;
                while i < pieces && cuts[i + 1] <= pos {
                    i += 1;
                }
            }
            End::Stop => return Ok(table.map(|t| join(&t, threads))),
            End::Lost => return Ok(None),
            End::Refused(e) => return Err(e),
        }
    }
    // the pieces ended with no STOP: decoding says what is missing
    Ok(None)
}

/// `parts` one after the other, each copied by one of up to `threads`
/// threads (the table's pages, tens of MB on a large file, are first
/// written there rather than all on the calling thread).
fn join(parts: &[Vec<u32>], threads: usize) -> Vec<u32> {
    let total = parts.iter().map(Vec::len).sum();
    let mut table = vec![0u32; total];
    let mut jobs: Vec<(&mut [u32], &[u32])> = Vec::with_capacity(parts.len());
    let mut rest = table.as_mut_slice();
    for p in parts {
        let (to, after) = rest.split_at_mut(p.len());
        jobs.push((to, p));
        rest = after;
    }
    let per = jobs.len().div_ceil(threads.max(1)).max(1);
    if jobs.len() <= per {
        for (to, from) in jobs {
            to.copy_from_slice(from);
        }
    } else {
        std::thread::scope(|s| {
            for group in jobs.chunks_mut(per) {
                s.spawn(move || {
                    for (to, from) in group {
                        to.copy_from_slice(from);
                    }
                });
            }
        });
    }
    table
}

/// Lex from `from` (an opcode's start) until an opcode starts at or past
/// `until`, reading `file` through `buf`; `record`: keep the `MEMOIZE`s'
/// offsets.
fn lex(
    file: &dyn At,
    len: u64,
    from: u64,
    until: u64,
    buf: &mut [u8],
    record: bool,
) -> (End, Memo) {
    let mut memo = Memo {
        high: i64::MIN,
        // room for a MEMOIZE every 16 bytes, reserved (pages are touched
        // as they fill): the real files' traces hold one every 33 (p50) to
        // 59 bytes (c50), so the list is not grown by copies
        offsets: record.then(|| {
            Vec::with_capacity(usize::try_from(until.saturating_sub(from) / 16).unwrap_or(0))
        }),
        last: NONE,
        ..Memo::default()
    };
    let end = lex_into(file, len, from, until, buf, &mut memo);
    (end, memo)
}

/// [`lex`], noting memo gets and puts in `memo`.
fn lex_into(
    file: &dyn At,
    len: u64,
    from: u64,
    until: u64,
    buf: &mut [u8],
    memo: &mut Memo,
) -> End {
    let mut pos = from;
    loop {
        if pos >= until {
            return End::At(pos);
        }
        if pos >= len {
            return End::Lost;
        }
        let n = file.read_at(buf, pos);
        if n == 0 {
            return End::Lost;
        }
        let w = &buf[..n];
        // whether the window reaches the file's end
        let whole = pos + n as u64 >= len;
        let mut i = 0usize;
        // stop the hot loop where the piece ends
        let stop = usize::try_from(until - pos).unwrap_or(usize::MAX).min(n);
        while i < n {
            // the hot loop: fixed-size and short counted opcodes
            while i + 9 <= n && i < stop {
                let op = w[i];
                let f = HOT[usize::from(op)];
                let at = pos + i as u64;
                i += match f {
                    0 => break,
                    SHORT => 2 + usize::from(w[i + 1]),
                    MEMOIZE => {
                        memo.put(pos + i as u64);
                        1
                    }
                    GET1 => {
                        memo.get(u64::from(w[i + 1]), pos + i as u64);
                        2
                    }
                    GET4 => {
                        let x = u32::from_le_bytes([w[i + 1], w[i + 2], w[i + 3], w[i + 4]]);
                        memo.get(u64::from(x), pos + i as u64);
                        5
                    }
                    f => usize::from(f),
                };
                memo.last = at;
            }
            if i >= n {
                break;
            }
            if pos + i as u64 >= until {
                return End::At(pos + i as u64);
            }
            let at = pos + i as u64;
            match step(w, i, at, memo) {
                Step::Next(x) => {
                    memo.last = at;
                    i = x;
                    if pos + i as u64 >= until {
                        return End::At(pos + i as u64);
                    }
                }
                Step::More if whole || i == 0 => return End::Lost,
                Step::More => break,
                Step::End(e) => return e,
            }
        }
        pos += i as u64;
    }
}

/// One lex step.
enum Step {
    /// The next opcode starts at this index (maybe past the window).
    Next(usize),
    /// The opcode's header or lines do not end inside the window.
    More,
    /// The lex ends.
    End(End),
}

/// The opcode at `w[i]` (file offset `at`).
#[inline]
fn step(w: &[u8], i: usize, at: u64, memo: &mut Memo) -> Step {
    let op = w[i];
    match op {
        0x94 => memo.put(at),
        b'h' | b'j' => {
            let k = if op == b'h' { 1 } else { 4 };
            let Some(b) = w.get(i + 1..i + 1 + k) else {
                return Step::More;
            };
            let mut x = [0u8; 8];
            x[..k].copy_from_slice(b);
            memo.get(u64::from_le_bytes(x), at);
        }
        b'q' | b'r' | b'p' | b'g' => memo.unknown = true,
        _ => {}
    }
    let count = |k: usize| -> Option<u64> {
        let b = w.get(i + 1..i + 1 + k)?;
        let mut x = [0u8; 8];
        x[..k].copy_from_slice(b);
        Some(u64::from_le_bytes(x))
    };
    let next = match ARGS[usize::from(op)] {
        Arg::Fixed(k) => i + 1 + usize::from(k),
        Arg::Counted { w: k, signed } => {
            let k = usize::from(k);
            let Some(n) = count(k) else {
                return Step::More;
            };
            if signed && n >= 1 << 31 {
                return Step::End(End::Lost);
            }
            match usize::try_from(n)
                .ok()
                .and_then(|n| (i + 1 + k).checked_add(n))
            {
                Some(x) => x,
                None => return Step::End(End::Lost),
            }
        }
        Arg::Lines(k) => match lines(w, i + 1, k) {
            Some(x) => x,
            None => return Step::More,
        },
        Arg::Stop => return Step::End(End::Stop),
        Arg::Refused(reason) => {
            return Step::End(End::Refused(Error::UnsupportedOpcode {
                offset: at as usize,
                opcode: op_name(op),
                reason,
            }))
        }
        Arg::Unknown => {
            return Step::End(End::Refused(Error::UnknownOpcode {
                offset: at as usize,
                opcode: op,
            }))
        }
    };
    Step::Next(next)
}

/// The length of the opcode at `w[0]` with its argument, when it is one
/// decoding may accept and it ends inside `w` (`None` for `STOP`, a byte
/// that is no opcode, a refused one, or one that runs past `w`). For the
/// parallel trace decoder's walks (`crate::par`).
pub(crate) fn op_len(w: &[u8]) -> Option<usize> {
    declared_len(w).filter(|&n| n <= w.len())
}

/// [`op_len`], but an argument of a given length (counted, or fixed) need
/// not end inside `w`: only its header must (lines must end in `w`).
pub(crate) fn declared_len(w: &[u8]) -> Option<usize> {
    let op = *w.first()?;
    let n = match ARGS[usize::from(op)] {
        Arg::Fixed(k) => 1 + usize::from(k),
        Arg::Counted { w: k, signed } => {
            let k = usize::from(k);
            let b = w.get(1..1 + k)?;
            let mut x = [0u8; 8];
            x[..k].copy_from_slice(b);
            let n = u64::from_le_bytes(x);
            if signed && n >= 1 << 31 {
                return None;
            }
            (1 + k).checked_add(usize::try_from(n).ok()?)?
        }
        Arg::Lines(k) => lines(w, 1, k)?,
        Arg::Stop | Arg::Refused(_) | Arg::Unknown => return None,
    };
    Some(n)
}

/// The end of `k` lines starting at `i` in `w`, if they end in it.
fn lines(w: &[u8], mut i: usize, k: u8) -> Option<usize> {
    for _ in 0..k {
        i += w.get(i..)?.iter().position(|&b| b == b'\n')? + 1;
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lex with pieces of one frame each; whether any piece met an error.
    fn run(_: &str, bytes: &[u8], starts: &[u64]) -> (Result<(), Error>, bool) {
        let found = AtomicBool::new(false);
        let never = AtomicBool::new(false);
        let r = check(&bytes, bytes.len() as u64, starts, 1, 2, &found, &never);
        (r, found.load(Ordering::Relaxed))
    }

    #[test]
    fn the_first_byte_that_is_no_opcode_is_named() {
        // PROTO 4, FRAME, EMPTY_LIST MEMOIZE MARK BININT1 0 0xff ...
        let mut b = vec![0x80, 4, 0x95, 7, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&[b']', 0x94, b'(', b'K', 0, 0xff, b'e', b'.']);
        match run("unknown", &b, &[2]).0 {
            Err(Error::UnknownOpcode { offset, opcode }) => {
                assert_eq!((offset, opcode), (16, 0xff))
            }
            other => panic!("{other:?}"),
        }
        // after STOP, nothing counts
        let mut ok = vec![0x80, 4, b'N', b'.'];
        ok.extend_from_slice(&[0xff; 20]);
        assert!(run("stop", &ok, &[]).0.is_ok());
    }

    #[test]
    fn a_memo_get_before_its_put_is_named_across_pieces() {
        // frame 1: EMPTY_LIST MEMOIZE (memo 0); frame 2: BINGET 0 POP
        // LONG_BINGET 1 (never stored)
        let mut b = vec![0x80, 4, 0x95, 2, 0, 0, 0, 0, 0, 0, 0, b']', 0x94];
        b.extend_from_slice(&[0x95, 10, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[b'h', 0, b'0', b'j', 1, 0, 0, 0, b'0', b'.']);
        match run("memo", &b, &[2, 13]).0 {
            Err(Error::MemoMissing { offset, index }) => assert_eq!((offset, index), (25, 1)),
            other => panic!("{other:?}"),
        }
        // a BINPUT ends the check: indices are the pickle's own from then on
        let mut p = vec![0x80, 4, b']', b'q', 7, b'h', 7, b'0', b'0', b'.'];
        assert!(run("put", &p, &[]).0.is_ok());
        p[6] = 0;
        assert!(run("put-0", &p, &[]).0.is_ok());
    }

    /// The memo table with a piece per frame and with one piece.
    fn tables(bytes: &[u8], starts: &[u64]) -> [Result<Option<Vec<u32>>, Error>; 2] {
        let len = bytes.len() as u64;
        [1, len + 1].map(|piece| memo_table(&bytes, len, starts, piece, 2))
    }

    #[test]
    fn no_memo_table_for_files_of_4_gib_or_more() {
        // (refused before reading: its offsets would not fit a u32)
        let b: &[u8] = &[0x80, 4, b'.'];
        assert!(memo_table(&b, 1 << 32, &[], 1, 1).unwrap().is_none());
        assert!(memo_table(&b, u64::from(u32::MAX), &[], 1, 1)
            .unwrap()
            .is_none());
        assert_eq!(memo_table(&b, 3, &[], 1, 1).unwrap(), Some(vec![]));
    }

    #[test]
    fn the_memo_table_holds_every_memoize_offset_across_pieces() {
        // frame 1: EMPTY_LIST MEMOIZE; frame 2: SHORT_BINUNICODE "ab"
        // MEMOIZE APPEND BINGET 0 STOP, then a MEMOIZE after the STOP
        let mut b = vec![0x80, 4, 0x95, 2, 0, 0, 0, 0, 0, 0, 0, b']', 0x94];
        b.extend_from_slice(&[0x95, 9, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[0x8c, 2, b'a', b'b', 0x94, b'a', b'h', 0, b'.', 0x94]);
        for t in tables(&b, &[2, 13]) {
            assert_eq!(t.unwrap(), Some(vec![11, 22]));
        }
        // a piece that starts at a MEMOIZE: the object is the previous
        // piece's last opcode's
        for t in tables(&[0x80, 4, b']', 0x94, b'.'], &[3]) {
            assert_eq!(t.unwrap(), Some(vec![2]));
        }
        // a BINPUT: the pickle's own indices, no table
        let p = [0x80, 4, b']', 0x94, b']', b'q', 7, b'0', b'.'];
        for t in tables(&p, &[]) {
            assert_eq!(t.unwrap(), None);
        }
        // no STOP: decoding says what is missing
        for t in tables(&b[..b.len() - 2], &[2, 13]) {
            assert_eq!(t.unwrap(), None);
        }
    }

    #[test]
    fn a_piece_entered_mid_opcode_is_lexed_again_from_where_the_last_one_ended() {
        // a frame of 6 bytes whose string runs on past it, over bytes that
        // look like a second frame holding a byte that is no opcode
        let mut b = vec![0x80, 4, 0x95, 6, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&[0x8c, 16, b'a', b'b', b'c', b'd']);
        // the "frame" at 17 declares 5 bytes: to the file's end
        b.extend_from_slice(&[0x95, 5, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff]);
        b.extend_from_slice(b"N.");
        assert_eq!(b.len(), 31);
        let (r, found) = run("mid", &b, &[2, 17]);
        assert!(found, "the second piece, lexed on its own, met 0xff");
        assert!(r.is_ok(), "{r:?}");
    }
}
