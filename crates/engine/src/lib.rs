//! # vramscope-engine — the eager twin
//!
//! This crate owns the simulation of PyTorch 2.11 *eager execution* over
//! meta tensors: tensors that carry shape, dtype, strides and device but no
//! data, whose every CUDA allocation goes through the allocator twin
//! ([`vramscope_alloc::CachingAllocator`]). It reproduces:
//!
//! - storage sharing by views and freeing at the last reference — a
//!   [`Tensor`] is a reference-counted handle, so a temporary in
//!   `(&x + 1.0) * (2.0 * &y)` is freed exactly where CPython frees it;
//! - in-place ops and version counters, `requires_grad`, leaves, `no_grad`
//!   and `inference_mode`;
//! - the autograd graph with exactly the tensors each op saves
//!   (`derivatives.yaml`), custom `autograd.Function`s, and the backward
//!   engine: execution order, input buffers, `AccumulateGrad`,
//!   `retain_graph`, and the autograd device thread's own cuBLAS workspace;
//! - the allocations inside kernels that matter: cuBLAS/cuBLASLt workspaces
//!   (sized per GPU architecture and torch version, [`DeviceProfile`]),
//!   reduction scratch, attention workspaces;
//! - `torch.autocast` ([`autocast`]: the per-op cast policies and the
//!   weight-cast cache) and saved-tensor hooks with non-reentrant activation
//!   checkpointing ([`checkpoint`]: holders, recomputation, early stop);
//! - reference modules ([`nn`]) and optimizers ([`optim`]);
//! - the seed experiments, byte for byte (`demo`, under the `demo` feature).
//! - the consumer side of the memory-event seam ([`RuntimeSink`]): a
//!   front door outside the eager twin (a captured PyTorch program) drives
//!   the same process through [`vramscope_events::Event`]s.
//!
//! It does no I/O.

#![deny(missing_docs)]

pub mod autocast;
pub mod autograd;
pub mod checkpoint;
#[cfg(feature = "demo")]
pub mod demo;
mod dims;
mod dtype;
mod error;
mod fastmap;
pub mod function;
pub mod gpus;
pub mod nn;
mod ops;
pub mod optim;
mod overload;
pub mod plans;
mod runtime;
mod scratch;
mod sink;
mod tensor;

pub use autocast::{AutocastConfig, CastPolicy};
pub use autograd::{BackwardOptions, GradHook, Node, Packed, SavedTensorHooks};
pub use dims::{Dims, MAX_DIMS};
pub use dtype::{DType, Device};
pub use error::{EngineError, Result};
pub use gpus::{gpu, GpuSpec, Grade, Grades, Provenance, SdpaSupport, GPUS};
pub use ops::attention::{cudnn_fwd_workspace, CudnnFwdShape, SdpaArgs, SdpaBackend};
pub use ops::conv::{
    cudnn_conv_nearest_workspace, cudnn_conv_problem_workspace, cudnn_conv_workspace, Conv2dArgs,
    ConvOp, ConvProblem, Likeness, NearestConv,
};
pub use ops::nn::{EmbeddingPath, SegmentBuffer, SegmentProblem};
pub use ops::reduce::ReduceScratch;
pub use ops::Scalar;
pub use runtime::{
    blas_workspace_sizes, AllocRecord, AllocatorCopy, At, BlasHandleBytes, BlasWorkspaces,
    Category, DeviceProfile, EventLog, HostEvent, LogPeak, MemEvent, MemoryFigures, Runtime,
    RuntimeConfig, Thread,
};
pub use scratch::{PathSwitch, ScratchRule};
pub use sink::{intern, RuntimeSink};
pub use tensor::Tensor;
