//! # vramscope-events — the one seam between workloads and the twin
//!
//! Every front door (a Hugging Face family run on the eager twin, a PyTorch
//! program captured by `vramscope run`, a recorded snapshot) describes what
//! it does to GPU memory as a stream of [`Event`]s; every consumer (the
//! allocator twin, the timeline, the reports, the planner) reads that
//! stream through a [`Sink`], without knowing who produced it.
//!
//! An event says what was asked of the caching allocator (`malloc` of some
//! bytes on a stream, `free` of an earlier one) and why (its [`Category`]
//! and [`Site`]); the library work outside the allocator that decides a
//! whole-card verdict (a cuBLAS handle's driver memory) is an event too.
//! The crate holds no I/O and no dependencies.

#![deny(missing_docs)]

use std::fmt;
use std::str::FromStr;

/// A CUDA stream as PyTorch records it (`cudaStream_t` value; 0 is the
/// default stream).
pub type StreamId = u64;

/// Why an allocation exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// an `nn.Parameter`
    Parameter,
    /// a module buffer
    Buffer,
    /// a `.grad` (or a gradient flowing through backward)
    Gradient,
    /// optimizer state (`exp_avg`, `momentum_buffer`, ...)
    OptimizerState,
    /// a tensor an autograd node keeps for backward
    SavedForBackward,
    /// the result of an op, held by the program
    Output,
    /// a temporary inside an op or formula
    Temporary,
    /// library scratch: cuBLAS/cuBLASLt workspaces, reduction buffers
    Workspace,
    /// data the program created as input
    Input,
    /// a collective's buffer: FSDP's all-gather and reduce-scatter buffers,
    /// DDP's gradient buckets
    Communication,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 10] = [
        Category::Parameter,
        Category::Buffer,
        Category::Gradient,
        Category::OptimizerState,
        Category::SavedForBackward,
        Category::Output,
        Category::Temporary,
        Category::Workspace,
        Category::Input,
        Category::Communication,
    ];

    /// The name reports and the JSON schema use (`optimizer_state`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Buffer => "buffer",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::SavedForBackward => "saved_for_backward",
            Category::Output => "output",
            Category::Temporary => "temporary",
            Category::Workspace => "workspace",
            Category::Input => "input",
            Category::Communication => "communication",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A category name that is not one of [`Category::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCategory(pub String);

impl fmt::Display for UnknownCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown category {:?}; expected one of ", self.0)?;
        for (i, c) in Category::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(c.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownCategory {}

impl FromStr for Category {
    type Err = UnknownCategory;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Category::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCategory(s.to_string()))
    }
}

/// Where an allocation was made: the ATen op (or library call) and the
/// module path that was running (`""` at top level).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Site {
    /// `aten::mm`, `getCUDABlasLtWorkspace`, ...
    pub op: String,
    /// `model.layers.3.self_attn`
    pub module: String,
    /// `file.py:123 in forward`: the innermost frame of Python code outside
    /// torch that made it (`""` where none is known)
    pub source: String,
}

/// The host thread a library call runs on: cuBLAS keeps one handle (and
/// one workspace per stream) per thread, and the autograd engine runs
/// backward on a device thread of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostThread {
    /// the thread running the Python program
    Main,
    /// the autograd engine's device thread
    Autograd,
}

impl FromStr for HostThread {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "main" => Ok(HostThread::Main),
            "autograd" => Ok(HostThread::Autograd),
            _ => Err(format!(
                "unknown thread {s:?}; expected \"main\" or \"autograd\""
            )),
        }
    }
}

/// One thing a workload did to GPU memory.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `malloc` through the caching allocator; `id` names it for [`Event::Free`]
    Alloc {
        /// the producer's name for this allocation (unique while live)
        id: u64,
        /// bytes requested
        bytes: u64,
        /// the stream it is allocated on
        stream: StreamId,
        /// why it exists
        category: Category,
        /// who asked
        site: Site,
    },
    /// the allocation `id` is freed
    Free {
        /// the [`Event::Alloc`]'s id
        id: u64,
    },
    /// the allocation `id` changed role (e.g. became a parameter)
    Recategorize {
        /// the [`Event::Alloc`]'s id
        id: u64,
        /// its new category
        category: Category,
    },
    /// a cuBLAS call on (`thread`, `handle`, `stream`): the handle's driver
    /// memory and workspace on first use, the cuBLASLt workspace too when `lt`
    Blas {
        /// the host thread
        thread: HostThread,
        /// the cuBLAS handle: 0 for `thread`'s own, n > 0 for the n-th handle
        /// the program's own threads reserved (each host thread takes one of
        /// its own from PyTorch's handle pool, CublasHandlePool.cpp)
        handle: u32,
        /// the stream
        stream: StreamId,
        /// the operands' dtype is 16-bit (the driver loads 16-bit kernels)
        half: bool,
        /// the `gemm_and_bias` (cuBLASLt) path
        lt: bool,
        /// the op that called it
        op: String,
        /// the program's line that called it (`file.py:12 in step`; `""`
        /// where unknown): a workspace made here is filed under it
        source: String,
    },
    /// `Tensor.record_stream(stream)`: the allocation `id` is used on
    /// `stream` too, so when freed its block waits for that stream's work
    /// (`CUDACachingAllocator::recordStream`)
    RecordStream {
        /// the [`Event::Alloc`]'s id
        id: u64,
        /// the stream that uses it
        stream: StreamId,
    },
    /// a phase of the workload ends here (`reset_peak_memory_stats()`, a
    /// named marker)
    Phase {
        /// the phase's name
        name: String,
    },
}

/// A consumer of the event stream.
pub trait Sink {
    /// What a consumer answers when the GPU would fail the event (out of
    /// memory).
    type Error;

    /// Take one event, in order.
    fn event(&mut self, e: &Event) -> Result<(), Self::Error>;
}

/// A sink that keeps every event (for reports that read the stream after
/// the run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorder {
    /// the events, in order
    pub events: Vec<Event>,
}

impl Sink for Recorder {
    type Error = std::convert::Infallible;

    fn event(&mut self, e: &Event) -> Result<(), Self::Error> {
        self.events.push(e.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_names_round_trip() {
        for c in Category::ALL {
            assert_eq!(c.name().parse::<Category>(), Ok(c));
            assert_eq!(c.to_string(), c.name());
        }
    }

    #[test]
    fn an_unknown_category_names_the_accepted_ones() {
        let e = "weights".parse::<Category>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("unknown category \"weights\"; expected one of parameter, "));
        assert!(msg.ends_with("workspace, input, communication"));
    }

    #[test]
    fn threads_parse_and_refuse() {
        assert_eq!("main".parse::<HostThread>(), Ok(HostThread::Main));
        assert_eq!("autograd".parse::<HostThread>(), Ok(HostThread::Autograd));
        assert!("worker"
            .parse::<HostThread>()
            .unwrap_err()
            .contains("\"worker\""));
    }

    #[test]
    fn the_recorder_keeps_the_order() {
        let mut r = Recorder::default();
        let a = Event::Alloc {
            id: 1,
            bytes: 512,
            stream: 0,
            category: Category::Output,
            site: Site::default(),
        };
        r.event(&a).unwrap();
        r.event(&Event::Free { id: 1 }).unwrap();
        assert_eq!(r.events, vec![a, Event::Free { id: 1 }]);
    }
}
