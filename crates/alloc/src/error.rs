//! Errors: the out-of-memory PyTorch raises, and misuse.

use std::fmt;

use crate::format::format_size;
use crate::malloc_async::AsyncOom;

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
    /// Under `backend:cudaMallocAsync`, its figures: the message is
    /// `mallocAsync`'s.
    pub malloc_async: Option<AsyncOom>,
    /// Not an out-of-memory: the CUDA error (`cudaGetErrorString`'s words)
    /// that `malloc` raised while freeing cached blocks to make room
    /// (`C10_CUDA_CHECK(cudaFree(..))` in `release_block`), PyTorch's
    /// `torch.AcceleratorError`; the figures above are the allocator's then.
    pub cuda_error: Option<&'static str>,
}

/// The lines `c10_cuda_check_implementation` (c10/cuda/CUDAException.cpp)
/// puts after "CUDA error: ..." where no device-side assertion fired.
const CUDA_CHECK_HINTS: &str = "\nCUDA kernel errors might be asynchronously reported at some other API call, \
     so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n\
     Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n";

/// `get_cuda_error_help`'s line for an error the allocator meets (c10/cuda/CUDAMiscFunctions.cpp:
/// where to look the error's `cudaGetErrorName` up; torch 2.11's libc10_cuda.so puts it between the
/// error string and the check's hints).
fn cuda_error_help(error: &str) -> Option<String> {
    let name = match error {
        "invalid argument" => "cudaErrorInvalidValue",
        _ => return None,
    };
    Some(format!(
        "Search for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information."
    ))
}

/// The link PyTorch 2.11 ends the message with.
const MEMORY_MANAGEMENT_DOCS: &str = "  See documentation for Memory Management  \
     (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";

impl OutOfMemory {
    /// The message as PyTorch 2.11 raises it where NVML answers (the GPUs
    /// of `fixtures/plan`): [`Display`](fmt::Display)'s, with
    /// `reportProcessMemoryInfo`'s "Including non-PyTorch memory, this
    /// process has ... memory in use. " after the free memory and the link
    /// to the documentation at the end (`DeviceCachingAllocator::malloc`,
    /// c10/cuda/CUDACachingAllocator.cpp). The process's memory in use,
    /// NVML's `usedGpuMemory`, is taken as total less free: the only
    /// process on the device (the H100 plan fixtures read 9 MiB under it).
    pub fn torch_message(&self) -> String {
        if let Some(e) = self.cuda_error {
            let help = cuda_error_help(e)
                .map(|h| format!("\n{h}"))
                .unwrap_or_default();
            return format!("CUDA error: {e}{help}{CUDA_CHECK_HINTS}");
        }
        if let Some(a) = &self.malloc_async {
            return a.message(self.device_total, self.device_free);
        }
        let in_use = self.device_total.saturating_sub(self.device_free);
        let mut s = String::new();
        let _ = self.write(&mut s, Some(in_use));
        s.push_str(MEMORY_MANAGEMENT_DOCS);
        s
    }

    fn write(&self, f: &mut impl fmt::Write, process_in_use: Option<u64>) -> fmt::Result {
        write!(
            f,
            "CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of {} of which {} is free. ",
            format_size(self.alloc_size),
            format_size(self.device_total),
            format_size(self.device_free)
        )?;
        if let Some(n) = process_in_use {
            write!(
                f,
                "Including non-PyTorch memory, this process has {} memory in use. ",
                format_size(n)
            )?;
        }
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

impl fmt::Display for OutOfMemory {
    /// The message of `DeviceCachingAllocator::malloc` (CUDACachingAllocator.cpp)
    /// without NVML's part on the process and the link to the documentation
    /// ([`OutOfMemory::torch_message`] has them).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = self.cuda_error {
            return write!(f, "CUDA error: {e}");
        }
        if let Some(a) = &self.malloc_async {
            return f.write_str(&a.message(self.device_total, self.device_free));
        }
        self.write(f, None)
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

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// The shape of the H100's messages in `fixtures/plan/wholecard_plan_h100.jsonl`.
    #[test]
    fn a_cuda_errors_message_is_c10s_check_with_its_help_line() {
        let e = OutOfMemory {
            alloc_size: GIB,
            device_total: 80 * GIB,
            device_free: 14 * GIB,
            allowed: None,
            allocated_bytes: 0,
            reserved_bytes: 0,
            malloc_async: None,
            cuda_error: Some("invalid argument"),
        };
        assert!(e.torch_message().starts_with(
            "CUDA error: invalid argument\nSearch for `cudaErrorInvalidValue' in \
             https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n\
             CUDA kernel errors might be asynchronously reported"
        ));
        assert_eq!(e.to_string(), "CUDA error: invalid argument");
    }

    #[test]
    fn torch_message_has_the_process_and_the_link() {
        let oom = OutOfMemory {
            alloc_size: 24 * GIB,
            device_total: 80 * GIB,
            device_free: 14 * GIB,
            allowed: None,
            allocated_bytes: 65 * GIB,
            reserved_bytes: 65 * GIB + (6 << 20),
            malloc_async: None,
            cuda_error: None,
        };
        let short = oom.to_string();
        let full = oom.torch_message();
        assert_eq!(
            full,
            "CUDA out of memory. Tried to allocate 24.00 GiB. GPU 0 has a total capacity of \
             80.00 GiB of which 14.00 GiB is free. Including non-PyTorch memory, this process \
             has 66.00 GiB memory in use. Of the allocated memory 65.00 GiB is allocated by \
             PyTorch, and 6.00 MiB is reserved by PyTorch but unallocated. If reserved but \
             unallocated memory is large try setting \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
             documentation for Memory Management  \
             (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
        );
        // the short form is the same without NVML's part and the link
        assert_eq!(
            short,
            full.replace(
                "Including non-PyTorch memory, this process has 66.00 GiB memory in use. ",
                ""
            )
            .replace(MEMORY_MANAGEMENT_DOCS, "")
        );
    }
}
