//! Write a synthetic but realistic `torch.cuda.memory._dump_snapshot` pickle.
//!
//! ```text
//! cargo run --release -p vramscope-snapshot --example gen_snapshot -- \
//!     --entries 1000000 --out /tmp/synthetic.pickle [--seed 1] [--devices 1] [--no-frames]
//! cargo run --release -p vramscope-snapshot --example gen_snapshot -- \
//!     --rewrite real.pickle --out copy.pickle      # read a snapshot and write it back
//! ```
//!
//! The trace is produced by a small caching-allocator simulation, so it is
//! self-consistent: every `free_requested`/`free_completed` pair frees a block
//! returned by an earlier `alloc` (same address and size), blocks are carved
//! out of segments announced by `segment_alloc`, freed blocks of the same
//! size are reused, and the final `segments`/`blocks` describe the blocks
//! still alive. Stacks are 30–40 frames of C++ (allocator, dispatcher,
//! autograd, CPython) and Python (`torch/nn/modules/linear.py`, ...) frames
//! drawn from a few hundred code paths, as in a real training loop.

use std::collections::HashMap;
use std::process::ExitCode;

use vramscope_snapshot::write::{write_snapshot_file, WriteOptions};
use vramscope_snapshot::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

const SITE: &str = "/opt/conda/lib/python3.12/site-packages/";

const OPS: &[(&str, &str, &str)] = &[
    ("addmm", "linear", "torch/nn/modules/linear.py"),
    ("mm", "linear", "torch/nn/modules/linear.py"),
    (
        "bmm",
        "scaled_dot_product_attention",
        "torch/nn/functional.py",
    ),
    ("_softmax", "softmax", "torch/nn/functional.py"),
    ("native_layer_norm", "layer_norm", "torch/nn/functional.py"),
    ("native_dropout", "dropout", "torch/nn/functional.py"),
    ("gelu", "gelu", "torch/nn/functional.py"),
    ("relu", "relu", "torch/nn/functional.py"),
    ("add", "__add__", "torch/_tensor.py"),
    ("mul", "__mul__", "torch/_tensor.py"),
    ("_to_copy", "to", "torch/_tensor.py"),
    ("empty_like", "zeros_like", "torch/optim/adamw.py"),
    (
        "_foreach_add",
        "_multi_tensor_adamw",
        "torch/optim/adamw.py",
    ),
    (
        "_foreach_mul",
        "_multi_tensor_adamw",
        "torch/optim/adamw.py",
    ),
    (
        "_foreach_sqrt",
        "_multi_tensor_adamw",
        "torch/optim/adamw.py",
    ),
    ("mse_loss", "mse_loss", "torch/nn/functional.py"),
    ("sum", "backward", "torch/_tensor.py"),
    ("cat", "forward", "torch/nn/modules/container.py"),
];

const MODULES: &[(&str, &str, i64)] = &[
    ("forward", "torch/nn/modules/linear.py", 125),
    ("forward", "torch/nn/modules/activation.py", 1373),
    ("forward", "torch/nn/modules/normalization.py", 217),
    ("forward", "torch/nn/modules/dropout.py", 70),
    ("forward", "torch/nn/modules/transformer.py", 934),
    ("_sa_block", "torch/nn/modules/transformer.py", 1002),
    ("_ff_block", "torch/nn/modules/transformer.py", 1018),
    ("forward", "torch/nn/modules/container.py", 250),
    ("_call_impl", "torch/nn/modules/module.py", 1762),
    ("_wrapped_call_impl", "torch/nn/modules/module.py", 1751),
    ("step", "torch/optim/adamw.py", 243),
    ("adamw", "torch/optim/adamw.py", 875),
    ("_use_grad", "torch/optim/optimizer.py", 79),
    ("wrapper", "torch/optim/optimizer.py", 485),
    ("backward", "torch/autograd/__init__.py", 353),
    ("_engine_run_backward", "torch/autograd/graph.py", 824),
];

fn cpp(name: &str, file: &str) -> (String, String, i64) {
    (name.to_owned(), file.to_owned(), 0)
}

/// Build a pool of realistic stacks (innermost frame first).
fn make_stacks(t: &mut StackTable, rng: &mut Rng, n: usize) -> Vec<StackId> {
    let alloc_prefix = [
        cpp("torch::unwind::unwind()", "??"),
        cpp("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
        cpp("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
        cpp(
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)",
            "CUDACachingAllocator.cpp",
        ),
        cpp(
            "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)",
            "",
        ),
        cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", ""),
        cpp(
            "at::detail::empty_strided_generic(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)",
            "??",
        ),
    ];
    let free_prefix = [
        cpp("torch::unwind::unwind()", "??"),
        cpp("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
        cpp("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
        cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::Block*)", "CUDACachingAllocator.cpp"),
        cpp("c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)", ""),
        cpp("c10::StorageImpl::~StorageImpl()", "??"),
        cpp("c10::TensorImpl::~TensorImpl()", "TensorImpl.cpp"),
    ];
    let runtime_suffix = [
        cpp("_PyEval_EvalFrameDefault", "??"),
        cpp("PyEval_EvalCode", "??"),
        cpp("_PyRun_SimpleFileObject", "??"),
        cpp("_PyRun_AnyFileObject", "??"),
        cpp("Py_RunMain", "??"),
        cpp("Py_BytesMain", "??"),
        cpp("__libc_start_main", "??"),
        cpp("_start", "??"),
    ];
    let mut out = Vec::with_capacity(n);
    let mut ids = Vec::new();
    for k in 0..n {
        ids.clear();
        let free = k % 3 == 2;
        let prefix = if free { &free_prefix } else { &alloc_prefix };
        let (aten, pyfn, pyfile) = *rng.pick(OPS);
        let mut frames: Vec<(String, String, i64)> = prefix.to_vec();
        if !free {
            frames.push(cpp(&format!("at::native::{aten}_out_cuda(at::Tensor const&, at::Tensor const&, at::Tensor&)"), "??"));
            frames.push(cpp(&format!("at::(anonymous namespace)::wrapper_CUDA_{aten}(at::Tensor const&, at::Tensor const&)"), "RegisterCUDA_0.cpp"));
        }
        frames.push(cpp(&format!("at::_ops::{aten}::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)"), "??"));
        frames.push(cpp(&format!("torch::autograd::VariableType::(anonymous namespace)::{aten}(c10::DispatchKeySet, at::Tensor const&)"), "VariableType_1.cpp"));
        frames.push(cpp(
            &format!("at::_ops::{aten}::call(at::Tensor const&, at::Tensor const&)"),
            "??",
        ));
        frames.push(cpp(
            &format!("torch::autograd::THPVariable_{aten}(_object*, _object*, _object*)"),
            "python_torch_functions_0.cpp",
        ));
        frames.push(cpp("PyObject_Vectorcall", "??"));
        frames.push((
            pyfn.to_owned(),
            format!("{SITE}{pyfile}"),
            100 + rng.below(2000) as i64,
        ));
        // a few module levels, each with the CPython eval frame between
        let depth = 3 + rng.below(5) as usize;
        for _ in 0..depth {
            let (f, file, line) = *rng.pick(MODULES);
            frames.push(("_PyEval_EvalFrameDefault".into(), "??".into(), 0));
            frames.push((
                f.to_owned(),
                format!("{SITE}{file}"),
                line + rng.below(3) as i64,
            ));
        }
        frames.push((
            "train_step".into(),
            "/home/user/train.py".into(),
            40 + rng.below(20) as i64,
        ));
        frames.push(("<module>".into(), "/home/user/train.py".into(), 120));
        frames.extend(runtime_suffix.iter().cloned());
        for (name, file, line) in &frames {
            ids.push(t.intern_frame(name, file, *line));
        }
        out.push(t.intern_stack(&ids));
    }
    out
}

#[derive(Clone, Copy)]
struct Blk {
    addr: u64,
    size: u64,
    requested: u64,
    live: bool,
    stack: StackId,
}

struct Seg {
    address: u64,
    total: u64,
    used: u64,
    small: bool,
    stack: StackId,
    blocks: Vec<Blk>,
}

fn generate(entries: usize, devices: usize, seed: u64, frames: bool) -> Snapshot {
    let mut rng = Rng(seed);
    let mut snap = Snapshot::default();
    let pool = if frames {
        make_stacks(&mut snap.stacks, &mut rng, 300)
    } else {
        vec![StackId::EMPTY]
    };
    let alloc_stacks: Vec<StackId> = pool
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 2)
        .map(|(_, s)| *s)
        .collect();
    let free_stacks: Vec<StackId> = pool
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 == 2)
        .map(|(_, s)| *s)
        .collect();
    let free_stacks = if free_stacks.is_empty() {
        alloc_stacks.clone()
    } else {
        free_stacks
    };
    let na = snap.stacks.intern_str("N/A");
    let empty = snap.stacks.intern_str("");
    let mut time = 1_795_288_571_178_559i64;
    let per_dev = entries / devices.max(1);
    for dev in 0..devices.max(1) {
        let mut segs: Vec<Seg> = Vec::new();
        let mut free: HashMap<(bool, u64), Vec<(usize, usize)>> = HashMap::new();
        let mut live: Vec<(usize, usize)> = Vec::new();
        let mut trace = Vec::with_capacity(per_dev + 8);
        let mut next_addr = 0x7fc0_0000_0000u64 + (dev as u64) * (1 << 40);
        let entry = |action, addr, size, frames, time: &mut i64, rng: &mut Rng| {
            *time += 1 + rng.below(200) as i64;
            TraceEntry {
                action,
                addr,
                size,
                stream: 0,
                time_us: Some(*time),
                device_free: None,
                frames,
                compile_context: Some(na),
                user_metadata: Some(empty),
            }
        };
        while trace.len() < per_dev {
            let want_alloc = live.len() < 8 || (live.len() < 4000 && rng.below(100) < 52);
            if want_alloc {
                let req = match rng.below(10) {
                    0..=3 => 512 * (1 + rng.below(64)),
                    4..=6 => 4096 * (1 + rng.below(256)),
                    7..=8 => (1 << 20) * (1 + rng.below(16)),
                    _ => (1 << 22) * (1 + rng.below(8)),
                };
                let size = req.div_ceil(512) * 512;
                let small = size <= 1 << 20;
                let stack = *rng.pick(&alloc_stacks);
                let (si, bi) = if let Some(b) = free.get_mut(&(small, size)).and_then(Vec::pop) {
                    b
                } else {
                    let fit = segs
                        .iter()
                        .rposition(|g| g.small == small && g.total - g.used >= size);
                    let si = match fit {
                        Some(si) => si,
                        None => {
                            let total = if small {
                                2 << 20
                            } else {
                                (size.div_ceil(2 << 20) * (2 << 20)).max(20 << 20)
                            };
                            let addr = next_addr;
                            next_addr += total.next_multiple_of(2 << 20);
                            trace.push(entry(
                                Action::SegmentAlloc,
                                addr,
                                total,
                                stack,
                                &mut time,
                                &mut rng,
                            ));
                            segs.push(Seg {
                                address: addr,
                                total,
                                used: 0,
                                small,
                                stack,
                                blocks: Vec::new(),
                            });
                            segs.len() - 1
                        }
                    };
                    let g = &mut segs[si];
                    let addr = g.address + g.used;
                    g.used += size;
                    g.blocks.push(Blk {
                        addr,
                        size,
                        requested: req,
                        live: false,
                        stack,
                    });
                    (si, g.blocks.len() - 1)
                };
                let b = &mut segs[si].blocks[bi];
                b.live = true;
                b.requested = req;
                b.stack = stack;
                let (addr, size) = (b.addr, b.size);
                trace.push(entry(Action::Alloc, addr, size, stack, &mut time, &mut rng));
                live.push((si, bi));
            } else {
                let k = rng.below(live.len() as u64) as usize;
                let (si, bi) = live.swap_remove(k);
                let small = segs[si].small;
                let b = &mut segs[si].blocks[bi];
                b.live = false;
                let (addr, size) = (b.addr, b.size);
                let stack = *rng.pick(&free_stacks);
                trace.push(entry(
                    Action::FreeRequested,
                    addr,
                    size,
                    stack,
                    &mut time,
                    &mut rng,
                ));
                trace.push(entry(
                    Action::FreeCompleted,
                    addr,
                    size,
                    stack,
                    &mut time,
                    &mut rng,
                ));
                free.entry((small, size)).or_default().push((si, bi));
            }
            if trace.len() % 2000 < 3 && rng.below(4) == 0 {
                let step = snap.external_annotations.len() / 2;
                for stage in ["START", "END"] {
                    snap.external_annotations.push(Annotation {
                        stage: stage.into(),
                        name: "Optimizer.step#AdamW.step".into(),
                        device: dev as i64,
                        time_us: time + step as i64,
                        other: Vec::new(),
                    });
                }
            }
        }
        for g in segs {
            let mut blocks = g.blocks.clone();
            blocks.sort_by_key(|b| b.addr);
            if g.used < g.total {
                blocks.push(Blk {
                    addr: g.address + g.used,
                    size: g.total - g.used,
                    requested: 0,
                    live: false,
                    stack: StackId::EMPTY,
                });
            }
            let mut merged: Vec<Block> = Vec::new();
            for b in blocks {
                if let Some(last) = merged.last_mut() {
                    if !b.live && last.state == BlockState::Inactive {
                        last.size += b.size;
                        continue;
                    }
                }
                merged.push(Block {
                    address: Some(b.addr),
                    size: b.size,
                    requested_size: if b.live { b.requested } else { 0 },
                    state: if b.live {
                        BlockState::ActiveAllocated
                    } else {
                        BlockState::Inactive
                    },
                    frames: if b.live { b.stack } else { StackId::EMPTY },
                    history: None,
                });
            }
            let allocated: u64 = merged
                .iter()
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size)
                .sum();
            let requested: u64 = merged
                .iter()
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.requested_size)
                .sum();
            snap.segments.push(Segment {
                device: dev as i64,
                address: g.address,
                total_size: g.total,
                allocated_size: allocated,
                active_size: allocated,
                requested_size: requested,
                stream: 0,
                segment_type: if g.small {
                    SegmentType::Small
                } else {
                    SegmentType::Large
                },
                segment_pool_id: (0, 0),
                is_expandable: false,
                frames: g.stack,
                blocks: merged,
            });
        }
        snap.device_traces.push(trace);
    }
    snap.allocator_settings = Some(AllocatorSettings {
        pytorch_cuda_alloc_conf: Some(String::new()),
        max_split_size: Some(-1),
        garbage_collection_threshold: Some(0.0),
        expandable_segments: Some(false),
        roundup_power2_divisions: Some(RoundupPower2Divisions::PerBucket(
            (0..16).map(|i| (1u64 << i, 0)).collect(),
        )),
        release_lock_on_cudamalloc: Some(false),
        pinned_num_register_threads: Some(1),
        pinned_use_cuda_host_register: Some(false),
        other: Vec::new(),
    });
    snap
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut entries, mut out, mut seed, mut devices, mut rewrite, mut frames) =
        (100_000usize, None, 1u64, 1usize, None, true);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--entries" => entries = val()?.parse().map_err(|e| format!("--entries: {e}"))?,
            "--out" => out = Some(val()?),
            "--seed" => seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--devices" => devices = val()?.parse().map_err(|e| format!("--devices: {e}"))?,
            "--rewrite" => rewrite = Some(val()?),
            "--no-frames" => frames = false,
            "-h" | "--help" => {
                println!("gen_snapshot --entries N --out FILE [--seed S] [--devices D] [--no-frames]\ngen_snapshot --rewrite IN --out FILE");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let out = out.ok_or("--out FILE is required")?;
    let snap = match rewrite {
        Some(input) => read_snapshot_file(&input).map_err(|e| e.to_string())?,
        None => generate(entries, devices, seed, frames),
    };
    write_snapshot_file(&snap, &out, &WriteOptions::default()).map_err(|e| e.to_string())?;
    let len = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "wrote {out}: {len} bytes, {} segments, {} trace entries, {} distinct stacks, {} distinct frames",
        snap.segments.len(),
        snap.trace_len(),
        snap.stacks.num_stacks(),
        snap.stacks.num_frames()
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_snapshot: {e}");
            ExitCode::FAILURE
        }
    }
}
