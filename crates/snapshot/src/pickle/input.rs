//! Where the VM's bytes come from: a slice (zero-copy) or any `Read`
//! (streamed through a fixed buffer, so a file never has to be held whole).

use std::io::{self, Read};

/// The input ended; carries the offset where it ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Eof(pub(crate) usize);

pub(crate) trait Input {
    /// Offset of the next byte.
    fn pos(&self) -> usize;
    fn byte(&mut self) -> Result<u8, Eof>;
    /// The next `n` bytes.
    fn take(&mut self, n: u64) -> Result<&[u8], Eof>;
    /// The bytes up to the next `\n` (which is consumed, not returned).
    fn line(&mut self) -> Result<&[u8], Eof>;
    /// Whether at least `n` more bytes exist, when that is cheap to know.
    fn has_at_least(&mut self, n: u64) -> Option<bool>;
    /// Total input length, when known.
    fn len_hint(&self) -> Option<usize>;
    /// The bytes already buffered (a prefix of what follows).
    fn window(&self) -> &[u8];
    /// Consume `n <= window().len()` bytes.
    fn skip(&mut self, n: usize);
    /// Go on at offset `to` (past the current one); `false` when this
    /// input cannot.
    fn jump(&mut self, to: usize) -> bool {
        let _ = to;
        false
    }
}

pub(crate) struct SliceInput<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> SliceInput<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        SliceInput { data, pos: 0 }
    }
}

impl Input for SliceInput<'_> {
    #[inline]
    fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, Eof> {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(Eof(self.data.len())),
        }
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&[u8], Eof> {
        let rem = self.data.len() - self.pos;
        if n > rem as u64 {
            return Err(Eof(self.data.len()));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn line(&mut self) -> Result<&[u8], Eof> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(Eof(self.data.len())),
        }
    }

    fn has_at_least(&mut self, n: u64) -> Option<bool> {
        Some(n <= (self.data.len() - self.pos) as u64)
    }

    fn len_hint(&self) -> Option<usize> {
        Some(self.data.len())
    }

    #[inline]
    fn window(&self) -> &[u8] {
        &self.data[self.pos..]
    }

    #[inline]
    fn skip(&mut self, n: usize) {
        self.pos += n;
    }

    fn jump(&mut self, to: usize) -> bool {
        if to < self.pos || to > self.data.len() {
            return false;
        }
        self.pos = to;
        true
    }
}

const CAP: usize = 1 << 20;

pub(crate) struct ReadInput<R: Read> {
    r: R,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    /// Absolute offset of `buf[0]`.
    base: usize,
    /// Holds arguments larger than the buffer.
    big: Vec<u8>,
    eof: bool,
    pub(crate) err: Option<io::Error>,
    /// Total length, when known (file size).
    total: Option<u64>,
    /// Moves the reader to an offset, for [`Input::jump`].
    seek: Option<fn(&mut R, u64) -> bool>,
}

impl<R: Read> ReadInput<R> {
    /// [`ReadInput::new`] for a reader `seek` can move (its input can
    /// then [`Input::jump`]).
    pub(crate) fn seekable(r: R, total: Option<u64>, seek: fn(&mut R, u64) -> bool) -> Self {
        let mut i = Self::new(r, total);
        i.seek = Some(seek);
        i
    }

    pub(crate) fn new(r: R, total: Option<u64>) -> Self {
        ReadInput {
            seek: None,
            r,
            buf: vec![0; CAP],
            lo: 0,
            hi: 0,
            base: 0,
            big: Vec::new(),
            eof: false,
            err: None,
            total,
        }
    }

    fn end(&self) -> usize {
        self.base + self.hi
    }

    /// Read more into the buffer until `need` bytes are available from `lo`
    /// (`need <= CAP`). Returns whether they are.
    fn fill(&mut self, need: usize) -> bool {
        if self.hi - self.lo >= need {
            return true;
        }
        if self.lo > 0 {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.base += self.lo;
            self.hi -= self.lo;
            self.lo = 0;
        }
        while self.hi < need && !self.eof {
            match self.r.read(&mut self.buf[self.hi..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.hi += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.err = Some(e);
                    self.eof = true;
                }
            }
        }
        self.hi - self.lo >= need
    }
}

impl<R: Read> Input for ReadInput<R> {
    #[inline]
    fn pos(&self) -> usize {
        self.base + self.lo
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, Eof> {
        if self.lo == self.hi && !self.fill(1) {
            return Err(Eof(self.end()));
        }
        let b = self.buf[self.lo];
        self.lo += 1;
        Ok(b)
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&[u8], Eof> {
        if n <= (self.hi - self.lo) as u64 {
            let s = &self.buf[self.lo..self.lo + n as usize];
            self.lo += n as usize;
            return Ok(s);
        }
        if n <= CAP as u64 {
            if !self.fill(n as usize) {
                self.lo = self.hi;
                return Err(Eof(self.end()));
            }
            let s = &self.buf[self.lo..self.lo + n as usize];
            self.lo += n as usize;
            return Ok(s);
        }
        // A large argument: never trust the length field for allocation;
        // grow as the bytes actually arrive.
        if self.has_at_least(n) == Some(false) {
            return Err(Eof(self.total.map_or(self.end(), |t| t as usize)));
        }
        self.big.clear();
        self.big.extend_from_slice(&self.buf[self.lo..self.hi]);
        self.base += self.hi;
        self.lo = 0;
        self.hi = 0;
        let want = n - self.big.len() as u64;
        let got = match (&mut self.r).take(want).read_to_end(&mut self.big) {
            Ok(k) => k as u64,
            Err(e) => {
                self.err = Some(e);
                0
            }
        };
        self.base += got as usize;
        if got < want {
            self.eof = true;
            return Err(Eof(self.base));
        }
        Ok(&self.big[..])
    }

    fn line(&mut self) -> Result<&[u8], Eof> {
        let mut scanned = 0;
        loop {
            if let Some(i) = self.buf[self.lo + scanned..self.hi]
                .iter()
                .position(|&b| b == b'\n')
            {
                let a = self.lo;
                self.lo += scanned + i + 1;
                return Ok(&self.buf[a..a + scanned + i]);
            }
            scanned = self.hi - self.lo;
            if scanned >= CAP {
                break;
            }
            if !self.fill(scanned + 1) {
                self.lo = self.hi;
                return Err(Eof(self.end()));
            }
        }
        // a line longer than the buffer
        self.big.clear();
        loop {
            if self.lo == self.hi && !self.fill(1) {
                return Err(Eof(self.end()));
            }
            let b = self.buf[self.lo];
            self.lo += 1;
            if b == b'\n' {
                return Ok(&self.big[..]);
            }
            self.big.push(b);
        }
    }

    fn has_at_least(&mut self, n: u64) -> Option<bool> {
        let total = self.total?;
        Some((self.pos() as u64).saturating_add(n) <= total)
    }

    fn len_hint(&self) -> Option<usize> {
        self.total.and_then(|t| usize::try_from(t).ok())
    }

    #[inline]
    fn window(&self) -> &[u8] {
        &self.buf[self.lo..self.hi]
    }

    #[inline]
    fn skip(&mut self, n: usize) {
        self.lo += n;
    }

    fn jump(&mut self, to: usize) -> bool {
        let Some(seek) = self.seek else {
            return false;
        };
        if to < self.pos() || self.total.is_some_and(|t| to as u64 > t) {
            return false;
        }
        if to <= self.end() {
            self.lo += to - self.pos();
            return true;
        }
        if !seek(&mut self.r, to as u64) {
            return false;
        }
        self.base = to;
        self.lo = 0;
        self.hi = 0;
        self.eof = false;
        true
    }
}

/// Room kept free at the start of each chunk so the unread tail of the
/// previous chunk can be moved in front of it without reallocating.
const HEAD: usize = 64 << 10;
const CHUNK: usize = 1 << 20;

type Chunk = (Vec<u8>, usize);

/// Streams a reader through a helper thread: the thread reads 1 MiB chunks
/// ahead while the VM decodes, so the kernel's copy overlaps with decoding.
/// Chunk buffers are recycled (4 in flight).
pub(crate) struct ThreadedInput {
    rx: std::sync::mpsc::Receiver<io::Result<Chunk>>,
    back: std::sync::mpsc::SyncSender<Vec<u8>>,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    /// Absolute offset of `buf[0]` (wrapping: `buf[0]` may lie before the
    /// start of the input when a chunk has headroom).
    base: usize,
    eof: bool,
    pub(crate) err: Option<io::Error>,
    total: Option<u64>,
}

impl ThreadedInput {
    pub(crate) fn new<R: Read + Send + 'static>(mut r: R, total: Option<u64>) -> io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<Chunk>>(2);
        let (back, back_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        for _ in 0..3 {
            let _ = back.try_send(vec![0; HEAD + CHUNK]);
        }
        std::thread::Builder::new()
            .name("snapshot-read".into())
            .spawn(move || {
                while let Ok(mut b) = back_rx.recv() {
                    let mut n = 0;
                    let mut err = None;
                    while n < CHUNK {
                        match r.read(&mut b[HEAD + n..]) {
                            Ok(0) => break,
                            Ok(k) => n += k,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                err = Some(e);
                                break;
                            }
                        }
                    }
                    let last = n < CHUNK || err.is_some();
                    if n > 0 && tx.send(Ok((b, n))).is_err() {
                        return;
                    }
                    if let Some(e) = err {
                        let _ = tx.send(Err(e));
                    }
                    if last {
                        return;
                    }
                }
            })?;
        Ok(ThreadedInput {
            rx,
            back,
            buf: Vec::new(),
            lo: 0,
            hi: 0,
            base: 0,
            eof: false,
            err: None,
            total,
        })
    }

    fn end(&self) -> usize {
        self.base.wrapping_add(self.hi)
    }

    /// Make `need` bytes available from `lo`. Returns whether they are.
    fn fill(&mut self, need: usize) -> bool {
        while self.hi - self.lo < need && !self.eof {
            let (mut c, n) = match self.rx.recv() {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    self.err = Some(e);
                    self.eof = true;
                    break;
                }
                Err(_) => {
                    self.eof = true;
                    break;
                }
            };
            let tail = self.hi - self.lo;
            let abs = self.base.wrapping_add(self.lo);
            if tail <= HEAD {
                c[HEAD - tail..HEAD].copy_from_slice(&self.buf[self.lo..self.hi]);
                let old = std::mem::replace(&mut self.buf, c);
                // keep exactly one buffer in circulation per chunk consumed
                let _ = self.back.try_send(if old.len() == HEAD + CHUNK {
                    old
                } else {
                    vec![0; HEAD + CHUNK]
                });
                self.lo = HEAD - tail;
                self.hi = HEAD + n;
            } else {
                // a long argument spans chunks: grow a private buffer
                let mut joined = std::mem::take(&mut self.buf);
                joined.truncate(self.hi);
                joined.drain(..self.lo);
                joined.extend_from_slice(&c[HEAD..HEAD + n]);
                let _ = self.back.try_send(c);
                self.lo = 0;
                self.hi = joined.len();
                self.buf = joined;
            }
            self.base = abs.wrapping_sub(self.lo);
        }
        self.hi - self.lo >= need
    }
}

impl Input for ThreadedInput {
    #[inline]
    fn pos(&self) -> usize {
        self.base.wrapping_add(self.lo)
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, Eof> {
        if self.lo == self.hi && !self.fill(1) {
            return Err(Eof(self.end()));
        }
        let b = self.buf[self.lo];
        self.lo += 1;
        Ok(b)
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&[u8], Eof> {
        if n <= (self.hi - self.lo) as u64 {
            let s = &self.buf[self.lo..self.lo + n as usize];
            self.lo += n as usize;
            return Ok(s);
        }
        if self.has_at_least(n) == Some(false) {
            return Err(Eof(self.total.map_or(self.end(), |t| t as usize)));
        }
        // Without a length hint, never trust the field: fill grows only as
        // bytes actually arrive.
        let Ok(need) = usize::try_from(n) else {
            return Err(Eof(self.end()));
        };
        if !self.fill(need) {
            self.lo = self.hi;
            return Err(Eof(self.end()));
        }
        let s = &self.buf[self.lo..self.lo + need];
        self.lo += need;
        Ok(s)
    }

    fn line(&mut self) -> Result<&[u8], Eof> {
        let mut scanned = 0;
        loop {
            if let Some(i) = self.buf[self.lo + scanned..self.hi]
                .iter()
                .position(|&b| b == b'\n')
            {
                let a = self.lo;
                self.lo += scanned + i + 1;
                return Ok(&self.buf[a..a + scanned + i]);
            }
            scanned = self.hi - self.lo;
            if !self.fill(scanned + 1) {
                self.lo = self.hi;
                return Err(Eof(self.end()));
            }
        }
    }

    fn has_at_least(&mut self, n: u64) -> Option<bool> {
        let total = self.total?;
        Some((self.pos() as u64).saturating_add(n) <= total)
    }

    fn len_hint(&self) -> Option<usize> {
        self.total.and_then(|t| usize::try_from(t).ok())
    }

    #[inline]
    fn window(&self) -> &[u8] {
        &self.buf[self.lo..self.hi]
    }

    #[inline]
    fn skip(&mut self, n: usize) {
        self.lo += n;
    }
}
