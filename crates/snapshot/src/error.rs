//! The crate's single error type.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong while reading (or writing) a snapshot.
///
/// Every variant raised while decoding pickle bytes carries the byte offset
/// of the opcode being executed (`offset`), so a bad file can be inspected
/// with `python3 -m pickletools`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The input ended in the middle of an opcode or before `STOP`.
    UnexpectedEof {
        /// Where the data ran out (the input length).
        offset: usize,
        /// Where the opcode that needed more bytes starts.
        opcode_offset: usize,
        /// What was being read (an opcode name, or `"opcode"`).
        reading: &'static str,
    },
    /// The file is shorter than its own protocol-4 frames say: a frame
    /// header declares more bytes than are left (found before decoding,
    /// by following the frame headers alone).
    Truncated {
        /// Where the `FRAME` opcode that runs past the end starts.
        frame_offset: u64,
        /// The bytes its header declares.
        declared: u64,
        /// The file's length.
        len: u64,
    },
    /// A byte that is not a pickle opcode.
    UnknownOpcode {
        /// Offset of the byte.
        offset: usize,
        /// The byte.
        opcode: u8,
    },
    /// A real pickle opcode this reader refuses (persistent ids, extension
    /// registry, out-of-band buffers).
    UnsupportedOpcode {
        /// Offset of the opcode.
        offset: usize,
        /// Opcode name.
        opcode: &'static str,
        /// Why it is refused.
        reason: &'static str,
    },
    /// `PROTO` names a protocol newer than 5.
    UnsupportedProtocol {
        /// Offset of the `PROTO` opcode.
        offset: usize,
        /// The protocol number found.
        protocol: u8,
    },
    /// The pickle references a global (class or function) outside the
    /// whitelist. Nothing is ever imported or executed.
    ForbiddenGlobal {
        /// Offset of the `GLOBAL`/`STACK_GLOBAL`/`INST` opcode.
        offset: usize,
        /// Module name as written in the pickle.
        module: String,
        /// Attribute name as written in the pickle.
        name: String,
    },
    /// An opcode needed more values than the stack (above the last mark) held.
    StackUnderflow {
        /// Offset of the opcode.
        offset: usize,
        /// Opcode name.
        opcode: &'static str,
    },
    /// An opcode needed a `MARK` and there was none.
    MarkMissing {
        /// Offset of the opcode.
        offset: usize,
        /// Opcode name.
        opcode: &'static str,
    },
    /// A memo `GET` of an index that was never `PUT`.
    MemoMissing {
        /// Offset of the opcode.
        offset: usize,
        /// The memo index.
        index: u64,
    },
    /// An opcode argument is malformed (bad text number, negative length,
    /// odd item count, wrong arguments to a whitelisted callable, ...).
    InvalidArgument {
        /// Offset of the opcode.
        offset: usize,
        /// Opcode name.
        opcode: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// An opcode was applied to a value of the wrong type (e.g. `APPEND` to a dict).
    WrongType {
        /// Offset of the opcode.
        offset: usize,
        /// Opcode name.
        opcode: &'static str,
        /// The type that was needed.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// A list, dict, set or bytearray used as a dict key or set member.
    Unhashable {
        /// Offset of the opcode.
        offset: usize,
        /// Opcode name.
        opcode: &'static str,
        /// The offending Python type.
        kind: &'static str,
    },
    /// A resource limit was hit (sizes beyond 4 GiB of items, nesting too
    /// deep, adversarially expensive keys, expansion of shared values).
    LimitExceeded {
        /// Offset of the opcode, when the limit was hit while decoding.
        offset: Option<usize>,
        /// Which limit.
        what: &'static str,
    },
    /// Copying a value out of the pickle (expanding every shared reference
    /// once per use) would make more values than the file's size allows:
    /// a few kilobytes of memo gets can stand for 2^60 values.
    ExpansionLimit {
        /// Values copied when the copy was refused (the work done).
        copied: u64,
        /// The budget those values were drawn from.
        budget: u64,
        /// The pickle's length in bytes, which sets the budget.
        file_len: u64,
    },
    /// The bytes are not a pickle at all (a zip archive, a text file):
    /// what they look like instead.
    NotAPickle {
        /// What the file looks like, e.g. `a zip archive (torch.save writes one)`.
        looks_like: String,
    },
    /// The pickle decoded fine but is not a memory snapshot at all.
    NotASnapshot {
        /// Why it is not one.
        reason: String,
    },
    /// The pickle looks like a snapshot but a field has the wrong type or
    /// an impossible value.
    Schema {
        /// Where, e.g. `device_traces[0][12].size`.
        path: String,
        /// What is wrong.
        message: String,
        /// For a trace entry: the offset of the opcode that completed its
        /// dict while decoding (where the file's bytes for it end, or
        /// start when the entry was decoded in one step), when known.
        offset: Option<u64>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // (the cause is the io error, printed after it by a chain)
            Error::Io { path, .. } => write!(f, "cannot read {}", path.display()),
            Error::NotAPickle { looks_like } => write!(
                f,
                "it is {looks_like}, not a pickle; expected the file torch.cuda.memory._dump_snapshot(path) writes"
            ),
            Error::UnexpectedEof {
                offset,
                opcode_offset,
                reading,
            } => write!(
                f,
                "unexpected end of file at byte {offset} while reading {reading} (opcode at byte {opcode_offset})"
            ),
            Error::Truncated {
                frame_offset,
                declared,
                len,
            } => write!(
                f,
                "the file is truncated: the pickle frame at byte {frame_offset} declares {declared} bytes, but the file ends at byte {len} ({} bytes missing; was the dump cut short?)",
                // (u128: a corrupt header may declare up to 2^64 - 1 bytes)
                (u128::from(*frame_offset) + 9 + u128::from(*declared))
                    .saturating_sub(u128::from(*len))
            ),
            Error::UnknownOpcode { offset, opcode } => {
                write!(f, "unknown pickle opcode 0x{opcode:02x} at byte {offset}")
            }
            Error::UnsupportedOpcode {
                offset,
                opcode,
                reason,
            } => write!(f, "unsupported opcode {opcode} at byte {offset}: {reason}"),
            Error::UnsupportedProtocol { offset, protocol } => {
                write!(f, "unsupported pickle protocol {protocol} at byte {offset}")
            }
            Error::ForbiddenGlobal {
                offset,
                module,
                name,
            } => write!(
                f,
                "refusing global {module}.{name} at byte {offset}: only plain data is allowed in a snapshot, nothing is imported or executed"
            ),
            Error::StackUnderflow { offset, opcode } => {
                write!(f, "{opcode} at byte {offset}: stack underflow")
            }
            Error::MarkMissing { offset, opcode } => {
                write!(f, "{opcode} at byte {offset}: no MARK on the stack")
            }
            Error::MemoMissing { offset, index } => {
                write!(f, "memo get of index {index} at byte {offset}: never stored")
            }
            Error::InvalidArgument {
                offset,
                opcode,
                detail,
            } => write!(f, "{opcode} at byte {offset}: {detail}"),
            Error::WrongType {
                offset,
                opcode,
                expected,
                found,
            } => write!(f, "{opcode} at byte {offset}: expected {expected}, found {found}"),
            Error::Unhashable {
                offset,
                opcode,
                kind,
            } => write!(f, "{opcode} at byte {offset}: unhashable type '{kind}'"),
            Error::LimitExceeded { offset, what } => match offset {
                Some(o) => write!(f, "limit exceeded at byte {o}: {what}"),
                None => write!(f, "limit exceeded: {what}"),
            },
            Error::ExpansionLimit {
                copied,
                budget,
                file_len,
            } => write!(
                f,
                "limit exceeded: expanding shared references copied {copied} values, the budget \
                 for a {file_len}-byte pickle ({budget}, about {} values a byte); the file \
                 repeats references far more than a memory snapshot does",
                crate::pickle::EXPANSION_PER_BYTE
            ),
            Error::NotASnapshot { reason } => write!(f, "not a memory snapshot: {reason}"),
            Error::Schema {
                path,
                message,
                offset,
            } => {
                write!(f, "bad snapshot field {path}: {message}")?;
                match offset {
                    Some(o) => write!(f, " (the trace entry's dict completed at byte {o})"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl Error {
    /// The byte of the input the error names: where decoding stopped (the
    /// opcode's offset; for a truncated file, the frame that runs past the
    /// end; for a bad trace entry, where its dict was completed), or `None`
    /// for errors about the whole input (its type, a schema field outside
    /// the trace, a copy budget, I/O).
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::UnexpectedEof { offset, .. }
            | Error::UnknownOpcode { offset, .. }
            | Error::UnsupportedOpcode { offset, .. }
            | Error::UnsupportedProtocol { offset, .. }
            | Error::ForbiddenGlobal { offset, .. }
            | Error::StackUnderflow { offset, .. }
            | Error::MarkMissing { offset, .. }
            | Error::MemoMissing { offset, .. }
            | Error::InvalidArgument { offset, .. }
            | Error::WrongType { offset, .. }
            | Error::Unhashable { offset, .. } => Some(*offset as u64),
            Error::LimitExceeded { offset, .. } => offset.map(|o| o as u64),
            Error::Schema { offset, .. } => *offset,
            Error::Truncated { frame_offset, .. } => Some(*frame_offset),
            Error::Io { .. }
            | Error::ExpansionLimit { .. }
            | Error::NotAPickle { .. }
            | Error::NotASnapshot { .. } => None,
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
