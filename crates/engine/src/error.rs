//! Typed errors of the eager twin.

use std::fmt;

use crate::dims::Dims;

/// Everything that can go wrong while simulating a workload. Like PyTorch,
/// the twin refuses what PyTorch refuses (shape mismatches, backward through
/// a freed graph, in-place modification of a saved tensor) and reports an
/// out-of-memory exactly where the caching allocator would raise it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EngineError {
    /// `torch.OutOfMemoryError`: the allocator twin could not satisfy a request.
    OutOfMemory {
        /// the op that asked
        op: &'static str,
        /// requested bytes
        bytes: u64,
        /// the allocator's account of the failure
        detail: String,
    },
    /// Shapes that the op cannot combine.
    Shape {
        /// the op
        op: &'static str,
        /// what was wrong, with the shapes
        detail: String,
    },
    /// Tensors on different devices or of the wrong dtype.
    Mismatch {
        /// the op
        op: &'static str,
        /// what was wrong
        detail: String,
    },
    /// `element 0 of tensors does not require grad and does not have a grad_fn`.
    NoGradFn,
    /// `Trying to backward through the graph a second time`.
    GraphFreed {
        /// the node whose saved tensors were already freed
        node: &'static str,
    },
    /// `one of the variables needed for gradient computation has been modified by an inplace operation`.
    SavedTensorModified {
        /// the node that saved it
        node: &'static str,
        /// version when saved
        saved: u32,
        /// version now
        now: u32,
    },
    /// `a leaf Variable that requires grad is being used in an in-place operation`.
    LeafInPlace {
        /// the op
        op: &'static str,
    },
    /// `grad can be implicitly created only for scalar outputs`.
    NonScalarBackward {
        /// the root's shape
        shape: Dims,
    },
    /// Something the twin does not model (yet); never silently approximated.
    Unsupported {
        /// what
        what: String,
    },
    /// A demo case name that does not exist.
    UnknownCase(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::OutOfMemory { op, bytes, detail } => {
                write!(f, "CUDA out of memory in {op} (tried to allocate {bytes} bytes): {detail}")
            }
            EngineError::Shape { op, detail } => write!(f, "{op}: shape error: {detail}"),
            EngineError::Mismatch { op, detail } => write!(f, "{op}: {detail}"),
            EngineError::NoGradFn => f.write_str(
                "element 0 of tensors does not require grad and does not have a grad_fn",
            ),
            EngineError::GraphFreed { node } => write!(
                f,
                "Trying to backward through the graph a second time ({node}'s saved tensors were freed); \
                 specify retain_graph=True"
            ),
            EngineError::SavedTensorModified { node, saved, now } => write!(
                f,
                "one of the variables needed for gradient computation has been modified by an inplace \
                 operation: saved by {node} at version {saved}, now at version {now}"
            ),
            EngineError::LeafInPlace { op } => write!(
                f,
                "a leaf Variable that requires grad is being used in an in-place operation ({op})"
            ),
            EngineError::NonScalarBackward { shape } => {
                write!(f, "grad can be implicitly created only for scalar outputs (got shape {shape:?})")
            }
            EngineError::Unsupported { what } => write!(f, "not modelled by the eager twin: {what}"),
            EngineError::UnknownCase(c) => write!(f, "unknown demo case {c:?}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// Result alias of the crate.
pub type Result<T> = std::result::Result<T, EngineError>;

pub(crate) fn shape_err(op: &'static str, detail: impl Into<String>) -> EngineError {
    EngineError::Shape {
        op,
        detail: detail.into(),
    }
}
