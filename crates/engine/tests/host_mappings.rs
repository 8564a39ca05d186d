//! CPU tensors in the process's address space (`vramscope_alloc`'s
//! `driver_va.rs`, rule 7): glibc maps a tensor from its threshold up
//! (`HostHeap`) below the CUDA context, where `cudaMalloc`'s chunks go too,
//! and a tensor's free gives its range back.

use vramscope_engine::{DType, Device, Runtime, RuntimeConfig};

const MIB: i64 = 1 << 20;

fn fresh() -> Runtime {
    Runtime::new(RuntimeConfig {
        fresh_process: true,
        ..RuntimeConfig::default()
    })
}

/// The address of a 100 MiB segment made after `cpu` CPU tensors of
/// `bytes` each (still alive).
fn segment_after(cpu: usize, bytes: i64) -> u64 {
    let rt = fresh();
    let tensors: Vec<_> = (0..cpu)
        .map(|_| rt.empty(&[bytes], DType::U8, Device::Cpu).unwrap())
        .collect();
    let t = rt.empty(&[100 * MIB], DType::U8, Device::Cuda).unwrap();
    let addr = t.data_ptr().unwrap();
    drop(tensors);
    addr
}

#[test]
fn a_mapped_cpu_tensor_moves_the_next_chunk_down() {
    let none = segment_after(0, 0);
    // 1 MiB tensors stay in glibc's heap: the chunk does not move
    assert_eq!(segment_after(3, MIB), none);
    // three 40 MiB tensors (mapped, 40 MiB + 4 KiB each) lie below the
    // context: the chunk goes below them, 32 MiB aligned, four chunks lower
    assert_eq!(segment_after(3, 40 * MIB), none - 4 * 32 * MIB as u64);
}

#[test]
fn a_freed_cpu_tensor_gives_its_range_to_a_chunk_that_fits() {
    let rt = fresh();
    let a = rt.empty(&[200 * MIB], DType::U8, Device::Cpu).unwrap();
    let b = rt.empty(&[8 * MIB], DType::U8, Device::Cpu).unwrap();
    let low = rt.empty(&[100 * MIB], DType::U8, Device::Cuda).unwrap();
    // `a`'s 200 MiB range freed: a 100 MiB segment's chunk (128 MiB) fits
    // with 32 MiB to spare, at the range's aligned top, above `low`
    drop(a);
    let high = rt.empty(&[100 * MIB], DType::U8, Device::Cuda).unwrap();
    assert!(high.data_ptr().unwrap() > low.data_ptr().unwrap());
    assert_eq!(high.data_ptr().unwrap() % (32 * MIB as u64), 0);
    // `b` freed too: its 8 MiB joins `a`'s remainder above `high`, still
    // no room for another 128 MiB chunk there
    drop(b);
    let next = rt.empty(&[100 * MIB], DType::U8, Device::Cuda).unwrap();
    assert!(next.data_ptr().unwrap() < low.data_ptr().unwrap());
}
