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

/// The address, from the anchor B, of a 300 MiB segment made once a
/// 700 MiB CPU tensor made before the context (driver rule 11) is freed,
/// after the first `pow` launch when `pow` is set.
fn segment_after_a_host_built_tensor(pow: bool) -> i64 {
    segment_after_modules(if pow { &["pow", "pow", "cos"] } else { &[] })
}

/// As [`segment_after_a_host_built_tensor`], after kernels of `modules`.
fn segment_after_modules(modules: &[&str]) -> i64 {
    let rt = fresh();
    let (host, len) = rt.host_before_context(700 * MIB as u64, None).unwrap();
    // its copy: a 704 MiB chunk below the context, at B-1120
    let copy = rt.empty(&[700 * MIB], DType::U8, Device::Cuda).unwrap();
    let anchor = copy.data_ptr().unwrap() as i64 + 1120 * MIB;
    assert_eq!(host as i64 - anchor, 246 * MIB);
    rt.host_unmapped(host, len);
    // a module loads once; one the twin does not know maps nothing
    for m in modules {
        rt.kernel_module(m);
    }
    let t = rt.empty(&[300 * MIB], DType::U8, Device::Cuda).unwrap();
    (t.data_ptr().unwrap() as i64 - anchor) / MIB
}

#[test]
fn pow_s_kernel_module_takes_the_top_of_the_freed_range() {
    // the freed range B+246..B+946: a 320 MiB chunk at its aligned top
    assert_eq!(segment_after_a_host_built_tensor(false), 608);
    // pow's module (rule 12): 38.53 MiB mapped at the range's top
    // (blind4/d01 on the H200, B+409.47..B+448), the chunk one lower
    assert_eq!(segment_after_a_host_built_tensor(true), 576);
}

#[test]
fn masked_fill_s_kernel_module_maps_below_pow_s() {
    // masked_fill's module (rule 12): 38,076,416 bytes, blind31/ae01's 36.31
    // MiB mapping; alone, the chunk as under pow's
    assert_eq!(segment_after_modules(&["masked_fill"]), 576);
    // both (blind34/ah05 maps the two): 74.84 MiB at the range's top, the
    // 320 MiB chunk at the aligned address below them
    assert_eq!(segment_after_modules(&["pow", "masked_fill"]), 544);
}
