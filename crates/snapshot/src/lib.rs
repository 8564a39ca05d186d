//! `vramscope-snapshot` owns reading (and writing) PyTorch CUDA memory
//! snapshots: the pickles written by `torch.cuda.memory._dump_snapshot`.
//!
//! * [`pickle`]: a generic, safe pickle decoder (protocols 0–5) that never
//!   imports or executes anything, producing an arena of plain values.
//! * [`model`]: the typed snapshot ([`Snapshot`], [`Segment`], [`Block`],
//!   [`TraceEntry`], [`AllocatorSettings`], ...) with stack traces interned
//!   once in a [`StackTable`].
//! * [`write`]: a protocol-4 pickle writer that serialises a [`Snapshot`]
//!   back into the dict layout PyTorch produces (used to generate synthetic
//!   snapshots for tests and benchmarks).
//!
//! The only I/O is [`read_snapshot_file`] and [`write::write_snapshot_file`];
//! everything else works on byte slices. No `unsafe`, no dependencies.
//!
//! ```no_run
//! let snap = vramscope_snapshot::read_snapshot_file("snapshot.pickle")?;
//! for e in &snap.device_traces[0] {
//!     let top = snap.frames(e.frames).next();
//!     println!("{:?} {} bytes at {:#x} from {:?}", e.action, e.size, e.addr, top.map(|f| f.name));
//! }
//! # Ok::<(), vramscope_snapshot::Error>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod convert;
mod error;
mod hash;
mod intern;
pub mod model;
pub mod pickle;
pub mod write;

use std::path::Path;

pub use error::Error;
pub use model::{
    Action, AllocatorSettings, Annotation, Block, BlockState, Frame, FrameId, Frames, History,
    RoundupPower2Divisions, Segment, SegmentType, Snapshot, StackId, StackTable, Sym, TraceEntry,
};

/// Decode a snapshot pickle held in memory.
///
/// Fails with [`Error::NotASnapshot`] when the pickle is valid but holds
/// something else, [`Error::Schema`] when a snapshot field has a wrong type,
/// and with a decoding error (carrying the byte offset) otherwise.
pub fn read_snapshot(bytes: &[u8]) -> Result<Snapshot, Error> {
    convert::snapshot_from_pickle(pickle::parse(bytes)?)
}

/// Read and decode a snapshot file.
///
/// The file is streamed through a 1 MiB buffer and never held whole, so
/// peak memory is the compact decoded form plus the typed model.
pub fn read_snapshot_file(path: impl AsRef<Path>) -> Result<Snapshot, Error> {
    let path = path.as_ref();
    let io_err = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let p = pickle::parse_reader(file, Some(len)).map_err(|e| match e {
        Error::Io { source, .. } => io_err(source),
        e => e,
    })?;
    convert::snapshot_from_pickle(p)
}
