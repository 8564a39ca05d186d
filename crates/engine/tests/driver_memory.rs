//! The device memory the CUDA driver takes outside the allocator for cuBLAS
//! handles (`DeviceProfile::blas_handle_bytes`), as `torch.cuda.mem_get_info()`
//! shows it: measured on the H100 (`fixtures/plan/wholecard_plan_h100.jsonl`,
//! `total - free - reserved`: 528.8125 MiB after loading, then +166 MiB at the
//! first forward's matmuls in bf16, +158 MiB in fp32, and +72 / +64 MiB at
//! the first backward's, on the autograd thread).

use vramscope_engine::{BackwardOptions, DType, Device, Runtime};

const MIB: u64 = 1 << 20;

/// `total - free - reserved`, the bytes held outside the allocator.
fn outside(rt: &Runtime) -> u64 {
    let (free, total) = rt.mem_get_info();
    total - free - rt.memory_reserved() as u64
}

fn check(dtype: DType, first: u64, later: u64) {
    let rt = Runtime::default();
    assert_eq!(outside(&rt), 554_500_096, "the fresh context, 528.8125 MiB");
    let w = rt.randn(&[256, 256], dtype, Device::Cuda).unwrap();
    w.requires_grad_(true).unwrap();
    let x = rt.randn(&[64, 256], dtype, Device::Cuda).unwrap();
    let y = x.mm(&w).unwrap();
    assert_eq!(
        outside(&rt),
        554_500_096 + first * MIB,
        "{dtype:?}: the first handle"
    );
    // another matmul on the same thread creates no handle
    let z = y.mm(&w).unwrap();
    assert_eq!(outside(&rt), 554_500_096 + first * MIB);
    let loss = z.sum().unwrap();
    loss.backward_with(None, BackwardOptions::default())
        .unwrap();
    assert_eq!(
        outside(&rt),
        554_500_096 + (first + later) * MIB,
        "{dtype:?}: the autograd thread's handle"
    );
    // the handles outlive their workspaces
    rt.clear_cublas_workspaces();
    let _ = y.mm(&w).unwrap();
    assert_eq!(outside(&rt), 554_500_096 + (first + later) * MIB);
}

#[test]
fn cublas_handles_take_the_measured_device_memory() {
    check(DType::BF16, 166, 72);
    check(DType::F32, 158, 64);
}

/// Llama's first matmul is its rotary embedding's, in fp32: the handle
/// comes then, the 16-bit kernels' share with the first bf16 matmul.
#[test]
fn the_16bit_kernels_share_comes_with_the_first_16bit_matmul() {
    let rt = Runtime::default();
    let f = rt.randn(&[8, 8], DType::F32, Device::Cuda).unwrap();
    let _ = f.mm(&f).unwrap();
    assert_eq!(outside(&rt), 554_500_096 + 158 * MIB);
    let b = rt.randn(&[8, 8], DType::BF16, Device::Cuda).unwrap();
    let _ = b.mm(&b).unwrap();
    assert_eq!(outside(&rt), 554_500_096 + 166 * MIB);
    let _ = f.mm(&f).unwrap();
    let _ = b.mm(&b).unwrap();
    assert_eq!(outside(&rt), 554_500_096 + 166 * MIB);
}

/// Bytes that come with the autograd thread's 16-bit share
/// (`Runtime::driver_outside_with_autograd_16bit`, NCCL's under FSDP2 and
/// DDP): waiting until that thread's first 16-bit matmul, not taken by a
/// float32 backward nor by the main thread's 16-bit share, taken at once
/// when the share is already there.
#[test]
fn bytes_with_the_autograd_threads_16bit_share_wait_for_it() {
    let backward = |rt: &Runtime, dtype: DType| {
        let w = rt.randn(&[8, 8], dtype, Device::Cuda).unwrap();
        w.requires_grad_(true).unwrap();
        let x = rt.randn(&[8, 8], dtype, Device::Cuda).unwrap();
        let loss = x.mm(&w).unwrap().sum().unwrap();
        loss.backward_with(None, BackwardOptions::default())
            .unwrap();
    };
    let rt = Runtime::default();
    rt.driver_outside_with_autograd_16bit("test", 2 * MIB)
        .unwrap();
    let b = rt.randn(&[8, 8], DType::BF16, Device::Cuda).unwrap();
    let _ = b.mm(&b).unwrap();
    assert_eq!(
        outside(&rt),
        554_500_096 + 166 * MIB,
        "the main thread's share"
    );
    backward(&rt, DType::F32);
    assert_eq!(
        outside(&rt),
        554_500_096 + (166 + 64) * MIB,
        "a float32 backward"
    );
    backward(&rt, DType::BF16);
    assert_eq!(
        outside(&rt),
        554_500_096 + (166 + 72 + 2) * MIB,
        "the autograd thread's"
    );
    rt.driver_outside_with_autograd_16bit("test", 2 * MIB)
        .unwrap();
    assert_eq!(
        outside(&rt),
        554_500_096 + (166 + 72 + 4) * MIB,
        "at once after it"
    );
}
