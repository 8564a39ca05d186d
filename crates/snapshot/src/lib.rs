//! `vramscope-snapshot` owns reading (and writing) PyTorch CUDA memory
//! snapshots: the pickles written by `torch.cuda.memory._dump_snapshot`.
//!
//! * [`pickle`]: a generic, safe pickle decoder (protocols 0–5) that never
//!   imports or executes anything, producing an arena of plain values.
//! * [`model`]: the typed snapshot ([`Snapshot`], [`Segment`], [`Block`],
//!   [`AllocatorSettings`], ...) with stack traces interned once in a
//!   [`StackTable`].
//! * [`trace`](mod@trace): each device's [`Trace`], 32 bytes a
//!   [`TraceEntry`]; actions are the allocator twin's [`TraceAction`].
//! * [`write`](mod@write): a protocol-4 pickle writer that serialises a [`Snapshot`]
//!   back into the dict layout PyTorch produces.
//!
//! Synthetic snapshots for tests and benchmarks are `vramscope_testkit::synth`.
//!
//! The only I/O is [`read_snapshot_file`] and [`write::write_snapshot_file`];
//! everything else works on byte slices. No `unsafe`; the only dependency is
//! the allocator twin (`vramscope-alloc`, itself dependency-free), whose
//! [`TraceAction`] is the one enum of trace actions.
//!
//! # Reading
//! Nothing in a pickle is ever imported or executed: globals outside a tiny
//! whitelist of builtin containers are refused with [`Error::ForbiddenGlobal`].
//! Every failure is a typed [`Error`] carrying the byte offset; no input makes
//! the reader panic, recurse without bound, or allocate from an untrusted
//! length field.
//!
//! [`read_snapshot_file`] streams the file (a helper thread reads 1 MiB
//! chunks ahead) through the pickle VM, which turns trace-entry dicts into
//! [`TraceEntry`]s as they are frozen; everything else is converted once
//! decoding ends. If anything unusual happens to those entries (a pickle that
//! mutates a container after storing it, an entry dict reused elsewhere), the
//! file is decoded again generically, so the result always equals what
//! `pickle.load` would see.
//!
//! On machines of [`PAR_MIN_CORES`] cores or more, a file of
//! [`PAR_MIN_BYTES`] or more is first lexed on all cores (at most
//! [`PAR_MAX_THREADS`]) for its memo table (where each memo index's
//! object starts); its first device trace with entries, and the devices'
//! traces that follow it, are then decoded in pieces on as many, and the
//! VM decodes the rest, jumping over the traces and taking the pieces'
//! entries in (ids mapped to the ones it would have given them).
//! Any pickle that does not fit (see `par.rs`) is decoded as above instead;
//! a trace entry whose frames list holds something other than a frame dict
//! is reported from the pieces (the sequential reader's error, byte
//! included), without decoding the file again or taking its entries over,
//! and a byte the lex refuses, in a file the reader lexes, from the lex.
//! [`read_snapshot_file_early`] hands the first trace's pieces meanwhile
//! to a pass of the caller's (`inspect`'s timeline) on a thread of its own, with the
//! allocator settings read ahead of the rest ([`EarlyTrace`]).
//!
//! # Cost
//! The decoder keeps 8 bytes per container and 4 per memo entry, in chunks
//! that are never reallocated; a device's list of entries keeps only which
//! entries it holds; a frames list already seen (the same bytes: the same
//! memo gets of the same frame dicts) is not decoded again; each trace entry
//! is 24 bytes in the [`Trace`]. Time and peak memory against Python's
//! `pickle.load` are measured in `docs/inspect-speed.md` and
//! `docs/performance.md`.
//!
//! Stacks are interned: every `frames` field is a [`StackId`] into the
//! snapshot's [`StackTable`] (a million entries with 40 frames each would
//! otherwise cost gigabytes); [`Snapshot::frames`] resolves one to
//! [`Frame`]s with borrowed `&str` names.
//!
//! ```no_run
//! let snap = vramscope_snapshot::read_snapshot_file("snapshot.pickle")?;
//! for e in &snap.device_traces[0] {
//!     let top = snap.frames(e.frames).next();
//!     println!("{} {} bytes at {:#x} from {:?}", snap.action_name(&e), e.size, e.addr, top.map(|f| f.name));
//! }
//! # Ok::<(), vramscope_snapshot::Error>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod chunked;
mod convert;
mod error;
mod frames;
mod hash;
mod intern;
mod lex;
pub mod model;
mod par;
pub mod pickle;
pub mod trace;
pub mod write;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use error::Error;
pub use model::{
    AllocatorSettings, Annotation, Block, BlockState, Frame, FrameId, Frames, History,
    RoundupPower2Divisions, Segment, SegmentType, Snapshot, StackId, StackTable, Sym,
};
pub use trace::{Trace, TraceEntry};
/// A trace entry's action: the allocator twin's own enum (PyTorch's
/// `TraceEntry::Action`), shared so the reader, the replay and the twin
/// speak one language.
pub use vramscope_alloc::TraceAction;

/// Decode a snapshot pickle held in memory.
///
/// Fails with [`Error::NotASnapshot`] when the pickle is valid but holds
/// something else, [`Error::Schema`] when a snapshot field has a wrong type,
/// and with a decoding error (carrying the byte offset) otherwise.
pub fn read_snapshot(bytes: &[u8]) -> Result<Snapshot, Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if bytes.len() as u64 >= PAR_MIN_BYTES && PAR_MIN_CORES.is_some_and(|n| cores >= n) {
        if let Some(r) = read_parallel(bytes, cores.min(PAR_MAX_THREADS)) {
            return r;
        }
    }
    read_snapshot_sequential(bytes)
}

/// Files this large are decoded in parallel on machines of
/// [`PAR_MIN_CORES`] cores or more (see [`read_snapshot_file`]).
pub const PAR_MIN_BYTES: u64 = 4 << 20;
/// Machines with this many cores decode large files in parallel. On the
/// GPU machine (16 cores), `inspect --json` of the real 45-48 MB
/// snapshots took 88-113 ms with it on 16 threads, 88-142 ms on 8,
/// 105-178 ms on 4 (slower than without on one of the three), 112-273 ms
/// without; on the development machine's 2 cores it takes three times
/// as long (`docs/inspect-speed.md`, "Session 9"). [`read_parallel`] and
/// [`read_file_parallel`] run it on any machine, for tests and
/// measurements.
pub const PAR_MIN_CORES: Option<usize> = Some(8);
/// At most this many threads decode in parallel: each holds buffers and
/// tables of its own, and more than 16 were never measured.
pub const PAR_MAX_THREADS: usize = 16;

/// [`read_snapshot`]'s parallel decoding alone on `threads` threads, or
/// `None` where it gives up (then [`read_snapshot_sequential`] decides);
/// for tests, which hold the two to the same snapshot. An error is a trace
/// entry whose frames list holds something other than a frame dict (the
/// one error it reports; the sequential reader's, byte included).
#[doc(hidden)]
pub fn read_parallel(bytes: &[u8], threads: usize) -> Option<Result<Snapshot, Error>> {
    let len = bytes.len() as u64;
    let starts = frames::check(&bytes, len).ok()?;
    let d = decode_trace(par::Input::Slice(bytes), len, &starts, threads).ok()??;
    let (r, state) = pickle::parse_slice_with(bytes, convert::State::with_trace(d));
    if state.trace_unused() {
        // decoding never reached the trace: it was decoded twice
        return None;
    }
    Some(par_result(r, state)?.map(|(s, _)| s))
}

/// The parallel decoding's result: the snapshot with the device whose
/// trace the pieces became (when one did, whole), or the error naming its
/// trace's faulty entry ([`crate::par::Fault`]); `None` where it gave up
/// or failed otherwise (the sequential reader then decides).
fn par_result(
    r: Result<pickle::Pickle, Error>,
    state: convert::State,
) -> Option<Result<(Snapshot, Option<usize>), Error>> {
    let fault = state.par_fault_at();
    match fast_path_spliced(r, state)? {
        // (a faulty entry not reported: let the sequential reader decide)
        Ok(s) => fault.is_none().then_some(Ok(s)),
        Err(e @ Error::Schema { .. }) if fault.is_some() && e.offset() == fault => Some(Err(e)),
        Err(_) => None,
    }
}

/// [`read_snapshot_file`]'s parallel decoding alone on `threads`
/// threads, or `None` where it gives up; for tests. An error is a trace
/// entry whose frames list holds something other than a frame dict, or
/// what the lex finds while making the memo table (as that reader's on a
/// file it lexes, whatever this one's size).
#[doc(hidden)]
pub fn read_file_parallel(
    path: impl AsRef<Path>,
    threads: usize,
) -> Option<Result<Snapshot, Error>> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let starts = frames::check(&file, len).ok()?;
    Some(parallel_file::<()>(path, &file, len, &starts, threads, true, None)?.map(|(s, _)| s))
}

/// [`read_file_parallel`] with [`read_snapshot_file_early`]'s pass; for
/// tests.
#[doc(hidden)]
pub fn read_file_parallel_early<T: Send + 'static>(
    path: impl AsRef<Path>,
    threads: usize,
    pass: impl FnOnce(EarlyTrace) -> T + Send + 'static,
) -> Option<Result<Early<T>, Error>> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let starts = frames::check(&file, len).ok()?;
    parallel_file(
        path,
        &file,
        len,
        &starts,
        threads,
        true,
        Some(Box::new(pass)),
    )
}

/// A pass over a device's trace run while the rest of the file is read.
type Pass<T> = Box<dyn FnOnce(EarlyTrace) -> T + Send>;

/// A snapshot, with the device whose trace a pass read while the file was
/// read and what the pass returned (see [`read_snapshot_file_early`]).
pub type Early<T> = (Snapshot, Option<(usize, T)>);

/// A device's trace as the parallel decoder left it, before the rest of
/// the file is read: handed to the pass of [`read_snapshot_file_early`].
pub struct EarlyTrace {
    pieces: Vec<Arc<Trace>>,
    len: usize,
    settings: Option<AllocatorSettings>,
}

impl EarlyTrace {
    /// The first device's trace among the pieces (they may hold the next
    /// devices' too: [`par::Decoded::lists`]).
    fn of(d: &par::Decoded) -> EarlyTrace {
        let pieces: Vec<Arc<Trace>> = d.pieces.iter().map(|p| p.entries.clone()).collect();
        let all: usize = pieces.iter().map(|p| p.len()).sum();
        EarlyTrace {
            len: d
                .lists
                .first()
                .map_or(all, |&n| usize::try_from(n).map_or(all, |n| n.min(all))),
            pieces,
            settings: d.settings.as_deref().and_then(settings_ahead),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `allocator_settings` dict after the trace, decoded from its own
    /// bytes ahead of the rest (`None` where it names objects before it,
    /// or is absent). The snapshot's may still differ (a dict changed
    /// later in the pickle): a pass that uses them checks.
    pub fn allocator_settings(&self) -> Option<&AllocatorSettings> {
        self.settings.as_ref()
    }

    /// Call `f` on each entry, oldest first, without its stack and
    /// strings (`frames` is [`StackId::EMPTY`], `other_action`,
    /// `compile_context` and `user_metadata` are `None`: the pieces' ids
    /// are not yet the snapshot's). Each piece's memory goes back once
    /// read here and taken into the snapshot.
    pub fn for_each(self, mut f: impl FnMut(TraceEntry)) {
        let mut left = self.len;
        for p in self.pieces {
            for e in p.iter() {
                if left == 0 {
                    return;
                }
                left -= 1;
                f(TraceEntry {
                    other_action: None,
                    frames: StackId::EMPTY,
                    compile_context: None,
                    user_metadata: None,
                    ..e
                });
            }
        }
    }
}

/// The settings dict `dict` (its opcodes, naming nothing before it) read
/// as the snapshot reader reads a snapshot's.
fn settings_ahead(dict: &[u8]) -> Option<AllocatorSettings> {
    let mut b = b"\x80\x04}(\x8c\x08segments]\x8c\x12allocator_settings".to_vec();
    b.extend_from_slice(dict);
    b.extend_from_slice(b"u.");
    read_snapshot_sequential(&b).ok()?.allocator_settings
}

/// The file at `path` (open as `file`, `len` bytes, frames starting at
/// `starts`): its device traces (see [`par`]) decoded in pieces on `threads`
/// threads, read by positioned reads, the rest decoded through a buffer
/// that jumps over the trace. `None` where it gives up. `lexed`: the
/// reader would lex this file, so an error the lex finds while making the
/// memo table is the answer (it is the one [`read_file`] reports when
/// both fail, and every lex error is a decoding error too); otherwise the
/// parallel decoding gives up on it. `pass`, when given, runs on a thread
/// of its own over the first trace's pieces while the rest is read; its
/// result comes back when they became one device's trace, whole.
fn parallel_file<T: Send + 'static>(
    path: &Path,
    file: &std::fs::File,
    len: u64,
    starts: &[u64],
    threads: usize,
    lexed: bool,
    pass: Option<Pass<T>>,
) -> Option<Result<Early<T>, Error>> {
    let d = match decode_trace(par::Input::At(file, len), len, starts, threads) {
        Ok(d) => d?,
        Err(e) if lexed => return Some(Err(e)),
        Err(_) => return None,
    };
    // (a pass whose result is not wanted runs to its end, detached)
    let early = pass.map(|f| {
        let t = EarlyTrace::of(&d);
        std::thread::spawn(move || f(t))
    });
    let again = std::fs::File::open(path).ok()?;
    let (r, state) = pickle::parse_file_jumping_with(again, len, convert::State::with_trace(d));
    if state.trace_unused() {
        return None;
    }
    Some(par_result(r, state)?.map(|(snap, device)| {
        let got = device.zip(early.and_then(|h| h.join().ok()));
        (snap, got)
    }))
}

/// The memo table (the lex, on `threads` threads) and the first device
/// trace decoded in pieces with it; `None` where either gives up, the
/// lex's error where it finds one.
fn decode_trace(
    input: par::Input<'_>,
    len: u64,
    starts: &[u64],
    threads: usize,
) -> Result<Option<par::Decoded>, Error> {
    let src: &dyn frames::At = match &input {
        par::Input::Slice(b) => b,
        par::Input::At(f, _) => *f,
    };
    let piece = (len / (threads as u64 * 4).max(1)).clamp(1 << 20, lex::PIECE);
    let Some(table) = lex::memo_table(src, len, starts, piece, threads)? else {
        return Ok(None);
    };
    Ok(par::decode_trace(input, &table, starts, threads))
}

/// [`read_snapshot`] without the parallel decoding: the fast path on one
/// thread, then the generic one where it gives up.
#[doc(hidden)]
pub fn read_snapshot_sequential(bytes: &[u8]) -> Result<Snapshot, Error> {
    let (r, state) = pickle::parse_slice_with(bytes, convert::State::new(true));
    if let Some(result) = fast_path(r, state) {
        return result.map_err(|e| explain(bytes, e));
    }
    read_snapshot_generic(bytes)
}

/// [`read_snapshot`]'s fallback alone: the whole pickle decoded generically,
/// then converted (what the fast path retries with when it gives up). For
/// fuzzing and tests, which hold both paths to the same answer.
#[doc(hidden)]
pub fn read_snapshot_generic(bytes: &[u8]) -> Result<Snapshot, Error> {
    let doc = pickle::parse(bytes).map_err(|e| explain(bytes, e))?;
    convert::snapshot_from_pickle(doc, convert::State::new(false))
}

/// A decoding error `e` of a file that starts with `head`, told as what
/// the file is when it is plainly no pickle: a zip archive (`torch.save`'s
/// format; its first byte decodes as `PERSID`) or text (whose letters
/// decode as opcodes that find no memo or mark). Pickles of protocol 0,
/// text themselves, fail otherwise or not at all; a truncated file and a
/// refused global keep their own error.
fn explain(head: &[u8], e: Error) -> Error {
    let decoding = matches!(
        e,
        Error::UnknownOpcode { .. }
            | Error::UnsupportedOpcode { .. }
            | Error::MemoMissing { .. }
            | Error::StackUnderflow { .. }
            | Error::MarkMissing { .. }
            | Error::InvalidArgument { .. }
            | Error::NotASnapshot { .. }
    );
    if !decoding || head.first() == Some(&0x80) {
        return e;
    }
    let looks_like = if head.starts_with(b"PK\x03\x04") {
        "a zip archive (torch.save writes one: a checkpoint or tensors)".to_owned()
    } else if text_prefix(head).is_some_and(|t| {
        t.chars()
            .all(|c| !c.is_control() || c.is_ascii_whitespace())
    }) {
        let line = String::from_utf8_lossy(head);
        let first: String = line.lines().next().unwrap_or("").chars().take(40).collect();
        format!("a text file (it starts {first:?})")
    } else {
        return e;
    };
    Error::NotAPickle { looks_like }
}

/// `head` as text, when it is UTF-8 but for a character cut at its end.
fn text_prefix(head: &[u8]) -> Option<&str> {
    match std::str::from_utf8(head) {
        Ok(t) => Some(t),
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
        Err(_) => None,
    }
}

/// The result of the fast path (trace entries converted while decoding), or
/// `None` when it gave up and the generic path must decide.
fn fast_path(
    r: Result<pickle::Pickle, Error>,
    state: convert::State,
) -> Option<Result<Snapshot, Error>> {
    Some(fast_path_spliced(r, state)?.map(|(s, _)| s))
}

/// [`fast_path`], with the device whose trace is the spliced one, whole
/// (`convert::snapshot_spliced`).
fn fast_path_spliced(
    r: Result<pickle::Pickle, Error>,
    state: convert::State,
) -> Option<Result<(Snapshot, Option<usize>), Error>> {
    if state.bailed() {
        return None;
    }
    let result = match r {
        Ok(p) => convert::snapshot_spliced(p, state),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if convert::is_bail(&e) => None,
        other => Some(other),
    }
}

/// Read and decode a snapshot file.
///
/// The file is streamed in 1 MiB chunks, read ahead on a helper thread while
/// the decoder runs; it is never held whole. Trace entries are converted as
/// they are decoded, so peak memory is about the typed model plus the compact
/// decoded form of everything else (below the file size for typical traces).
///
/// Before decoding, the frame headers are followed (a truncated file fails
/// at once, [`Error::Truncated`]). A file of [`LEX_MIN_BYTES`] or more, on
/// a machine of [`LEX_MIN_CORES`] cores or more, is also lexed while it is
/// decoded, on the cores the decoder leaves, so a byte that is no opcode
/// deep in it fails as soon as the lex reaches it, not when decoding does
/// (smaller files are decoded in well under a second; on fewer cores the
/// lex would slow decoding). When both find errors, the lex's is reported
/// (it depends on the file alone).
///
/// Before all that, where [`PAR_MIN_CORES`] allows, a file
/// of [`PAR_MIN_BYTES`] or more has its trace decoded in parallel (see the
/// crate's doc),
/// by positioned reads a window at a time per thread; where that gives up,
/// for whatever reason, the file is read as above (a trace entry whose
/// frames list holds something other than a frame dict is an error from
/// the pieces themselves, not a reason to give up).
pub fn read_snapshot_file(path: impl AsRef<Path>) -> Result<Snapshot, Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lex = |len| len >= LEX_MIN_BYTES && cores >= LEX_MIN_CORES;
    Ok(read_file::<()>(path.as_ref(), lex, None)?.0)
}

/// [`read_snapshot_file`], running `pass` over a device's trace while the
/// rest of the file is read, where the trace is decoded in parallel (a
/// file of [`PAR_MIN_BYTES`] or more on [`PAR_MIN_CORES`] cores): its
/// result comes back with the device whose trace it read, when its
/// entries became that device's trace whole; otherwise `None` (the pass,
/// if it ran, read entries the snapshot does not hold as such).
pub fn read_snapshot_file_early<T: Send + 'static>(
    path: impl AsRef<Path>,
    pass: impl FnOnce(EarlyTrace) -> T + Send + 'static,
) -> Result<Early<T>, Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lex = |len| len >= LEX_MIN_BYTES && cores >= LEX_MIN_CORES;
    read_file(path.as_ref(), lex, Some(Box::new(pass)))
}

/// Files this large are lexed while they are decoded (see
/// [`read_snapshot_file`]): the decoder takes about a second for them.
pub const LEX_MIN_BYTES: u64 = 256 << 20;
/// Machines with this many cores lex large files while decoding them.
pub const LEX_MIN_CORES: usize = 4;

/// [`read_snapshot_file`], lexing the file while decoding it whatever its
/// size or the machine's cores (for tests).
#[doc(hidden)]
pub fn read_snapshot_file_lexed(path: impl AsRef<Path>) -> Result<Snapshot, Error> {
    Ok(read_file::<()>(path.as_ref(), |_| true, None)?.0)
}

/// Read and decode the file at `path`, lexing it meanwhile when
/// `lex(its length)`.
fn read_file<T: Send + 'static>(
    path: &Path,
    lex: impl Fn(u64) -> bool,
    pass: Option<Pass<T>>,
) -> Result<Early<T>, Error> {
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let open = || -> Result<(std::fs::File, u64), Error> {
        let file = std::fs::File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        Ok((file, len))
    };
    let (mut file, len) = open()?;
    if len == 0 {
        return Err(Error::NotAPickle {
            looks_like: "an empty file".into(),
        });
    }
    let mut head = [0u8; 256];
    let n = std::io::Read::read(&mut file, &mut head).map_err(io_err)?;
    let head = &head[..n];
    let starts = frames::check(&file, len)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if len >= PAR_MIN_BYTES && PAR_MIN_CORES.is_some_and(|n| cores >= n) {
        let threads = cores.min(PAR_MAX_THREADS);
        if let Some(r) = parallel_file(path, &file, len, &starts, threads, lex(len), pass) {
            return r;
        }
    }
    if !lex(len) {
        return Ok((
            decode_file(path, head, &open, &Arc::new(AtomicBool::new(false)))?,
            None,
        ));
    }
    // the lex takes the cores the decoder leaves
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1));
    let found = Arc::new(AtomicBool::new(false));
    let cancel = AtomicBool::new(false);
    let (decoded, lexed) = std::thread::scope(|s| {
        let lexer =
            s.spawn(|| lex::check(&file, len, &starts, lex::PIECE, threads, &found, &cancel));
        let decoded = decode_file(path, head, &open, &found);
        if decoded.is_ok() {
            cancel.store(true, Ordering::Relaxed);
        }
        (decoded, lexer.join())
    });
    match (decoded, lexed) {
        (Ok(snap), _) => Ok((snap, None)),
        (Err(_), Ok(Err(lex_error))) => Err(lex_error),
        // stopped for an error the lex then placed after the end, or in
        // bytes it entered mid-opcode: decode again, unstopped
        (Err(_), _) if found.load(Ordering::Relaxed) => Ok((
            decode_file(path, head, &open, &Arc::new(AtomicBool::new(false)))?,
            None,
        )),
        (Err(e), _) => Err(e),
    }
}

/// [`read_snapshot_file`]'s decoding (the fast path, then the generic one
/// when it gave up), reading through a file that fails once `stop` is set.
fn decode_file(
    path: &Path,
    head: &[u8],
    open: &dyn Fn() -> Result<(std::fs::File, u64), Error>,
    stop: &Arc<AtomicBool>,
) -> Result<Snapshot, Error> {
    let with_path = |e| match e {
        Error::Io { source, .. } => Error::Io {
            path: path.to_owned(),
            source,
        },
        e => e,
    };
    let (file, len) = open()?;
    let file = Stoppable(file, stop.clone());
    let (r, state) = pickle::parse_file_with(file, len, convert::State::new(true));
    if let Some(result) = fast_path(r, state) {
        return result.map_err(|e| explain(head, with_path(e)));
    }
    let (file, len) = open()?;
    let file = Stoppable(file, stop.clone());
    let (r, state) = pickle::parse_file_with(file, len, convert::State::new(false));
    convert::snapshot_from_pickle(r.map_err(|e| explain(head, with_path(e)))?, state)
}

/// A file whose reads fail once its flag is set (the lex found an error
/// ahead of the decoder).
struct Stoppable(std::fs::File, Arc<AtomicBool>);

impl std::io::Read for Stoppable {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.1.load(Ordering::Relaxed) {
            return Err(std::io::Error::other(
                "stopped: the lex found an error ahead",
            ));
        }
        self.0.read(buf)
    }
}

/// The checks [`read_snapshot_file`] makes before and while decoding,
/// alone, on a pickle's bytes: the frame headers followed (a truncated
/// file) and every opcode lexed on all cores (a byte that is no opcode, a
/// memo get before its put), the bytes cut into pieces at frame starts about
/// `piece` bytes apart (`None`: the reader's own size). For timing
/// (`examples/lex_file.rs`), tests and fuzzing: an error here is an error of
/// [`read_snapshot`] too.
#[doc(hidden)]
pub fn check_bytes(bytes: &[u8], piece: Option<u64>) -> Result<(), Error> {
    check_at(&bytes, bytes.len() as u64, piece)
}

/// [`check_bytes`] on a file, read by positioned reads a megabyte at a time
/// per thread.
#[doc(hidden)]
pub fn check_file(path: impl AsRef<Path>, piece: Option<u64>) -> Result<(), Error> {
    let path = path.as_ref();
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    check_at(&file, len, piece)
}

/// [`check_bytes`], also giving the memo table: for every `MEMOIZE` before
/// the pickle's `STOP`, in memo index order, `[start of the opcode that
/// made the object it stores, its own offset]`; `None` when
/// the pickle stores with indices of its own or the lex cannot follow it.
/// The table a parallel decoder resolves memo gets across pieces with.
#[doc(hidden)]
pub fn memo_table_bytes(bytes: &[u8], piece: Option<u64>) -> Result<Option<Vec<[u64; 2]>>, Error> {
    let len = bytes.len() as u64;
    let starts = frames::check(&bytes, len)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let table = lex::memo_table(&bytes, len, &starts, piece.unwrap_or(lex::PIECE), threads)?;
    // each MEMOIZE follows the opcode the table gives
    Ok(table.map(|t| {
        t.into_iter()
            .map(u64::from)
            .map(|s| {
                let w = usize::try_from(s)
                    .ok()
                    .and_then(|s| bytes.get(s..))
                    .unwrap_or(&[]);
                [s, s + lex::op_len(w).unwrap_or(0) as u64]
            })
            .collect()
    }))
}

/// [`check_bytes`] on bytes read at offsets.
fn check_at(src: &dyn frames::At, len: u64, piece: Option<u64>) -> Result<(), Error> {
    let starts = frames::check(src, len)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (found, never) = (AtomicBool::new(false), AtomicBool::new(false));
    let piece = piece.unwrap_or(lex::PIECE);
    lex::check(src, len, &starts, piece, threads, &found, &never)
}
