//! Element types and devices.

use std::fmt;

/// A tensor element type (`torch.dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `torch.float32`
    F32,
    /// `torch.float16`
    F16,
    /// `torch.bfloat16`
    BF16,
    /// `torch.float64`
    F64,
    /// `torch.int64`
    I64,
    /// `torch.int32`
    I32,
    /// `torch.uint8`
    U8,
    /// `torch.bool`
    Bool,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }
    /// Whether this is a floating-point type (can require grad).
    pub const fn is_floating(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }
    /// The accumulation type CUDA kernels use (`at::acc_type<T, true>`).
    pub const fn acc_type(self) -> DType {
        match self {
            DType::F16 | DType::BF16 | DType::F32 => DType::F32,
            DType::F64 => DType::F64,
            DType::Bool | DType::U8 | DType::I32 | DType::I64 => DType::I64,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        };
        f.write_str(s)
    }
}

/// Where a tensor lives. Only CUDA tensors take memory from the allocator
/// twin; CPU tensors (the optimizer's `step` counters, Python scalars
/// wrapped as tensors) are tracked for their shape only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// host memory
    Cpu,
    /// the simulated GPU
    Cuda,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        })
    }
}
