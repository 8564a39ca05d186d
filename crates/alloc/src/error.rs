//! Errors: the out-of-memory PyTorch raises, and misuse.

use std::fmt;

use crate::format::format_size;

/// `torch.OutOfMemoryError`, with the figures PyTorch prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The segment size that could not be obtained (`alloc_size`).
    pub alloc_size: u64,
    /// The GPU's total capacity (`cudaMemGetInfo`).
    pub device_total: u64,
    /// Its free memory at the time.
    pub device_free: u64,
    /// The limit of `set_per_process_memory_fraction`, when set.
    pub allowed: Option<u64>,
    /// Bytes allocated by PyTorch.
    pub allocated_bytes: u64,
    /// Bytes reserved by PyTorch.
    pub reserved_bytes: u64,
}

impl fmt::Display for OutOfMemory {
    /// The message of `DeviceCachingAllocator::malloc` (CUDACachingAllocator.cpp).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of {} of which {} is free. ",
            format_size(self.alloc_size),
            format_size(self.device_total),
            format_size(self.device_free)
        )?;
        if let Some(a) = self.allowed {
            write!(f, "{} allowed; ", format_size(a))?;
        }
        write!(
            f,
            "Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated. \
             If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
             to avoid fragmentation.",
            format_size(self.allocated_bytes),
            format_size(self.reserved_bytes.saturating_sub(self.allocated_bytes))
        )
    }
}

impl std::error::Error for OutOfMemory {}

/// Misuse of the allocator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// `free` or `record_stream` of an address that is not allocated
    /// (PyTorch: "invalid device pointer").
    InvalidPointer(u64),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::InvalidPointer(p) => write!(f, "invalid device pointer: {p:#x}"),
        }
    }
}

impl std::error::Error for AllocError {}
