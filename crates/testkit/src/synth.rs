//! Synthetic but realistic snapshots of any size, for tests and benchmarks.
//!
//! [`generate`] trains a small transformer on paper: parameters moved to
//! the GPU (`Module.to`), then steps of forward (activations saved for
//! backward, temporaries freed at once), backward (saved activations freed,
//! gradients allocated under the autograd engine), an AdamW step inside an
//! `Optimizer.step` annotation (state allocated on the first step,
//! `_foreach` temporaries) and `zero_grad(set_to_none=True)`. The sequence
//! length changes from step to step and `empty_cache()` runs now and then,
//! so blocks are split, merged, reused and segments released.
//!
//! Every `malloc` and `free` goes through the allocator twin
//! ([`vramscope_alloc::CachingAllocator`], PyTorch 2.11's caching allocator
//! rule for rule) with history recording on, and the trace is the twin's
//! own: each `alloc` lies in a segment created before it, each free
//! matches an earlier `alloc` (same address, requested size), and the final
//! `segments` are the twin's `snapshot()`. So a synthetic snapshot replays
//! exactly and its peaks are the twin's `memory_stats()` peaks, returned in
//! [`Synthetic::peaks`].
//!
//! Stacks look like `_record_memory_history(stacks="all")`'s: the
//! allocator's C++ frames, the ATen operator and its autograd / Python
//! binding frames, and the Python frames (`torch/nn/modules/*.py`,
//! `torch/autograd`, `torch/optim/adamw.py`, the user's `model.py` and
//! `train.py`) with CPython's eval frames between them: 30 to 50 frames.

use std::collections::HashMap;

use vramscope_alloc::{AllocatorConfig, CachingAllocator, TraceAction};

use vramscope_snapshot::model::*;
use vramscope_snapshot::{Trace, TraceEntry};

/// What to generate.
#[derive(Debug, Clone)]
pub struct Options {
    /// About how many trace entries in all (split evenly over the devices;
    /// the last training step is finished, so a few hundred more).
    pub entries: usize,
    /// Devices.
    pub devices: usize,
    /// Random seed.
    pub seed: u64,
    /// Record stacks (`false`: every `frames` list is empty).
    pub frames: bool,
    /// `PYTORCH_CUDA_ALLOC_CONF` of the run (e.g. `expandable_segments:True`).
    pub conf: String,
    /// `_record_memory_history(max_entries=N)`: each device's trace keeps
    /// only its last N entries (a wrapped ring buffer, so the trace starts
    /// in the middle of the run); `None` keeps them all.
    pub max_entries: Option<usize>,
    /// CUDA streams used (at least 1): with 2, the next batch is prefetched
    /// on a side stream; with 3 or more, gradients are also bucketed on a
    /// communication stream during backward, as DDP does.
    pub streams: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            entries: 100_000,
            devices: 1,
            seed: 1,
            frames: true,
            conf: String::new(),
            max_entries: None,
            streams: 1,
        }
    }
}

/// A generated snapshot and the allocator twin's peaks for it.
#[derive(Debug, Clone)]
pub struct Synthetic {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Per device, `memory_stats()` peaks of the run:
    /// (`allocated_bytes.all.peak`, `active_bytes.all.peak`,
    /// `reserved_bytes.all.peak`).
    pub peaks: Vec<(u64, u64, u64)>,
}

/// Generate a snapshot. Fails only when `conf` is not a valid
/// `PYTORCH_CUDA_ALLOC_CONF`.
pub fn generate(opts: &Options) -> Result<Synthetic, String> {
    let cfg = AllocatorConfig::parse(&opts.conf).map_err(|e| e.to_string())?;
    let mut snap = Snapshot::default();
    let mut peaks = Vec::new();
    let devices = opts.devices.max(1);
    let mut time = 1_795_288_571_178_559i64;
    for dev in 0..devices {
        let mut g = Gen::new(
            &mut snap,
            cfg.clone(),
            opts.seed.wrapping_add(dev as u64 * 0x1000_0001),
            opts.frames,
            time,
        );
        g.streams = (0..opts.streams.max(1) as u64)
            .map(|i| if i == 0 { 0 } else { SIDE_STREAM + i * 0x3a0 })
            .collect();
        let model = Model::pick(&mut g.rng);
        g.run(&model, opts.entries / devices, dev as i64);
        time = g.time;
        let st = g.alloc.stats();
        peaks.push((
            st.allocated_bytes.all().peak as u64,
            st.active_bytes().all().peak as u64,
            st.reserved_bytes.all().peak as u64,
        ));
        let (mut trace, segments) = g.finish(dev as i64);
        if let Some(max) = opts.max_entries {
            // The ring buffer keeps the newest `max` entries, oldest first
            // (CUDACachingAllocator.cpp's RingBuffer::getEntries).
            trace.drop_front(trace.len().saturating_sub(max));
        }
        snap.segments.extend(segments);
        snap.device_traces.push(trace);
    }
    snap.allocator_settings = Some(AllocatorSettings::from_config(&opts.conf, &cfg));
    Ok(Synthetic {
        snapshot: snap,
        peaks,
    })
}

/// A side stream's `cudaStream_t` as a snapshot prints it (a host
/// pointer; the default stream is 0).
const SIDE_STREAM: u64 = 0x55d4_8e3f_1a40;

/// SplitMix64, seeded by its field: the synthetic snapshots' and the
/// reader's fuzz-style tests' deterministic randomness.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

/// The model being trained (fp32).
struct Model {
    layers: usize,
    hidden: u64,
    heads: u64,
    vocab: u64,
    batch: u64,
}

impl Model {
    fn pick(rng: &mut Rng) -> Model {
        let hidden = [512, 768, 1024][rng.below(3) as usize];
        Model {
            layers: 4 + rng.below(5) as usize,
            hidden,
            heads: hidden / 64,
            vocab: 32_000,
            batch: 2,
        }
    }

    /// Parameter shapes of one layer, in bytes: ln1.w, ln1.b, qkv.w, qkv.b,
    /// proj.w, proj.b, ln2.w, ln2.b, fc1.w, fc1.b, fc2.w, fc2.b.
    fn layer_params(&self) -> [u64; 12] {
        let h = self.hidden;
        [
            h,
            h,
            3 * h * h,
            3 * h,
            h * h,
            h,
            h,
            h,
            4 * h * h,
            4 * h,
            4 * h * h,
            h,
        ]
        .map(|n| n * 4)
    }
}

type RawFrame = (String, String, i64);

fn cpp(name: &str, file: &str) -> RawFrame {
    (name.to_owned(), file.to_owned(), 0)
}

const SITE: &str = "/opt/conda/lib/python3.12/site-packages/";

fn py(name: &str, torch_file: &str, line: i64) -> RawFrame {
    let file = if torch_file.starts_with('/') {
        torch_file.to_owned()
    } else {
        format!("{SITE}{torch_file}")
    };
    (name.to_owned(), file, line)
}

/// The phase of a training step an event happens in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Phase {
    /// `model.to("cuda")`.
    Load,
    /// Inside layer `.0` of the forward pass, in module `.1`.
    Forward(u8, u8),
    /// The loss.
    Loss,
    /// Backward through module `.1` of layer `.0`.
    Backward(u8, u8),
    /// `AccumulateGrad` of a parameter.
    Grad,
    /// `optimizer.step()`.
    Optim,
    /// `optimizer.zero_grad()`.
    ZeroGrad,
    /// The cuBLAS workspace of the first matmul.
    Cublas,
    /// `torch.cuda.empty_cache()`.
    EmptyCache,
}

/// Module kinds in a layer: (class file, forward line, the op it runs).
const MODULES: [(&str, i64, &str, &str); 6] = [
    (
        "torch/nn/modules/normalization.py",
        217,
        "native_layer_norm",
        "layer_norm",
    ),
    ("torch/nn/modules/linear.py", 125, "addmm", "linear"),
    (
        "torch/nn/functional.py",
        6021,
        "_scaled_dot_product_efficient_attention",
        "scaled_dot_product_attention",
    ),
    ("torch/nn/modules/activation.py", 734, "gelu", "gelu"),
    (
        "torch/nn/modules/dropout.py",
        70,
        "native_dropout",
        "dropout",
    ),
    ("torch/_tensor.py", 41, "add", "__add__"),
];

struct Gen<'s> {
    alloc: CachingAllocator,
    table: &'s mut StackTable,
    trace: Trace,
    rng: Rng,
    time: i64,
    frames: bool,
    /// Live allocations: addr → stack.
    live: HashMap<u64, StackId>,
    /// Segment start → stack of the allocation that created it.
    seg_stack: HashMap<u64, StackId>,
    /// (phase, free, call site) → stack.
    stacks: HashMap<(Phase, bool, u32), StackId>,
    na: Sym,
    empty: Sym,
    annotations: Vec<Annotation>,
    /// The streams in use; the first is the default stream.
    streams: Vec<u64>,
}

impl<'s> Gen<'s> {
    fn new(
        snap: &'s mut Snapshot,
        cfg: AllocatorConfig,
        seed: u64,
        frames: bool,
        time: i64,
    ) -> Self {
        let mut alloc = CachingAllocator::new(cfg);
        alloc.record_history(true);
        let na = snap.stacks.intern_str("N/A");
        let empty = snap.stacks.intern_str("");
        Gen {
            alloc,
            table: &mut snap.stacks,
            trace: Trace::new(),
            rng: Rng(seed),
            time,
            frames,
            live: HashMap::new(),
            seg_stack: HashMap::new(),
            stacks: HashMap::new(),
            na,
            empty,
            annotations: Vec::new(),
            streams: vec![0],
        }
    }

    /// The stack of an allocation (`free == false`) or free in `phase`,
    /// made at call site `site` (each line of the workload that allocates
    /// or frees is its own line of the user's code, as in a real program).
    fn stack(&mut self, phase: Phase, free: bool, site: u32) -> StackId {
        if !self.frames {
            return StackId::EMPTY;
        }
        if let Some(&s) = self.stacks.get(&(phase, free, site)) {
            return s;
        }
        let frames = build_stack(phase, free, site);
        let ids: Vec<FrameId> = frames
            .iter()
            .map(|(n, f, l)| self.table.intern_frame(n, f, *l))
            .collect();
        let s = self.table.intern_stack(&ids);
        self.stacks.insert((phase, free, site), s);
        s
    }

    /// Move what the twin recorded into the trace, with `stack` and times.
    fn flush(&mut self, stack: StackId) {
        for e in self.alloc.take_trace() {
            self.time += 1 + self.rng.below(40) as i64;
            if e.action == TraceAction::SegmentAlloc || e.action == TraceAction::SegmentMap {
                self.seg_stack.entry(e.addr).or_insert(stack);
            }
            let oom = e.action == TraceAction::Oom;
            self.trace.push(TraceEntry {
                action: Some(e.action),
                other_action: None,
                // An `oom` entry's address field holds the device's free bytes.
                addr: if oom { 0 } else { e.addr },
                size: e.size,
                stream: e.stream,
                time_us: Some(self.time),
                device_free: oom.then_some(e.addr),
                frames: stack,
                compile_context: Some(self.na),
                user_metadata: Some(self.empty),
            });
        }
    }

    #[track_caller]
    fn malloc(&mut self, bytes: u64, phase: Phase) -> u64 {
        self.malloc_on(bytes, phase, 0)
    }

    /// `malloc` on the `stream`-th stream (the default one when there are
    /// not that many).
    #[track_caller]
    fn malloc_on(&mut self, bytes: u64, phase: Phase, stream: usize) -> u64 {
        let stack = self.stack(phase, false, std::panic::Location::caller().line());
        let stream = self.streams.get(stream).copied().unwrap_or(0);
        // The device never runs out, so malloc cannot fail.
        let addr = self.alloc.malloc(bytes.max(1), stream).unwrap_or(0);
        self.flush(stack);
        self.live.insert(addr, stack);
        addr
    }

    #[track_caller]
    fn free(&mut self, addr: u64, phase: Phase) {
        let stack = self.stack(phase, true, std::panic::Location::caller().line());
        if self.alloc.free(addr).is_ok() {
            self.live.remove(&addr);
        }
        self.flush(stack);
    }

    fn annotate(&mut self, stage: &str, device: i64) {
        self.time += 1;
        self.annotations.push(Annotation {
            stage: stage.into(),
            name: "Optimizer.step#AdamW.step".into(),
            device,
            time_us: self.time,
            other: Vec::new(),
        });
    }

    /// Train until about `entries` trace entries exist.
    fn run(&mut self, m: &Model, entries: usize, device: i64) {
        let h = m.hidden;
        // model.to("cuda"): embedding, layers, head.
        let mut params: Vec<u64> = Vec::new();
        let mut sizes: Vec<u64> = Vec::new();
        let mut push = |g: &mut Self, bytes: u64| {
            params.push(g.malloc(bytes, Phase::Load));
            sizes.push(bytes);
        };
        push(self, m.vocab * h * 4);
        for _ in 0..m.layers {
            for b in m.layer_params() {
                push(self, b);
            }
        }
        push(self, h * 4);
        push(self, h * 4);
        let mut state: Vec<u64> = Vec::new();
        let mut step = 0u64;
        while self.trace.len() < entries {
            let seq = 128 * (1 + self.rng.below(8));
            self.step(m, &sizes, &mut state, seq, step, device);
            step += 1;
            if self.rng.below(64) == 0 {
                let stack = self.stack(Phase::EmptyCache, true, 0);
                self.alloc.empty_cache();
                self.flush(stack);
            }
        }
    }

    /// One training step with sequence length `seq`.
    fn step(
        &mut self,
        m: &Model,
        params: &[u64],
        state: &mut Vec<u64>,
        seq: u64,
        n: u64,
        dev: i64,
    ) {
        let tok = m.batch * seq;
        let h = m.hidden;
        let act = tok * h * 4;
        // The next batch's inputs and targets (int64), copied on a side
        // stream while this step runs.
        let batch: Vec<u64> = if self.streams.len() > 1 {
            vec![
                self.malloc_on(tok * 8, Phase::Load, 1),
                self.malloc_on(tok * 8, Phase::Load, 1),
            ]
        } else {
            Vec::new()
        };
        // Forward: (layer, saved tensors).
        let mut saved: Vec<Vec<(u64, Phase)>> = Vec::new();
        let emb = self.malloc(act, Phase::Forward(0, 5));
        let mut x = emb;
        for l in 0..m.layers {
            let l8 = l as u8;
            let mut s = vec![(x, Phase::Forward(l8, 5))];
            let f = |k: u8| Phase::Forward(l8, k);
            let ln1 = self.malloc(act, f(0));
            if n == 0 && l == 0 {
                // The first matmul creates the cuBLAS workspace (kept).
                self.malloc(33_554_432, Phase::Cublas);
            }
            let qkv = self.malloc(3 * act, f(1));
            let attn = self.malloc(act, f(2));
            // the efficient-attention logsumexp
            let lse = self.malloc(m.batch * m.heads * seq * 4, f(2));
            let proj = self.malloc(act, f(1));
            let drop1 = self.malloc(act, f(4));
            let mask1 = self.malloc(tok * h, f(4));
            self.free(proj, f(4));
            let x1 = self.malloc(act, f(5));
            self.free(drop1, f(5));
            let ln2 = self.malloc(act, f(0));
            let fc1 = self.malloc(4 * act, f(1));
            let gelu = self.malloc(4 * act, f(3));
            let fc2 = self.malloc(act, f(1));
            let drop2 = self.malloc(act, f(4));
            let mask2 = self.malloc(tok * h, f(4));
            self.free(fc2, f(4));
            let x2 = self.malloc(act, f(5));
            self.free(drop2, f(5));
            s.extend([
                (ln1, f(0)),
                (qkv, f(1)),
                (attn, f(2)),
                (lse, f(2)),
                (mask1, f(4)),
                (x1, f(5)),
                (ln2, f(0)),
                (fc1, f(1)),
                (gelu, f(3)),
                (mask2, f(4)),
            ]);
            saved.push(s);
            x = x2;
        }
        let lnf = self.malloc(act, Phase::Forward(0, 0));
        let logits = self.malloc(tok * m.vocab * 4, Phase::Loss);
        let lsm = self.malloc(tok * m.vocab * 4, Phase::Loss);
        let loss = self.malloc(4, Phase::Loss);
        self.free(logits, Phase::Loss);

        // Backward.
        let mut grads: Vec<Option<u64>> = vec![None; params.len()];
        let g_loss = self.malloc(4, Phase::Backward(0, 5));
        let g_logits = self.malloc(tok * m.vocab * 4, Phase::Backward(0, 1));
        self.free(g_loss, Phase::Backward(0, 5));
        self.free(lsm, Phase::Backward(0, 1));
        self.free(loss, Phase::Backward(0, 1));
        // head: lnf weight/bias grads
        let np = params.len();
        grads[np - 2] = Some(self.malloc(params[np - 2], Phase::Grad));
        grads[np - 1] = Some(self.malloc(params[np - 1], Phase::Grad));
        grads[0] = Some(self.malloc(params[0], Phase::Grad));
        let mut g = self.malloc(act, Phase::Backward(0, 0));
        self.free(g_logits, Phase::Backward(0, 1));
        self.free(lnf, Phase::Backward(0, 0));
        self.free(x, Phase::Backward(0, 5));
        for l in (0..m.layers).rev() {
            let l8 = l as u8;
            let b = |k: u8| Phase::Backward(l8, k);
            // Temporaries of each module's backward, then its saved tensors.
            let tmp1 = self.malloc(4 * act, b(1));
            let tmp2 = self.malloc(4 * act, b(3));
            self.free(tmp1, b(3));
            let tmp3 = self.malloc(act, b(1));
            self.free(tmp2, b(1));
            let first = 1 + l * 12;
            for (k, p) in (first..first + 12).enumerate() {
                if grads[p].is_none() {
                    grads[p] = Some(self.malloc(params[p], Phase::Grad));
                }
                if k % 4 == 3 {
                    let t = self.malloc(act, b(k as u8 % 6));
                    self.free(t, b(k as u8 % 6));
                }
            }
            for (a, _) in saved.pop().unwrap_or_default().into_iter().rev() {
                self.free(a, b(5));
            }
            self.free(g, b(0));
            g = tmp3;
        }
        self.free(g, Phase::Backward(0, 5));
        // DDP-like gradient buckets (25 MiB) reduced on a communication stream.
        if self.streams.len() > 2 {
            let buckets: Vec<u64> = (0..2)
                .map(|_| self.malloc_on(25 << 20, Phase::Grad, 2))
                .collect();
            for b in buckets {
                self.free(b, Phase::Grad);
            }
        }
        for b in batch {
            self.free(b, Phase::Loss);
        }

        // optimizer.step()
        self.annotate("START", dev);
        if state.is_empty() {
            for &p in params {
                state.push(self.malloc(p, Phase::Optim));
                state.push(self.malloc(p, Phase::Optim));
                state.push(self.malloc(4, Phase::Optim));
            }
        }
        // _foreach_* on chunks of parameters: temporaries, freed in the step.
        for chunk in params.chunks(8) {
            let tmps: Vec<u64> = chunk
                .iter()
                .map(|&p| self.malloc(p, Phase::Optim))
                .collect();
            for t in tmps {
                self.free(t, Phase::Optim);
            }
        }
        self.annotate("END", dev);
        // optimizer.zero_grad(set_to_none=True)
        for gr in grads.into_iter().flatten() {
            self.free(gr, Phase::ZeroGrad);
        }
    }

    /// The trace and the final segments (with the stacks of live blocks).
    fn finish(self, device: i64) -> (Trace, Vec<Segment>) {
        let segs = self
            .alloc
            .snapshot()
            .into_iter()
            .map(|s| {
                let frames = self.seg_stack.get(&s.address).copied().unwrap_or_default();
                Segment::of_twin(&s, device, frames, |a| {
                    self.live.get(&a).copied().unwrap_or_default()
                })
            })
            .collect();
        (self.trace, segs)
    }
}

/// A stack for `phase`, innermost frame first.
fn build_stack(phase: Phase, free: bool, site: u32) -> Vec<RawFrame> {
    // The user's line that made the call.
    let line = 30 + i64::from(site % 160);
    let mut f: Vec<RawFrame> = vec![
        cpp("torch::unwind::unwind()", "??"),
        cpp("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
        cpp(
            "torch::cuda::(anonymous namespace)::gather_with_cpp()",
            "memory_snapshot.cpp",
        ),
    ];
    if free {
        f.extend([
            cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::Block*)", "CUDACachingAllocator.cpp"),
            cpp("c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)", "CUDACachingAllocator.cpp"),
            cpp("c10::StorageImpl::~StorageImpl()", "StorageImpl.h"),
            cpp("c10::TensorImpl::~TensorImpl()", "TensorImpl.cpp"),
            cpp("c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reset_()", "intrusive_ptr.h"),
        ]);
    } else {
        f.extend([
            cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp"),
            cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp"),
            cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", "CUDACachingAllocator.cpp"),
            cpp("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)", "EmptyTensor.cpp"),
            cpp("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)", "EmptyTensor.cpp"),
        ]);
    }
    let op = |f: &mut Vec<RawFrame>, aten: &str| {
        f.push(cpp(
            &format!("at::native::{aten}_cuda(at::Tensor const&, at::Tensor const&)"),
            "??",
        ));
        f.push(cpp(
            &format!("at::_ops::{aten}::call(at::Tensor const&, at::Tensor const&)"),
            "Operators_2.cpp",
        ));
    };
    let eval = |f: &mut Vec<RawFrame>, frame: RawFrame| {
        f.push(cpp("_PyEval_EvalFrameDefault", "??"));
        f.push(frame);
    };
    let module_call = |f: &mut Vec<RawFrame>| {
        eval(f, py("_call_impl", "torch/nn/modules/module.py", 1762));
        eval(
            f,
            py("_wrapped_call_impl", "torch/nn/modules/module.py", 1751),
        );
    };
    let model = "/home/user/model.py";
    let train = "/home/user/train.py";
    let backward_engine = |f: &mut Vec<RawFrame>, node: &str| {
        f.push(cpp(
            &format!("torch::autograd::generated::{node}::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
            "Functions.cpp",
        ));
        f.push(cpp("torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", "function.h"));
        f.push(cpp("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)", "engine.cpp"));
        f.push(cpp("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "engine.cpp"));
        f.push(cpp("torch::autograd::Engine::execute(std::vector<torch::autograd::Edge, std::allocator<torch::autograd::Edge> > const&, std::vector<at::Tensor, std::allocator<at::Tensor> > const&, bool, bool, bool, std::vector<torch::autograd::Edge, std::allocator<torch::autograd::Edge> > const&)", "engine.cpp"));
        f.push(cpp("torch::autograd::python::PythonEngine::execute(std::vector<torch::autograd::Edge, std::allocator<torch::autograd::Edge> > const&, std::vector<at::Tensor, std::allocator<at::Tensor> > const&, bool, bool, bool, std::vector<torch::autograd::Edge, std::allocator<torch::autograd::Edge> > const&)", "python_engine.cpp"));
        f.push(cpp(
            "THPEngine_run_backward(_object*, _object*, _object*)",
            "python_engine.cpp",
        ));
        eval(
            f,
            py("_engine_run_backward", "torch/autograd/graph.py", 829),
        );
        eval(f, py("backward", "torch/autograd/__init__.py", 354));
        eval(f, py("backward", "torch/_tensor.py", 647));
        eval(f, py("train_step", train, 47));
    };
    match phase {
        Phase::Load => {
            op(&mut f, "_to_copy");
            eval(&mut f, py("convert", "torch/nn/modules/module.py", 1341));
            for _ in 0..3 {
                eval(&mut f, py("_apply", "torch/nn/modules/module.py", 942));
            }
            eval(&mut f, py("to", "torch/nn/modules/module.py", 1355));
            eval(&mut f, py("main", train, 112));
        }
        Phase::Cublas => {
            f.push(cpp(
                "at::cuda::getCUDABlasLtWorkspace()",
                "CublasHandlePool.cpp",
            ));
            f.push(cpp(
                "at::cuda::getCurrentCUDABlasHandle()",
                "CublasHandlePool.cpp",
            ));
            op(&mut f, "addmm_out");
            eval(&mut f, py("forward", "torch/nn/modules/linear.py", 125));
            module_call(&mut f);
            eval(&mut f, py("forward", model, 61));
            module_call(&mut f);
            eval(&mut f, py("train_step", train, 44));
        }
        Phase::Forward(layer, k) => {
            let (file, file_line, aten, func) = MODULES[k as usize % MODULES.len()];
            op(&mut f, aten);
            f.push(cpp(
                &format!("torch::autograd::VariableType::(anonymous namespace)::{aten}(c10::DispatchKeySet, at::Tensor const&)"),
                "VariableType_2.cpp",
            ));
            f.push(cpp(
                &format!("torch::autograd::THPVariable_{func}(_object*, _object*, _object*)"),
                "python_nn_functions.cpp",
            ));
            eval(
                &mut f,
                py(
                    if file.ends_with("functional.py") || file.ends_with("_tensor.py") {
                        func
                    } else {
                        "forward"
                    },
                    file,
                    file_line,
                ),
            );
            if !file.ends_with("_tensor.py") && !file.ends_with("functional.py") {
                module_call(&mut f);
            }
            // The layer's forward, then the model's loop over its layers.
            eval(&mut f, py("forward", model, line));
            module_call(&mut f);
            eval(&mut f, py("forward", model, 88 + i64::from(layer % 2)));
            module_call(&mut f);
            eval(&mut f, py("train_step", train, 44));
        }
        Phase::Loss => {
            op(&mut f, "_log_softmax");
            eval(&mut f, py("cross_entropy", "torch/nn/functional.py", 3494));
            eval(&mut f, py("train_step", train, line));
        }
        Phase::Backward(_, k) => {
            let node = [
                "NativeLayerNormBackward0",
                "AddmmBackward0",
                "ScaledDotProductEfficientAttentionBackward0",
                "GeluBackward0",
                "NativeDropoutBackward0",
                "AddBackward0",
            ][k as usize % 6];
            if free {
                f.push(cpp(
                    "torch::autograd::SavedVariable::reset_data()",
                    "saved_variable.cpp",
                ));
                f.push(cpp(
                    &format!("torch::autograd::generated::{node}::release_variables()"),
                    "Functions.h",
                ));
            } else {
                let ops = [
                    "mm",
                    "mul",
                    "sum",
                    "native_layer_norm_backward",
                    "gelu_backward",
                    "native_dropout_backward",
                    "_efficient_attention_backward",
                ];
                op(&mut f, ops[site as usize % ops.len()]);
            }
            backward_engine(&mut f, node);
        }
        Phase::Grad => {
            op(&mut f, "clone");
            f.push(cpp("torch::autograd::AccumulateGrad::accumulateGrad<torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)::{lambda(at::Tensor&&)#1}>(at::Tensor const&, at::Tensor&, at::Tensor const&, long, std::function<void(at::Tensor&&)> const&)", "accumulate_grad.h"));
            f.push(cpp("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", "accumulate_grad.cpp"));
            f.push(cpp("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)", "engine.cpp"));
            f.push(cpp("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "engine.cpp"));
            eval(
                &mut f,
                py("_engine_run_backward", "torch/autograd/graph.py", 829),
            );
            eval(&mut f, py("backward", "torch/autograd/__init__.py", 354));
            eval(&mut f, py("backward", "torch/_tensor.py", 647));
            eval(&mut f, py("train_step", train, 47));
        }
        Phase::Optim => {
            op(
                &mut f,
                if free {
                    "_foreach_mul"
                } else {
                    "_foreach_addcmul"
                },
            );
            eval(
                &mut f,
                py("_multi_tensor_adamw", "torch/optim/adamw.py", 612),
            );
            eval(&mut f, py("adamw", "torch/optim/adamw.py", 875));
            eval(&mut f, py("step", "torch/optim/adamw.py", 243));
            eval(&mut f, py("_use_grad", "torch/optim/optimizer.py", 79));
            eval(&mut f, py("wrapper", "torch/optim/optimizer.py", 485));
            eval(&mut f, py("train_step", train, 49));
        }
        Phase::EmptyCache => {
            f.truncate(3);
            f.push(cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::emptyCache(c10::cuda::MempoolId_t)", "CUDACachingAllocator.cpp"));
            f.push(cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache(c10::cuda::MempoolId_t)", "CUDACachingAllocator.cpp"));
            f.push(cpp(
                "THCPModule_emptyCache(_object*, _object*)",
                "Module.cpp",
            ));
            eval(&mut f, py("empty_cache", "torch/cuda/memory.py", 224));
            eval(&mut f, py("train_step", train, 52));
        }
        Phase::ZeroGrad => {
            eval(&mut f, py("zero_grad", "torch/optim/optimizer.py", 1001));
            eval(&mut f, py("train_step", train, 50));
        }
    }
    if phase != Phase::Load {
        eval(&mut f, py("main", train, 121));
    }
    eval(&mut f, py("<module>", train, 131));
    f.extend(
        [
            "PyEval_EvalCode",
            "run_eval_code_obj",
            "run_mod",
            "_PyRun_SimpleFileObject",
            "_PyRun_AnyFileObject",
            "Py_RunMain",
            "Py_BytesMain",
            "__libc_start_main",
            "_start",
        ]
        .map(|n| cpp(n, "??")),
    );
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_self_consistent() {
        let s = generate(&Options {
            entries: 20_000,
            ..Options::default()
        })
        .unwrap();
        let snap = &s.snapshot;
        assert_eq!(snap.device_traces.len(), 1);
        let t = &snap.device_traces[0];
        assert!(t.len() >= 20_000, "{}", t.len());
        // Every alloc lies in a segment created before it; every free
        // matches a live alloc of the same requested size.
        let mut segs: Vec<(u64, u64)> = Vec::new();
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut pending: HashMap<u64, u64> = HashMap::new();
        for (i, e) in t.iter().enumerate() {
            match e.action {
                Some(TraceAction::SegmentAlloc) => segs.push((e.addr, e.addr + e.size)),
                Some(TraceAction::SegmentFree) => segs.retain(|&(a, _)| a != e.addr),
                Some(TraceAction::Alloc) => {
                    assert!(
                        segs.iter()
                            .any(|&(a, b)| a <= e.addr && e.addr + e.size <= b),
                        "entry {i}: alloc outside every segment"
                    );
                    assert!(live.insert(e.addr, e.size).is_none(), "entry {i}");
                }
                Some(TraceAction::FreeRequested) => {
                    assert_eq!(live.remove(&e.addr), Some(e.size), "entry {i}");
                    pending.insert(e.addr, e.size);
                }
                Some(TraceAction::FreeCompleted) => {
                    assert_eq!(pending.remove(&e.addr), Some(e.size), "entry {i}");
                }
                other => panic!("entry {i}: unexpected {other:?}"),
            }
            assert!(e.frames != StackId::EMPTY, "entry {i} has no stack");
        }
        // The final segments hold exactly the live blocks.
        let alive: u64 = snap
            .segments
            .iter()
            .flat_map(|g| &g.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .count() as u64;
        assert_eq!(alive, live.len() as u64);
        let n: usize = snap.stacks.num_stacks();
        assert!((20..2000).contains(&n), "{n} distinct stacks");
        let depth = snap.frames(t.get(100).unwrap().frames).len();
        assert!((30..=60).contains(&depth), "{depth} frames");
        // Peaks are real: the model holds parameters, state and activations.
        let (a, ac, r) = s.peaks[0];
        assert!(a > 0 && ac >= a && r >= ac);
    }

    #[test]
    fn bad_conf_is_an_error() {
        let e = generate(&Options {
            conf: "nonsense:1".into(),
            ..Options::default()
        });
        assert!(e.is_err());
    }
}
