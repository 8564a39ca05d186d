//! NCCL's device memory outside the caching allocator (its communicator's
//! buffers, its collectives' first use), taken through the driver as the
//! cuBLAS handles are. Measured with `cudaMemGetInfo` on H200s (NCCL 2.28.9,
//! PyTorch 2.11; `fixtures/multi/README.md`) as `total - free - reserved`
//! phase by phase, the same on every rank and over 2 and 4 ranks.

use vramscope_engine::Runtime;

use crate::error::Result;

/// After `init_process_group(device_id=...)`: 456.0625 MiB over the
/// context the twin takes.
const INIT: u64 = (456 << 20) + (1 << 16);
/// FSDP's first forward: 382 MiB beyond cuBLAS's first handle (its first
/// all-gathers).
const FSDP_FIRST_FORWARD: u64 = 382 << 20;
/// DDP's construction (its first all-gather and broadcasts): 478 MiB, of
/// which 92 the first cuBLAS handle does not take again (its first forward
/// adds 66 MiB where FSDP's adds 158 + 382).
const DDP_CONSTRUCTION: u64 = 386 << 20;
const DDP_AHEAD_OF_BLAS: u64 = 92 << 20;
/// The first backward: 2 MiB beyond the autograd thread's handle, and 2
/// more with its 16-bit share (16-bit gradients, autocast, a 16-bit base
/// under float32 adapters, ViT's convolution: 76 MiB in all where a single
/// GPU's first backward takes 72). Measured by the end of the first
/// backward also where it reduces nothing (the first micro-batch under
/// `no_sync()` or `set_requires_gradient_sync(False)`), so not the first
/// collective's.
const FIRST_BACKWARD: (u64, u64) = (2 << 20, 2 << 20);
/// The world sizes those were measured at.
const MEASURED_WORLDS: [i64; 2] = [2, 4];

/// `init_process_group`: the communicator; at a world size not measured,
/// the twin takes the measured bytes and names them.
pub(crate) fn init_process_group(rt: &Runtime, world: i64) -> Result<()> {
    rt.driver_outside("nccl_init", INIT)?;
    if !MEASURED_WORLDS.contains(&world) {
        rt.note_unmeasured_size(format!(
            "NCCL's memory outside the allocator over {world} ranks: taken as measured over 2 \
             and 4, the same ({} MiB at init, {} MiB more by the first backward)",
            INIT >> 20,
            (FSDP_FIRST_FORWARD + FIRST_BACKWARD.0 + FIRST_BACKWARD.1) >> 20
        ));
    }
    Ok(())
}

/// FSDP's first all-gather.
pub(crate) fn fsdp_first_all_gather(rt: &Runtime) -> Result<()> {
    Ok(rt.driver_outside("nccl_all_gather", FSDP_FIRST_FORWARD)?)
}

/// DDP's first collectives, in its constructor.
pub(crate) fn ddp_construction(rt: &Runtime) -> Result<()> {
    rt.driver_outside("nccl_ddp_init", DDP_CONSTRUCTION)?;
    Ok(rt.driver_outside_ahead_of_blas("nccl_ddp_init", DDP_AHEAD_OF_BLAS)?)
}

/// The first backward (FSDP's first `post_backward`, DDP's first gradient
/// hook), whether it reduces or not.
pub(crate) fn first_backward(rt: &Runtime) -> Result<()> {
    rt.driver_outside("nccl_first_backward", FIRST_BACKWARD.0)?;
    Ok(rt.driver_outside_with_autograd_16bit("nccl_first_backward", FIRST_BACKWARD.1)?)
}
