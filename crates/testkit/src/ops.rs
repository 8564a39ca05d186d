//! The op and module cases of `validation/ops_cases.py`, run on the twin.
//!
//! Each case is a fresh simulated process, written line for line after the
//! script: the module is built with `device="cuda", dtype=...` (parameters
//! allocated in `__init__` order), then the inputs, then the upstream
//! gradient; `empty_cache(); reset_peak_memory_stats()`; `inputs`; the
//! forward; `forward`; `out.backward(grad)` (or `loss.backward()`);
//! `backward`. The no-grad fast-path cases stop after `forward`.

use vramscope_engine::nn::{
    Activation, CrossEntropyLoss, Dropout, Embedding, LayerNorm, Linear, MSELoss, Module,
    MultiheadAttention, Sequential, TransformerEncoderLayer,
};
use vramscope_engine::{
    Category, DType, Device, EngineError, MemoryFigures, Result, Runtime, Tensor,
};

const B: i64 = 4;
const S: i64 = 128;
const D: i64 = 256;
const H: i64 = 8;
const FF: i64 = 1024;
const V: i64 = 1000;

/// The op/module names of the script, in its order (each runs in fp32 and bf16).
pub const NAMES: [&str; 19] = [
    "linear2d",
    "linear3d",
    "gelu",
    "relu",
    "sigmoid",
    "silu",
    "dropout",
    "layernorm",
    "embedding",
    "mse",
    "ce",
    "seq",
    "mha_w",
    "mha_now",
    "mha_fast",
    "enc_post",
    "enc_pre",
    "enc_fast",
    "enc_fast_pre",
];

/// Every case of the fixture (`NAME:fp32`, `NAME:bf16`), in its order.
pub fn cases() -> Vec<String> {
    NAMES
        .iter()
        .flat_map(|n| [format!("{n}:fp32"), format!("{n}:bf16")])
        .collect()
}

/// Move a CPU-built module's parameters to the GPU in `parameters()` order
/// (which is `__init__` order for the reference modules), as
/// `Module(..., device="cuda", dtype=dtype)` allocates them.
fn build_on_cuda(rt: &Runtime, m: &mut dyn Module, dtype: DType) -> Result<()> {
    let mut map: Vec<(Tensor, Tensor)> = Vec::new();
    for p in m.parameters() {
        let n = rt.with_category(Category::Parameter, || {
            rt.empty(p.sizes(), dtype, Device::Cuda)
        })?;
        n.requires_grad_(true)?;
        map.push((p, n));
    }
    m.apply_params(&mut |p: &Tensor| {
        map.iter()
            .find(|(o, _)| o.same(p))
            .map(|(_, n)| n.clone())
            .ok_or_else(|| EngineError::Unsupported {
                what: "parameter not listed by parameters()".into(),
            })
    })
}

fn leaf(rt: &Runtime, sizes: &[i64], dtype: DType) -> Result<Tensor> {
    let t = rt.randn(sizes, dtype, Device::Cuda)?;
    t.requires_grad_(true)?;
    Ok(t)
}

/// One measured step: its name and the five figures.
pub type CaseStep = (String, MemoryFigures);

/// One allocator trace event: its action (`alloc`, `free_requested`, ...) and size.
pub type TraceEvent = (String, u64);

/// Run one case (`NAME:fp32` / `NAME:bf16`) in a fresh simulated process.
pub fn run(case: &str) -> Result<Vec<CaseStep>> {
    Ok(run_traced(case)?.0)
}

/// [`run`], with the allocator trace recorded from the `inputs` step on
/// (as the script records memory history): `(action, size)` per event.
pub fn run_traced(case: &str) -> Result<(Vec<CaseStep>, Vec<TraceEvent>)> {
    let (steps, trace) = run_trace_entries(case)?;
    let trace = trace
        .into_iter()
        .map(|e| (e.action.as_str().to_string(), e.size))
        .collect();
    Ok((steps, trace))
}

/// [`run_traced`] with the allocator's full trace entries (addresses too).
pub fn run_trace_entries(case: &str) -> Result<(Vec<CaseStep>, Vec<vramscope_alloc::TraceEntry>)> {
    let (name, dts) = case
        .split_once(':')
        .ok_or_else(|| EngineError::UnknownCase(case.to_string()))?;
    let dt = match dts {
        "fp32" => DType::F32,
        "bf16" => DType::BF16,
        _ => return Err(EngineError::UnknownCase(case.to_string())),
    };
    let rt = Runtime::default();
    let mut steps: Vec<CaseStep> = Vec::new();
    let rtc = rt.clone();
    let mut emit = |step: &str| steps.push((step.to_string(), rtc.figures()));
    let fresh = |rt: &Runtime| {
        rt.empty_cache();
        rt.reset_peak_memory_stats();
        rt.record_memory_history(true);
    };
    let out_shape: Vec<i64> = match name {
        "linear2d" => vec![B * S, 2 * D],
        "linear3d" => vec![B, S, 2 * D],
        _ => vec![B, S, D],
    };
    let grad_of = |rt: &Runtime| rt.randn(&out_shape, dt, Device::Cuda);
    match name {
        "linear2d" | "linear3d" | "gelu" | "relu" | "sigmoid" | "silu" | "dropout"
        | "layernorm" | "seq" | "enc_post" | "enc_pre" => {
            let mut m: Box<dyn Module> = match name {
                "linear2d" | "linear3d" => Box::new(Linear::new(&rt, D, 2 * D, true)?),
                "gelu" => Box::new(Activation::GELU),
                "relu" => Box::new(Activation::ReLU),
                "sigmoid" => Box::new(Activation::Sigmoid),
                "silu" => Box::new(Activation::SiLU),
                "dropout" => Box::new(Dropout::new(0.1)),
                "layernorm" => Box::new(LayerNorm::new(&rt, &[D])?),
                "seq" => Box::new(Sequential {
                    modules: vec![
                        Box::new(Linear::new(&rt, D, FF, true)?),
                        Box::new(Activation::GELU),
                        Box::new(Linear::new(&rt, FF, D, true)?),
                    ],
                }),
                _ => Box::new(TransformerEncoderLayer::new(
                    &rt,
                    D,
                    H,
                    FF,
                    0.1,
                    true,
                    name == "enc_pre",
                )?),
            };
            build_on_cuda(&rt, m.as_mut(), dt)?;
            let x = if name == "linear2d" {
                leaf(&rt, &[B * S, D], dt)?
            } else {
                leaf(&rt, &[B, S, D], dt)?
            };
            let g = grad_of(&rt)?;
            fresh(&rt);
            emit("inputs");
            let out = m.forward(&x)?;
            emit("forward");
            out.backward_with(Some(g.clone()), Default::default())?;
            emit("backward");
        }
        "embedding" => {
            let mut m = Embedding::new(&rt, V, D)?;
            build_on_cuda(&rt, &mut m, dt)?;
            let idx = rt.empty(&[B, S], DType::I64, Device::Cuda)?;
            let g = grad_of(&rt)?;
            fresh(&rt);
            emit("inputs");
            let out = m.forward(&idx)?;
            emit("forward");
            out.backward_with(Some(g.clone()), Default::default())?;
            emit("backward");
        }
        "mse" => {
            let x = leaf(&rt, &[B, S, D], dt)?;
            let t = rt.randn(&[B, S, D], dt, Device::Cuda)?;
            fresh(&rt);
            emit("inputs");
            let loss = MSELoss.forward(&x, &t)?;
            emit("forward");
            loss.backward()?;
            emit("backward");
        }
        "ce" => {
            let x = leaf(&rt, &[B * S, V], dt)?;
            let t = rt.empty(&[B * S], DType::I64, Device::Cuda)?;
            fresh(&rt);
            emit("inputs");
            let loss = CrossEntropyLoss.forward(&x, &t)?;
            emit("forward");
            loss.backward()?;
            emit("backward");
        }
        "mha_w" | "mha_now" => {
            let mut m = MultiheadAttention::new(&rt, D, H, 0.0, true, true)?;
            build_on_cuda(&rt, &mut m, dt)?;
            let x = leaf(&rt, &[B, S, D], dt)?;
            let g = grad_of(&rt)?;
            fresh(&rt);
            emit("inputs");
            // `m(x, x, x, need_weights=...)[0]`: the weights are dropped with the tuple
            let out = m.self_attention(&x, name == "mha_w")?.0;
            emit("forward");
            out.backward_with(Some(g.clone()), Default::default())?;
            emit("backward");
        }
        "mha_fast" | "enc_fast" | "enc_fast_pre" => {
            let mut m: Box<dyn Module> = if name == "mha_fast" {
                Box::new(MultiheadAttention::new(&rt, D, H, 0.0, true, true)?)
            } else {
                Box::new(TransformerEncoderLayer::new(
                    &rt,
                    D,
                    H,
                    FF,
                    0.1,
                    true,
                    name == "enc_fast_pre",
                )?)
            };
            build_on_cuda(&rt, m.as_mut(), dt)?;
            m.eval();
            let x = rt.randn(&[B, S, D], dt, Device::Cuda)?;
            fresh(&rt);
            emit("inputs");
            let out = rt.no_grad(|| m.forward(&x))?;
            emit("forward");
            drop(out);
        }
        _ => return Err(EngineError::UnknownCase(case.to_string())),
    }
    Ok((steps, rt.trace()))
}
