//! The seed experiments of `fixtures/seeds/seeds_probe.py`, run on the twin.
//! Each case is a fresh simulated process, written line for line after the
//! probe with Python's evaluation order and variable lifetimes; each step
//! reports the five figures the probe prints and what changed since the
//! previous step.

use std::collections::HashMap;
use std::fmt;

use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::function;
use crate::nn::{
    Activation, Linear, MSELoss, Module, MultiheadAttention, Sequential, TransformerEncoderLayer,
};
use crate::optim::Optimizer;
use crate::runtime::{AllocRecord, MemoryFigures, Runtime};
use crate::tensor::Tensor;

/// The error of [`run`]: an unknown case, or whatever the simulation refused.
pub type DemoError = EngineError;

/// One step of a seed experiment: the probe's figures and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoStep {
    /// case name (`seed000:both`, ...)
    pub case: String,
    /// step name (`inputs`, `after_compute`, ...)
    pub step: String,
    /// `torch.cuda.memory_allocated()`
    pub allocated: i64,
    /// `torch.cuda.max_memory_allocated()`
    pub peak: i64,
    /// `torch.cuda.memory_reserved()`
    pub reserved: i64,
    /// `memory_stats()["reserved_bytes.all.peak"]`
    pub peak_reserved: i64,
    /// `memory_stats()["requested_bytes.all.current"]`
    pub requested: i64,
    /// what changed since the previous step, and why
    pub explanation: String,
}

/// Every case of the fixture, in its order.
pub fn cases() -> Vec<&'static str> {
    vec![
        "seed000:nograd",
        "seed000:both",
        "seed000:xonly",
        "seed000:fused",
        "seed000:fused2",
        "seed000:sigmoid_manual",
        "seed000:sigmoid_builtin",
        "seed001",
        "seed001b",
        "seed002",
        "seed003",
        "seed003b",
        "snapshot",
    ]
}

/// Run one case in a fresh simulated process.
pub fn run(case: &str) -> std::result::Result<Vec<DemoStep>, DemoError> {
    let rt = Runtime::default();
    let mut rec = Recorder::new(&rt, case);
    if let Some(variant) = case.strip_prefix("seed000:") {
        seed000(&rt, &mut rec, variant)?;
    } else {
        match case {
            "seed001" => seed001(&rt, &mut rec)?,
            "seed001b" => seed001b(&rt, &mut rec)?,
            "seed002" => seed002(&rt, &mut rec)?,
            "seed003" => seed003(&rt, &mut rec, false)?,
            "seed003b" => seed003(&rt, &mut rec, true)?,
            "snapshot" => snapshot(&rt, &mut rec)?,
            _ => return Err(EngineError::UnknownCase(case.to_string())),
        }
    }
    Ok(rec.steps)
}

struct Mib(i64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        let a = b.abs();
        if a >= (1u64 << 30) as f64 {
            write!(f, "{:.2} GiB", b / (1u64 << 30) as f64)
        } else if a >= (1u64 << 20) as f64 {
            write!(f, "{:.2} MiB", b / (1u64 << 20) as f64)
        } else if a >= 1024.0 {
            write!(f, "{:.1} KiB", b / 1024.0)
        } else {
            write!(f, "{} B", self.0)
        }
    }
}

struct Recorder {
    rt: Runtime,
    case: String,
    steps: Vec<DemoStep>,
    prev: MemoryFigures,
    prev_live: HashMap<u64, AllocRecord>,
}

impl Recorder {
    fn new(rt: &Runtime, case: &str) -> Self {
        Recorder {
            rt: rt.clone(),
            case: case.to_string(),
            steps: Vec::new(),
            prev: MemoryFigures::default(),
            prev_live: HashMap::new(),
        }
    }

    /// The probe's `fresh()`: `empty_cache()` and `reset_peak_memory_stats()`.
    fn fresh(&mut self) {
        self.rt.empty_cache();
        self.rt.reset_peak_memory_stats();
        self.prev = self.rt.figures();
    }

    fn emit(&mut self, step: &str, note: &str) {
        let f = self.rt.figures();
        let live: HashMap<u64, AllocRecord> = self
            .rt
            .live_allocations()
            .into_iter()
            .map(|r| ((r.seq), r))
            .collect();
        let mut new: Vec<&AllocRecord> = live
            .values()
            .filter(|r| !self.prev_live.contains_key(&r.seq))
            .collect();
        new.sort_by_key(|r| r.seq);
        let freed = self
            .prev_live
            .values()
            .filter(|r| !live.contains_key(&r.seq))
            .count();
        let freed_bytes: u64 = self
            .prev_live
            .values()
            .filter(|r| !live.contains_key(&r.seq))
            .map(|r| r.bytes)
            .sum();
        let d = f.allocated - self.prev.allocated;
        let mut s = format!(
            "{}{}: {note}.",
            if d >= 0 { "+" } else { "-" },
            Mib(d.abs())
        );
        if !new.is_empty() {
            // group the new live allocations by (size, category, op)
            let mut groups: Vec<(u64, String, usize)> = Vec::new();
            for r in &new {
                let key = format!(
                    "{} of {}{}",
                    r.category,
                    r.op,
                    if r.module.is_empty() {
                        String::new()
                    } else {
                        format!(" in {}", r.module)
                    }
                );
                if let Some(g) = groups.iter_mut().find(|g| g.0 == r.bytes && g.1 == key) {
                    g.2 += 1;
                } else {
                    groups.push((r.bytes, key, 1));
                }
            }
            let parts: Vec<String> = groups
                .iter()
                .take(8)
                .map(|(b, k, n)| {
                    if *n > 1 {
                        format!("{n} x {} {k}", Mib(*b as i64))
                    } else {
                        format!("{} {k}", Mib(*b as i64))
                    }
                })
                .collect();
            s.push_str(&format!(
                " New and still held: {}{}.",
                parts.join(", "),
                if groups.len() > 8 { ", ..." } else { "" }
            ));
        }
        if freed > 0 {
            s.push_str(&format!(
                " Released: {freed} allocation(s), {} requested.",
                Mib(freed_bytes as i64)
            ));
        }
        if f.peak > self.prev.peak && f.peak > f.allocated {
            s.push_str(&format!(
                " Peak {} in between ({} above what is held now).",
                Mib(f.peak),
                Mib(f.peak - f.allocated)
            ));
        }
        if f.reserved != self.prev.reserved {
            s.push_str(&format!(
                " Reserved {} ({}{}).",
                Mib(f.reserved),
                if f.reserved >= self.prev.reserved {
                    "+"
                } else {
                    "-"
                },
                Mib((f.reserved - self.prev.reserved).abs())
            ));
        }
        self.steps.push(DemoStep {
            case: self.case.clone(),
            step: step.to_string(),
            allocated: f.allocated,
            peak: f.peak,
            reserved: f.reserved,
            peak_reserved: f.peak_reserved,
            requested: f.requested,
            explanation: s,
        });
        self.prev = f;
        self.prev_live = live;
    }
}

fn cuda(rt: &Runtime, shape: &[i64]) -> Result<Tensor> {
    rt.randn(shape, DType::F32, Device::Cuda)
}

fn seed000(rt: &Runtime, rec: &mut Recorder, variant: &str) -> Result<()> {
    let n = 256 * 1024 * 1024;
    let x = cuda(rt, &[n])?;
    let y = cuda(rt, &[n])?;
    rec.fresh();
    rec.emit("inputs", "x and y, 1 GiB each, are the only tensors");
    let z = match variant {
        "nograd" => (&x + 1.0) * (2.0 * &y),
        "both" | "xonly" => {
            x.requires_grad_(true)?;
            if variant == "both" {
                y.requires_grad_(true)?;
            }
            (&x + 1.0) * (2.0 * &y)
        }
        "fused" | "fused2" => {
            x.requires_grad_(true)?;
            y.requires_grad_(true)?;
            let two_step = variant == "fused2";
            function::apply(
                rt,
                "AddMulBackward",
                &[&x, &y],
                move |ctx, ins| {
                    let (x, y) = (ins[0], ins[1]);
                    ctx.save_for_backward(&[x, y]);
                    if two_step {
                        let z = x + 1.0;
                        let z = z * 2.0;
                        Ok(z * y)
                    } else {
                        Ok((x + 1.0) * (2.0 * y))
                    }
                },
                |saved, grads| {
                    let (x, y) = (&saved[0], &saved[1]);
                    let g = grads[0].as_ref().expect("one gradient");
                    // return g * (2 * y), g * (x + 1)
                    let gx = g * (2.0 * y);
                    let gy = g * (x + 1.0);
                    Ok(vec![Some(gx), Some(gy)])
                },
            )?
        }
        "sigmoid_manual" => {
            x.requires_grad_(true)?;
            // 1 / (1 + torch.exp(-x))
            let nx = -&x;
            let e = nx.exp()?;
            drop(nx);
            let a = 1.0 + e;
            1.0 / a
        }
        "sigmoid_builtin" => {
            x.requires_grad_(true)?;
            Activation::Sigmoid.forward(&x)?
        }
        _ => return Err(EngineError::UnknownCase(format!("seed000:{variant}"))),
    };
    let note = match variant {
        "nograd" => "no autograd: the temporaries x+1 and 2*y are freed, only z (1 GiB) stays; peak 5 GiB while both temporaries and z coexisted",
        "both" => "x+1 and 2*y are both saved by MulBackward0 (each needs the other), so z plus two saved 1 GiB intermediates stay",
        "xonly" => "MulBackward0 saves only 2*y (the other operand of the input that requires grad); x+1 is freed",
        "fused" => "the custom Function saves only its inputs (already alive); its forward ran without autograd, so only z stays",
        "fused2" => "same as fused, but the step-by-step forward frees each intermediate on rebinding: peak 2 GiB lower",
        "sigmoid_manual" => "exp(-x) and the reciprocal are saved (ExpBackward0, ReciprocalBackward0 save their results), plus z",
        _ => "SigmoidBackward0 saves its result, which is z itself: nothing else stays",
    };
    rec.emit("after_compute", note);
    if z.requires_grad() {
        let loss = z.sum()?;
        loss.backward()?;
        drop(loss);
        rec.emit(
            "after_backward",
            "backward ran on the autograd thread; saved tensors were released node by node and the gradients of the leaves were stolen into .grad",
        );
    }
    drop(z);
    Ok(())
}

struct MyModel {
    seq: Sequential,
}

fn seed001(rt: &Runtime, rec: &mut Recorder) -> Result<()> {
    let inp = cuda(rt, &[10, 3])?;
    let label = cuda(rt, &[10, 100])?;
    rec.fresh();
    rec.emit(
        "inputs",
        "inp (10x3) and label (10x100) share a 2 MiB small-pool segment",
    );
    let dims = [(3, 300), (300, 300), (300, 400), (400, 300), (300, 100)];
    let mut modules: Vec<Box<dyn Module>> = Vec::new();
    for (i, o) in dims {
        modules.push(Box::new(Linear::new(rt, i, o, true)?));
    }
    let mut model = MyModel {
        seq: Sequential { modules },
    };
    model.seq.cuda()?;
    rec.emit(
        "model",
        "the five Linear layers' weights and biases were copied to the GPU",
    );
    let mut opt = Optimizer::sgd(model.seq.parameters(), 0.0)?;
    let out = model.seq.forward(&inp)?;
    rec.emit(
        "forward",
        "each addmm output is saved by the next AddmmBackward0; the first addmm allocated the 32 MiB cuBLAS workspace and the 1 MiB cuBLASLt workspace",
    );
    let loss = MSELoss.forward(&out, &label)?;
    rec.emit("loss", "mse_loss's 0-dim result keeps the (10,100) storage its TensorIterator allocated before resize_({})");
    loss.backward()?;
    rec.emit(
        "backward",
        "the autograd thread's first mm allocated its own 32 MiB cuBLAS workspace; parameter gradients were stolen into .grad and the saved activations released",
    );
    opt.step()?;
    rec.emit(
        "step",
        "foreach SGD without momentum updates in place: nothing allocated",
    );
    drop((out, loss));
    Ok(())
}

fn seed001b(rt: &Runtime, rec: &mut Recorder) -> Result<()> {
    rec.fresh();
    rec.emit("start", "nothing allocated");
    let t1 = cuda(rt, &[1024, 1024])?;
    let t2 = cuda(rt, &[2048, 2048])?;
    rec.emit(
        "alloc",
        "4 MiB and 16 MiB tensors; the 4 MiB one gets a 20 MiB large-pool segment",
    );
    drop(t1);
    rec.emit(
        "del_t1",
        "t1's block returns to the cache: allocated falls, reserved does not",
    );
    drop(t2);
    rt.empty_cache();
    rec.emit("empty_cache", "empty_cache releases the unused segments");
    Ok(())
}

fn seed002(rt: &Runtime, rec: &mut Recorder) -> Result<()> {
    rec.fresh();
    rec.emit("start", "nothing allocated");
    let x = cuda(rt, &[1024, 1024])?;
    let mut model = Sequential {
        modules: vec![
            Box::new(Linear::new(rt, 1024, 1024, false)?),
            Box::new(Activation::GELU),
            Box::new(Linear::new(rt, 1024, 1024, false)?),
            Box::new(Activation::GELU),
            Box::new(Linear::new(rt, 1024, 1024, false)?),
        ],
    };
    model.cuda()?;
    rec.emit("model_data", "x and three 4 MiB weights");
    let mut keep: Vec<Tensor> = Vec::new();
    for i in 0..3 {
        keep.push(model.forward(&x)?);
        let note = if i == 0 {
            "three mm outputs and two GELU outputs (GeluBackward0 saves its input, MmBackward0 saves its input): 20 MiB, plus the 32 MiB cuBLAS workspace of the first mm"
        } else {
            "another 20 MiB of outputs and saved activations, kept alive by the output held in `keep`"
        };
        rec.emit(&format!("forward{i}"), note);
    }
    keep.push(rt.no_grad(|| model.forward(&x))?);
    rec.emit("forward_nograd", "under no_grad only the 4 MiB output stays; intermediates are freed as soon as the next layer ran");
    // loss = model(x).sum(); loss.backward() -- `loss` stays bound
    let loss = {
        let y = model.forward(&x)?;
        y.sum()?
    };
    loss.backward()?;
    rec.emit("fwd_bwd", "weight gradients (3 x 4 MiB) stay in .grad; the autograd thread allocated its own 32 MiB cuBLAS workspace");
    let mut mha = MultiheadAttention::new(rt, 1024, 1, 0.0, false, false)?;
    mha.cuda()?;
    let mx = cuda(rt, &[2, 1024, 1024])?;
    rec.emit(
        "mha_model_data",
        "in_proj_weight (12 MiB), out_proj.weight (4 MiB) and the 8 MiB input",
    );
    for i in 0..2 {
        let (o, w) = mha.self_attention(&mx, true)?;
        keep.push(o);
        keep.extend(w);
        rec.emit(&format!("mha_forward{i}"), "need_weights=True: the explicit bmm/softmax path keeps the attention weights and the saved projections alive");
    }
    let (o, w) = rt.no_grad(|| mha.self_attention(&mx, true))?;
    keep.push(o);
    keep.extend(w);
    rec.emit(
        "mha_forward_nograd",
        "under no_grad only the output and the averaged weights stay",
    );
    let mut enc = TransformerEncoderLayer::new(rt, 1024, 1, 4096, 0.0, false, false)?;
    enc.cuda()?;
    let ex = cuda(rt, &[2, 1024, 1024])?;
    rec.emit(
        "enc_model_data",
        "the encoder layer's parameters and the 8 MiB input",
    );
    for i in 0..2 {
        keep.push(enc.forward(&ex)?);
        rec.emit(&format!("enc_forward{i}"), "training mode (slow path): SDPA memory-efficient attention, saved activations kept by the output");
    }
    keep.push(rt.no_grad(|| enc.forward(&ex))?);
    rec.emit(
        "enc_forward_nograd",
        "no_grad in training mode still takes the slow path; only the output stays",
    );
    drop(keep);
    drop(loss);
    Ok(())
}

fn seed003(rt: &Runtime, rec: &mut Recorder, one_expr: bool) -> Result<()> {
    rec.fresh();
    rec.emit("start", "nothing allocated");
    let x = rt.zeros(&[3, 1024, 1024, 256], DType::F32, Device::Cuda)?;
    x.requires_grad_(true)?;
    rec.emit("x", "a 3 GiB leaf that requires grad");
    if !one_expr {
        let y = &x * 5.0;
        rec.emit(
            "y",
            "y = 5 * x is a 3 GiB non-leaf (MulBackward0 saves only the number 5)",
        );
        {
            let m = y.mean()?;
            m.backward()?;
        }
        rec.emit(
            "backward",
            "MeanBackward0 made a 3 GiB gradient, MulBackward0 multiplied it into another 3 GiB (peak 12 GiB), which x.grad then stole; y is still alive",
        );
        drop(y);
    } else {
        {
            let t = &x * 5.0;
            let m = t.mean()?;
            drop(t);
            m.backward()?;
        }
        rec.emit("backward", "5 * x was a temporary freed right after mean: the peak is 3 GiB lower than with y kept");
    }
    Ok(())
}

fn snapshot(rt: &Runtime, rec: &mut Recorder) -> Result<()> {
    let mut enc = TransformerEncoderLayer::new(rt, 1024, 16, 4096, 0.1, true, false)?;
    enc.cuda()?;
    let mut opt = Optimizer::adamw(enc.parameters());
    let ex = cuda(rt, &[8, 512, 1024])?;
    let mut loss: Option<Tensor> = None;
    for i in 0..3 {
        let l = {
            let y = enc.forward(&ex)?;
            let sq = y.square()?;
            drop(y);
            let m = sq.mean()?;
            drop(sq);
            m
        };
        loss = Some(l);
        loss.as_ref().expect("set above").backward()?;
        opt.step()?;
        opt.zero_grad();
        let note = if i == 0 {
            "after one training step: parameters, AdamW's exp_avg/exp_avg_sq, the cuBLAS/cuBLASLt workspaces and the 4-byte loss remain"
        } else {
            "steady state: the same tensors remain; the cache was reused"
        };
        rec.emit(&format!("iter{i}"), note);
    }
    drop(loss);
    Ok(())
}
