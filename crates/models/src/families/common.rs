//! The building blocks the decoder families share (llama, mistral, qwen2,
//! qwen3, and phi3 / gemma2 where they match), each written op by op as
//! transformers 5.17 writes it, with CPython's lifetimes: a temporary dies
//! at the end of its statement, a rebound name frees its old value, locals
//! die at function return (in `co_varnames` order: arguments first, then
//! locals in order of first assignment).
//!
//! | block | transformers source | allocations (CUDA) |
//! | --- | --- | --- |
//! | [`RmsNorm`] | `LlamaRMSNorm.forward` | fp32 copy (if not fp32), `pow`, `mean`, `+eps`, `rsqrt`, `*`, cast back, `weight *` |
//! | [`RotaryEmbedding`] | `LlamaRotaryEmbedding` (`default`, `linear`, `llama3`, `yarn`) | `position_ids.float()`, `bmm` (+ cuBLAS workspace), `cat`, `cos`, `sin`, `* scaling`, casts |
//! | [`apply_rotary_pos_emb`] | `apply_rotary_pos_emb`, `rotate_half` | `q*cos`, `-x2`, `cat`, `*sin`, `+` (same for k) |
//! | [`repeat_kv`], [`sdpa_attention_forward`] | `integrations/sdpa_attention.py` | `expand().reshape()` copies only when GQA cannot go to SDPA |
//! | [`create_causal_mask`], [`create_sliding_window_causal_mask`] | `masking_utils.py` (`sdpa_mask`) | `None` (SDPA's `is_causal`) or a bool `(1,1,q,kv)` mask expanded to `(b,1,q,kv)` |
//! | [`KvCache`] (`super::cache`) | `cache_utils.DynamicCache` / `StaticCache` and their layers | see the module |
//! | [`for_causal_lm_loss`] | `loss_utils.ForCausalLMLoss` | `float()`, `pad`, `contiguous`, `log_softmax`, `nll_loss` |
//!
//! Parameters are created on the CPU in the weight dtype (`from_config(dtype=W)`
//! sets the default dtype while the modules are built), buffers as the code
//! registers them (the rotary `inv_freq` is float32 whatever the weights),
//! and [`to_cuda`] moves one of them as `Module._apply(lambda t: t.cuda())`
//! does (a tied weight already on the device is not copied again).
//!
//! [`CausalLm`] is the `…ForCausalLM` around each family's [`Decoder`]
//! (`model` and `lm_head`, `train()`/`eval()`, checkpointing, the loss);
//! [`decoder_layers`] runs a family's layers, each checkpointed or not.

use std::cell::RefCell;

use vramscope_engine::checkpoint::checkpoint;
use vramscope_engine::{AutocastConfig, Category, DType, Device, Runtime, SdpaArgs, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::{HfModel, Inputs, ModelOutput};
use crate::workload::Checkpointing;

pub(crate) use super::cache::{DynamicCache, KvCache};

/// A config field that is absent, mistyped or not modelled.
pub(crate) fn bad(field: &str, detail: impl Into<String>) -> ModelError {
    ModelError::Field {
        field: field.into(),
        detail: detail.into(),
    }
}

/// `num_attention_heads` must be a multiple of `num_key_value_heads`.
pub(crate) fn check_kv_heads(heads: i64, kv_heads: i64) -> Result<()> {
    if heads % kv_heads != 0 {
        return Err(bad(
            "num_key_value_heads",
            format!("{kv_heads} does not divide num_attention_heads {heads}"),
        ));
    }
    Ok(())
}

/// `hidden_size // num_attention_heads`, which must divide evenly.
pub(crate) fn head_dim_of(hidden: i64, heads: i64) -> Result<i64> {
    if hidden % heads != 0 {
        return Err(bad(
            "hidden_size",
            format!("{hidden} is not a multiple of num_attention_heads {heads}"),
        ));
    }
    Ok(hidden / heads)
}

/// The word embedding's `padding_idx = config.pad_token_id`: the class
/// default where the field is absent, none where it is `null`. `nn.Embedding`
/// asserts that it indexes the table (`torch/nn/modules/sparse.py`:
/// "Padding_idx must be within num_embeddings"), so `from_config` fails
/// where it does not: Phi-3's default 32000 with a vocabulary of 32000 or
/// less, as the GPU showed (`fixtures/unseen/blind_new_configs/README.md`).
pub(crate) fn check_padding_idx(c: &HfConfig, default: Option<i64>, vocab: i64) -> Result<()> {
    let pad = match c.raw().get("pad_token_id") {
        None => default,
        Some(v) if v.is_null() => None,
        Some(_) => c.opt_int("pad_token_id")?,
    };
    match pad {
        Some(p) if (p > 0 && p >= vocab) || (p < 0 && p < -vocab) => Err(bad(
            "pad_token_id",
            format!(
                "{p} is not within vocab_size {vocab}: nn.Embedding's padding_idx must index \
                 the table (PyTorch raises \"Padding_idx must be within num_embeddings\")"
            ),
        )),
        _ => Ok(()),
    }
}

/// The per-forward state every rotary decoder layer sees: the kwargs
/// `LlamaModel`, `Phi3Model` and `Gemma2Model` (and the Llama's kin) pass
/// to each layer. `position_ids=position_ids` is among them, so a
/// checkpointed layer's `partial` holds it until that layer's backward (the
/// GPU's traces of the first checkpointed Phi-3 and Gemma-2 recorded,
/// `blind_cudnn_libraries/phi3_a4dc9738...` and
/// `blind_new_configs/gemma2_20a18480...`, free it in
/// `backward0`). The `partial`'s keywords dict releases its values in
/// insertion order, so the fields drop in the order the model passes them.
#[derive(Clone)]
pub(crate) struct LayerArgs {
    /// `position_ids` where the model passes `position_ids=` before
    /// `position_embeddings=` (transformers 5.17's Mistral, Mixtral,
    /// Qwen3-MoE and Phi-3 models)
    ids_first: Option<Tensor>,
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    /// Gemma-3's second `(cos, sin)`, for its `"sliding_attention"` layers
    /// (`position_embeddings[layer_type]`); `None` where one pair serves all
    pub(crate) local: Option<(Tensor, Tensor)>,
    /// `position_ids` where it comes after them (Llama, Qwen2, Qwen3,
    /// Gemma-2 and Gemma-3)
    ids_last: Option<Tensor>,
    pub(crate) training: bool,
    /// a decode forward of `generate()` ([`GenStep::decode`])
    pub(crate) decode: bool,
}

impl LayerArgs {
    /// The layers' arguments: the position embeddings `(cos, sin)`, a
    /// reference to `position_ids` (passed before the embeddings when
    /// `ids_first`) and `self.training`.
    pub(crate) fn new(
        (cos, sin): (Tensor, Tensor),
        position_ids: &Tensor,
        ids_first: bool,
        training: bool,
    ) -> Self {
        let ids = Some(position_ids.clone());
        let (ids_first, ids_last) = if ids_first { (ids, None) } else { (None, ids) };
        LayerArgs {
            ids_first,
            cos,
            sin,
            local: None,
            ids_last,
            training,
            decode: false,
        }
    }
    /// In a decode forward of `generate()` (`step.decode`).
    pub(crate) fn with_decode(mut self, step: Option<&GenStep>) -> Self {
        self.decode = step.is_some_and(|g| g.decode);
        self
    }
    /// With the sliding layers' own position embeddings (Gemma-3).
    pub(crate) fn with_local(mut self, local: Option<(Tensor, Tensor)>) -> Self {
        self.local = local;
        self
    }
    /// The position embeddings a layer gets: the local pair for a sliding
    /// layer where there is one.
    pub(crate) fn cos_sin(&self, sliding: bool) -> (&Tensor, &Tensor) {
        match (&self.local, sliding) {
            (Some((c, s)), true) => (c, s),
            _ => (&self.cos, &self.sin),
        }
    }
    /// The model's own reference goes where its locals die: the args'
    /// `position_ids` now (the model's `position_ids` local holds it on),
    /// the position embeddings `(cos, sin)` to the caller.
    fn release(self) -> PositionEmbeddings {
        let LayerArgs {
            ids_first,
            cos,
            sin,
            local,
            ids_last,
            ..
        } = self;
        drop((ids_first, ids_last));
        PositionEmbeddings {
            _sin: sin,
            _cos: cos,
            _local: local.map(|(cos, sin)| {
                Box::new(PositionEmbeddings {
                    _sin: sin,
                    _cos: cos,
                    _local: None,
                })
            }),
        }
    }
}

/// `sliding_window`, when set, must be positive.
pub(crate) fn check_sliding_window(window: Option<i64>) -> Result<()> {
    match window {
        Some(w) if w <= 0 => Err(bad(
            "sliding_window",
            format!("must be positive, found {w}"),
        )),
        _ => Ok(()),
    }
}

// ---- parameters, buffers, moving to the device ------------------------------------

/// `nn.Parameter(torch.empty(shape))` built under `from_config(dtype=W)`:
/// on the CPU, in `dtype`, requiring grad.
pub(crate) fn parameter(rt: &Runtime, shape: &[i64], dtype: DType) -> Result<Tensor> {
    Ok(vramscope_engine::nn::parameter(rt, shape, dtype)?)
}

/// Each layer's parameters, appended by `params` in its registration order
/// (what `fully_shard(layer)` takes).
pub(crate) fn per_layer<L>(
    layers: &[L],
    params: impl Fn(&L, &mut Vec<Tensor>),
) -> Option<Vec<Vec<Tensor>>> {
    Some(
        layers
            .iter()
            .map(|l| {
                let mut v = Vec::new();
                params(l, &mut v);
                v
            })
            .collect(),
    )
}

/// A CPU buffer (`nn.Buffer(t)` / `register_buffer`), not requiring grad.
pub(crate) fn cpu_buffer(rt: &Runtime, shape: &[i64], dtype: DType) -> Result<Tensor> {
    Ok(rt.empty(shape, dtype, Device::Cpu)?)
}

/// `Module._apply(lambda t: t.cuda())` for one parameter (or buffer, with
/// `Category::Buffer`): a copy on the device (`param.data = fn(param)`,
/// under `no_grad`) that keeps `requires_grad`; a tensor already on the
/// device (a tied weight moved through its first owner) is left alone.
pub(crate) fn to_cuda(t: &mut Tensor, category: Category) -> Result<()> {
    if t.device() == Device::Cuda {
        return Ok(());
    }
    let rt = t.runtime().clone();
    let out = rt.with_category(category, || rt.no_grad(|| t.to_device(Device::Cuda)))?;
    if t.requires_grad() {
        out.requires_grad_(true)?;
    }
    *t = out;
    Ok(())
}

// ---- nn.Linear / nn.Embedding -------------------------------------------------------

/// The engine's `nn.Linear` (its weight and bias through `Deref`), with
/// peft's LoRA adapter around it when [`inject_lora`] wrapped it
/// (`lora.Linear`'s `base_layer`).
#[derive(Clone)]
pub(crate) struct Linear {
    /// `base_layer`: the `nn.Linear`
    pub(crate) base: vramscope_engine::nn::Linear,
    /// peft's `lora.Linear` around it
    pub(crate) lora: Option<Lora>,
}

impl std::ops::Deref for Linear {
    type Target = vramscope_engine::nn::Linear;
    fn deref(&self) -> &Self::Target {
        &self.base
    }
}

impl std::ops::DerefMut for Linear {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.base
    }
}

/// The adapter of peft's `lora.Linear` (`tuners/lora/layer.py`): `lora_A`
/// `(r, in)` and `lora_B` `(out, r)` (float32 once `cast_adapter_dtype`
/// upcast them), `scaling = lora_alpha / r`, `lora_dropout`.
#[derive(Clone)]
pub(crate) struct Lora {
    /// `lora_A.default.weight`
    pub(crate) a: Tensor,
    /// `lora_B.default.weight`
    pub(crate) b: Tensor,
    /// `lora_dropout` when it drops (training with p > 0); 0 is `nn.Identity`
    pub(crate) dropout: f64,
}

impl Linear {
    /// Built on the CPU in `dtype`.
    pub(crate) fn new(rt: &Runtime, inp: i64, out: i64, bias: bool, dtype: DType) -> Result<Self> {
        Ok(Linear {
            base: vramscope_engine::nn::Linear::new_in(rt, inp, out, bias, dtype)?,
            lora: None,
        })
    }
    /// `self(x)`, attributed to module `name`. With LoRA, peft's
    /// `lora.Linear.forward`:
    ///
    /// ```python
    /// result = self.base_layer(x); torch_result_dtype = result.dtype
    /// x = self._cast_input_dtype(x, lora_A.weight.dtype)     # a float32 copy of bf16/fp16 inputs
    /// result = result + lora_B(lora_A(dropout(x))) * scaling  # promoted to float32
    /// result = result.to(torch_result_dtype)
    /// ```
    pub(crate) fn forward(&self, name: &str, x: &Tensor) -> Result<Tensor> {
        let rt = x.runtime().clone();
        rt.in_module(name, || -> Result<Tensor> {
            let result = x.linear(&self.weight, self.bias.as_ref())?;
            let Some(l) = &self.lora else {
                return Ok(result);
            };
            let dtype = result.dtype();
            let xf = if x.dtype() == l.a.dtype() {
                x.clone()
            } else {
                x.to_dtype(l.a.dtype())?
            };
            let delta = {
                let dropped = if l.dropout > 0.0 {
                    Some(rt.in_module("lora_dropout.default", || xf.dropout(l.dropout, true))?)
                } else {
                    None
                };
                let a = rt.in_module("lora_A.default", || {
                    dropped.as_ref().unwrap_or(&xf).linear(&l.a, None)
                })?;
                drop(dropped);
                let b = rt.in_module("lora_B.default", || a.linear(&l.b, None))?;
                drop(a);
                let scaled = b.mul_scalar(1.0)?;
                drop(b);
                scaled
            };
            let sum = result.add(&delta)?;
            drop(delta);
            drop(result);
            let out = if sum.dtype() == dtype {
                sum
            } else {
                let o = sum.to_dtype(dtype)?;
                drop(sum);
                o
            };
            drop(xf);
            Ok(out)
        })
    }
    /// `_apply`: weight, then bias.
    pub(crate) fn cuda(&mut self) -> Result<()> {
        to_cuda(&mut self.weight, Category::Parameter)?;
        if let Some(b) = &mut self.bias {
            to_cuda(b, Category::Parameter)?;
        }
        Ok(())
    }
    /// `parameters()`: weight, then bias (peft's `base_layer`), then the
    /// adapter's A and B.
    pub(crate) fn params(&self, out: &mut Vec<Tensor>) {
        out.push(self.weight.clone());
        out.extend(self.bias.clone());
        if let Some(l) = &self.lora {
            out.push(l.a.clone());
            out.push(l.b.clone());
        }
    }
}

/// `get_peft_model(model, LoraConfig(r, lora_alpha, target_modules,
/// lora_dropout))` over `linears` (every `nn.Linear` with its module name,
/// in `named_modules()` order): each target (its name, or its name's last
/// component, in `targets`) gets `lora_A` and `lora_B`, moved to the
/// device in the base weight's dtype (`_move_adapter_to_device_of_base_layer`);
/// then `cast_adapter_dtype` upcasts bf16/fp16 adapters to float32 module
/// by module (A, then B: a float32 copy, the old one freed); then
/// `_mark_only_adapters_as_trainable` freezes everything else. Under
/// [`Runtime::parameters_on_device_unallocated`] (peft on the CPU model
/// before FSDP2 shards it) the adapters take that dtype, storage-less.
/// Returns how many layers it wrapped.
pub(crate) fn inject_lora(
    rt: &Runtime,
    linears: Vec<(String, &mut Linear)>,
    frozen: &[Tensor],
    r: i64,
    targets: &[String],
    dropout: f64,
) -> Result<usize> {
    let matches = |name: &str| {
        targets
            .iter()
            .any(|t| name == t || name.ends_with(&format!(".{t}")))
    };
    let mut wrapped: Vec<&mut Linear> = linears
        .into_iter()
        .filter(|(n, _)| matches(n))
        .map(|(_, l)| l)
        .collect();
    // before `fully_shard` (FSDP2's unsharded parameters): the adapters on
    // the device with empty storages, in the dtype the caller set
    if let Some(dt) = rt.parameters_on_device_unallocated() {
        for l in wrapped.iter_mut() {
            let (out, inp) = (l.weight.size(0), l.weight.size(1));
            let a = rt.device_unallocated(&[r, inp], dt)?;
            let b = rt.device_unallocated(&[out, r], dt)?;
            l.lora = Some(Lora { a, b, dropout });
        }
    }
    rt.no_grad(|| -> Result<()> {
        rt.with_category(Category::Parameter, || -> Result<()> {
            for l in wrapped.iter_mut().filter(|l| l.lora.is_none()) {
                let (out, inp) = (l.weight.size(0), l.weight.size(1));
                let dt = l.weight.dtype();
                let a = rt.empty(&[r, inp], dt, Device::Cuda)?;
                let b = rt.empty(&[out, r], dt, Device::Cuda)?;
                l.lora = Some(Lora { a, b, dropout });
            }
            if rt.parameters_on_device_unallocated().is_some() {
                return Ok(());
            }
            for l in wrapped.iter_mut() {
                let lora = l.lora.as_mut().expect("set above");
                for t in [&mut lora.a, &mut lora.b] {
                    if matches!(t.dtype(), DType::BF16 | DType::F16) {
                        let up = t.to_dtype(DType::F32)?;
                        *t = up;
                    }
                }
            }
            Ok(())
        })
    })?;
    for p in frozen {
        p.requires_grad_(false)?;
    }
    for l in &wrapped {
        let lora = l.lora.as_ref().expect("set above");
        lora.a.requires_grad_(true)?;
        lora.b.requires_grad_(true)?;
    }
    Ok(wrapped.len())
}

/// `nn.Embedding(num, dim, padding_idx)`: `F.embedding(ids, weight)` (the
/// padding index changes no memory).
#[derive(Clone)]
pub(crate) struct Embedding {
    /// `(num, dim)`
    pub(crate) weight: Tensor,
}

impl Embedding {
    /// Built on the CPU in `dtype`.
    pub(crate) fn new(rt: &Runtime, num: i64, dim: i64, dtype: DType) -> Result<Self> {
        Ok(Embedding {
            weight: parameter(rt, &[num, dim], dtype)?,
        })
    }
    /// `self(ids)`, attributed to module `name`.
    pub(crate) fn forward(&self, name: &str, ids: &Tensor) -> Result<Tensor> {
        let rt = ids.runtime().clone();
        Ok(rt.in_module(name, || Tensor::embedding(&self.weight, ids))?)
    }
}

/// `nn.LayerNorm`: the engine's (weight, then bias).
pub(crate) use vramscope_engine::nn::LayerNorm;

// ---- activations, the gated MLP -----------------------------------------------------

/// The `ACT2FN` entries vramscope models (`activations.py`), each with the
/// ops it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// `gelu_new`: `NewGELUActivation`, a composite of pointwise ops
    GeluNew,
    /// `gelu`: `GELUActivation` → `F.gelu` (saves its input)
    Gelu,
    /// `gelu_pytorch_tanh`: `GELUTanh` → `F.gelu(approximate="tanh")` (saves its input)
    GeluTanh,
    /// `gelu_fast`: `FastGELUActivation`, a composite
    GeluFast,
    /// `quick_gelu`: `QuickGELUActivation`: `input * torch.sigmoid(1.702 * input)`
    QuickGelu,
    /// `relu`: `nn.ReLU` (saves its result)
    Relu,
    /// `silu` (`SiLUActivation`) / `swish` (`nn.SiLU`): `F.silu` (saves its input)
    Silu,
    /// `tanh`: `nn.Tanh` (saves its result)
    Tanh,
}

impl Act {
    /// The activation named `name` in config field `field`.
    pub(crate) fn parse(field: &str, name: &str) -> Result<Act> {
        Ok(match name {
            "gelu_new" => Act::GeluNew,
            "gelu" => Act::Gelu,
            "gelu_pytorch_tanh" => Act::GeluTanh,
            "gelu_fast" => Act::GeluFast,
            "quick_gelu" => Act::QuickGelu,
            "relu" => Act::Relu,
            "silu" | "swish" => Act::Silu,
            "tanh" => Act::Tanh,
            other => {
                return Err(ModelError::Unsupported(format!(
                    "config field `{field}` = \"{other}\" (modelled: gelu_new, gelu, \
                     gelu_pytorch_tanh, gelu_fast, quick_gelu, relu, silu, swish, tanh)"
                )))
            }
        })
    }

    /// `ACT2FN[name](x)`.
    pub(crate) fn forward(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Act::GeluNew => new_gelu(x),
            Act::Gelu | Act::GeluTanh => Ok(x.gelu()?),
            Act::GeluFast => fast_gelu(x),
            Act::QuickGelu => {
                // input * torch.sigmoid(1.702 * input)
                let m = x.mul_scalar(1.702)?;
                let s = m.sigmoid()?;
                drop(m);
                Ok(x.mul(&s)?)
            }
            Act::Relu => Ok(x.relu()?),
            Act::Silu => Ok(x.silu()?),
            Act::Tanh => Ok(x.tanh()?),
        }
    }
}

/// `NewGELUActivation.forward`: `0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0
/// / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))`, evaluated as
/// CPython does (left operand first; a temporary dies as soon as the op that
/// consumes it returns, unless its autograd node saved it).
pub(crate) fn new_gelu(x: &Tensor) -> Result<Tensor> {
    let half = x.mul_scalar(0.5)?;
    let cube = x.pow_scalar(3.0)?; // PowBackward0 saves `input`
    let scaled = cube.mul_scalar(0.044715)?;
    drop(cube);
    let inner = x.add(&scaled)?;
    drop(scaled);
    let arg = inner.mul_scalar((2.0 / std::f64::consts::PI).sqrt())?;
    drop(inner);
    let t = arg.tanh()?; // TanhBackward0 saves its result
    drop(arg);
    let one_plus = t.add_scalar(1.0)?;
    drop(t);
    let out = half.mul(&one_plus)?; // MulBackward0 saves both operands
    drop(half);
    drop(one_plus);
    Ok(out)
}

/// `FastGELUActivation.forward`: `0.5 * input * (1.0 + torch.tanh(input *
/// 0.7978845608 * (1.0 + 0.044715 * input * input)))`.
fn fast_gelu(x: &Tensor) -> Result<Tensor> {
    let half = x.mul_scalar(0.5)?;
    let a = x.mul_scalar(0.797_884_560_8)?;
    let b = x.mul_scalar(0.044715)?;
    let bb = b.mul(x)?;
    drop(b);
    let c = bb.add_scalar(1.0)?;
    drop(bb);
    let arg = a.mul(&c)?;
    drop(a);
    drop(c);
    let t = arg.tanh()?;
    drop(arg);
    let one_plus = t.add_scalar(1.0)?;
    drop(t);
    let out = half.mul(&one_plus)?;
    drop(half);
    drop(one_plus);
    Ok(out)
}

impl Act {
    /// [`Act::parse`] for a gated MLP (`LlamaMLP`, `Gemma2MLP`): the
    /// activations modelled there.
    pub(crate) fn parse_gated(field: &str, name: &str) -> Result<Act> {
        match name {
            "silu" | "swish" | "gelu" | "gelu_pytorch_tanh" | "relu" => Act::parse(field, name),
            other => Err(ModelError::Unsupported(format!(
                "config field `{field}` = {other:?} (modelled: silu, swish, gelu, \
                 gelu_pytorch_tanh, relu)"
            ))),
        }
    }
}

/// `LlamaMLP` (and `Gemma2MLP`, ...): `down_proj(act_fn(gate_proj(x)) * up_proj(x))`.
#[derive(Clone)]
pub(crate) struct GatedMlp {
    pub(crate) gate_proj: Linear,
    pub(crate) up_proj: Linear,
    pub(crate) down_proj: Linear,
    act: Act,
}

impl GatedMlp {
    /// Built on the CPU in `dtype`.
    pub(crate) fn new(
        rt: &Runtime,
        hidden: i64,
        intermediate: i64,
        bias: bool,
        act: Act,
        dtype: DType,
    ) -> Result<Self> {
        Ok(GatedMlp {
            gate_proj: Linear::new(rt, hidden, intermediate, bias, dtype)?,
            up_proj: Linear::new(rt, hidden, intermediate, bias, dtype)?,
            down_proj: Linear::new(rt, intermediate, hidden, bias, dtype)?,
            act,
        })
    }

    /// The forward: the gate's activation, the up projection, their
    /// product (both die), `down_proj` (the product dies).
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let rt = x.runtime().clone();
        let act = {
            let g = self.gate_proj.forward("gate_proj", x)?;
            rt.in_module("act_fn", || self.act.forward(&g))?
        };
        let up = self.up_proj.forward("up_proj", x)?;
        let p = act.mul(&up)?;
        drop(act);
        drop(up);
        let out = self.down_proj.forward("down_proj", &p)?;
        drop(p);
        Ok(out)
    }

    /// `Module._apply(cuda)`: gate, up, down.
    pub(crate) fn cuda(&mut self) -> Result<()> {
        self.gate_proj.cuda()?;
        self.up_proj.cuda()?;
        self.down_proj.cuda()
    }

    /// Its parameters, in registration order.
    pub(crate) fn params(&self, out: &mut Vec<Tensor>) {
        self.gate_proj.params(out);
        self.up_proj.params(out);
        self.down_proj.params(out);
    }
}

// ---- LlamaRMSNorm -------------------------------------------------------------------

/// `LlamaRMSNorm(hidden, eps)` (also Mistral/Qwen2/Qwen3/Phi3 RMSNorm):
///
/// ```python
/// input_dtype = hidden_states.dtype
/// hidden_states = hidden_states.to(torch.float32)          # a copy unless fp32
/// variance = hidden_states.pow(2).mean(-1, keepdim=True)   # pow dies after mean
/// hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
/// return self.weight * hidden_states.to(input_dtype)
/// ```
///
/// In training, `PowBackward0` and `MulBackward0` save the fp32 input,
/// `RsqrtBackward0` its result, the last `MulBackward0` the cast-back
/// normalised states (and the weight); at return `hidden_states`, then
/// `variance`, are released.
#[derive(Clone)]
pub(crate) struct RmsNorm {
    /// `(hidden,)`, `torch.ones` in the weight dtype
    pub(crate) weight: Tensor,
    /// `variance_epsilon` (changes no memory)
    pub(crate) eps: f64,
}

impl RmsNorm {
    /// Built on the CPU in `dtype`.
    pub(crate) fn new(rt: &Runtime, hidden: i64, eps: f64, dtype: DType) -> Result<Self> {
        Ok(RmsNorm {
            weight: parameter(rt, &[hidden], dtype)?,
            eps,
        })
    }

    /// `self(x)`, attributed to module `name`.
    pub(crate) fn forward(&self, name: &str, x: &Tensor) -> Result<Tensor> {
        let rt = x.runtime().clone();
        rt.in_module(name, || self.forward_inner(x))
    }

    fn forward_inner(&self, x: &Tensor) -> Result<Tensor> {
        let input_dtype = x.dtype();
        let mut hidden = x.to_dtype(DType::F32)?;
        let variance = {
            let p = hidden.pow_scalar(2.0)?;
            p.mean_dims(&[-1], true)?
        };
        let normed = {
            let a = variance.add_scalar(self.eps)?;
            let r = a.rsqrt()?;
            drop(a);
            hidden.mul(&r)?
            // `r` dies after the product, then the old `hidden` at the rebinding
        };
        hidden = normed;
        let out = {
            let c = hidden.to_dtype(input_dtype)?;
            self.weight.mul(&c)?
        };
        drop(hidden);
        drop(variance);
        Ok(out)
    }
}

// ---- rotary embedding ---------------------------------------------------------------

/// The `rope_type`s whose memory is that of the default RoPE: their
/// `inv_freq` is computed once on the CPU at init (same length), and their
/// forward is the default one (only `dynamic` and `longrope` recompute
/// `inv_freq` in `dynamic_rope_update`; those are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RopeType {
    /// `compute_default_rope_parameters`
    Default,
    /// `_compute_linear_scaling_rope_parameters`
    Linear,
    /// `_compute_llama3_parameters`
    Llama3,
    /// `_compute_yarn_parameters` (its `attention_factor` scales cos/sin:
    /// the same allocations)
    Yarn,
}

/// Read the RoPE type from `rope_parameters` (transformers 5) or the legacy
/// `rope_scaling` (`rope_type` or `type`); absent means `default`.
pub(crate) fn rope_type(config: &HfConfig) -> Result<RopeType> {
    let from = |key: &str| -> Result<Option<String>> {
        let Some(v) = config.get(key) else {
            return Ok(None);
        };
        let obj = v.as_object().ok_or_else(|| ModelError::Field {
            field: key.into(),
            detail: format!("expected an object, found {v}"),
        })?;
        let t = obj.get("rope_type").or_else(|| obj.get("type"));
        match t {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ModelError::Field {
                field: format!("{key}.rope_type"),
                detail: format!("expected a string, found {other}"),
            }),
        }
    };
    let t = match from("rope_parameters")? {
        Some(t) => Some(t),
        None => from("rope_scaling")?,
    };
    match t.as_deref() {
        None | Some("default") => Ok(RopeType::Default),
        Some("linear") => Ok(RopeType::Linear),
        Some("llama3") => Ok(RopeType::Llama3),
        Some("yarn") => Ok(RopeType::Yarn),
        Some(other) => Err(ModelError::Unsupported(format!(
            "rope_type `{other}` (only default, linear, llama3 and yarn RoPE are modelled: \
             dynamic and longrope recompute inv_freq during the forward)"
        ))),
    }
}

/// `LlamaRotaryEmbedding` (identical in Mistral/Qwen2/Qwen3): the float32
/// buffers `inv_freq` and `original_inv_freq` (`ceil(dim/2)` elements,
/// `torch.arange(0, dim, 2, dtype=torch.float)` whatever the weight dtype),
/// and a forward under `torch.no_grad()`:
///
/// ```python
/// inv_freq_expanded = self.inv_freq[None, :, None].expand(b, -1, 1).to(float, device)  # views
/// position_ids_expanded = position_ids[:, None, :].float()                            # (b,1,s) f32
/// with maybe_autocast(device_type, enabled=False):   # autocast off inside, if it was on
///     freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)             # bmm (b,d/2,s)
///     emb = torch.cat((freqs, freqs), dim=-1)                                         # (b,s,d) f32
///     cos = emb.cos() * self.attention_scaling                                        # cos() dies
///     sin = emb.sin() * self.attention_scaling
/// return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)    # copies unless x is f32
/// # locals die: position_ids_expanded, freqs, emb, cos, sin
/// ```
#[derive(Clone)]
pub(crate) struct RotaryEmbedding {
    /// `inv_freq` (`(ceil(dim/2),)` float32)
    pub(crate) inv_freq: Tensor,
    /// `original_inv_freq` (a clone)
    pub(crate) original_inv_freq: Tensor,
}

impl RotaryEmbedding {
    /// The module for rotary dimension `dim` (`head_dim`, or
    /// `head_dim * partial_rotary_factor`), buffers on the CPU.
    pub(crate) fn new(rt: &Runtime, dim: i64, _kind: RopeType) -> Result<Self> {
        let n = (dim + 1) / 2;
        Ok(RotaryEmbedding {
            inv_freq: cpu_buffer(rt, &[n], DType::F32)?,
            original_inv_freq: cpu_buffer(rt, &[n], DType::F32)?,
        })
    }

    /// `_apply`: the buffers in registration order.
    pub(crate) fn cuda(&mut self) -> Result<()> {
        to_cuda(&mut self.inv_freq, Category::Buffer)?;
        to_cuda(&mut self.original_inv_freq, Category::Buffer)
    }

    /// `self(x, position_ids)` → `(cos, sin)` in `x`'s dtype, attributed to
    /// module `name`.
    pub(crate) fn forward(
        &self,
        name: &str,
        x: &Tensor,
        position_ids: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let rt = x.runtime().clone();
        rt.in_module(name, || rt.no_grad(|| self.forward_inner(x, position_ids)))
    }

    fn forward_inner(&self, x: &Tensor, position_ids: &Tensor) -> Result<(Tensor, Tensor)> {
        let rt = x.runtime().clone();
        let b = position_ids.size(0);
        let inv_freq_expanded = self
            .inv_freq
            .unsqueeze(0)?
            .unsqueeze(-1)?
            .expand(&[b, -1, 1])?
            .to_dtype(DType::F32)?;
        let position_ids_expanded = position_ids.unsqueeze(1)?.to_dtype(DType::F32)?;
        let (freqs, emb, cos, sin) = autocast_disabled(&rt, || {
            let freqs = inv_freq_expanded
                .matmul(&position_ids_expanded)?
                .transpose(1, 2);
            let emb = Tensor::cat(&[&freqs, &freqs], -1)?;
            // `emb.cos() * self.attention_scaling`: the scaling is a Python
            // float, so the product is a new tensor even when it is 1.0
            let cos = emb.cos()?.mul_scalar(1.0)?;
            let sin = emb.sin()?.mul_scalar(1.0)?;
            Ok((freqs, emb, cos, sin))
        })?;
        let out_cos = cos.to_dtype(x.dtype())?;
        let out_sin = sin.to_dtype(x.dtype())?;
        drop(inv_freq_expanded);
        drop(position_ids_expanded);
        drop(freqs);
        drop(emb);
        drop(cos);
        drop(sin);
        Ok((out_cos, out_sin))
    }
}

/// `with maybe_autocast(device_type, enabled=False):` — a nested
/// `torch.autocast(enabled=False)` region when autocast is on (so the
/// matmul runs in float32), nothing otherwise.
pub(crate) fn autocast_disabled<T>(rt: &Runtime, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if rt.is_autocast_enabled() {
        let mut out = None;
        rt.autocast_with(AutocastConfig::disabled(), || {
            out = Some(f());
            Ok::<(), vramscope_engine::EngineError>(())
        })?;
        out.unwrap_or_else(|| Err(ModelError::Unsupported("autocast region".into())))
    } else {
        f()
    }
}

/// `rotate_half(x)`: `torch.cat((-x2, x1), dim=-1)` of the two halves (slice
/// views); `-x2` dies with the call.
pub(crate) fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let h = x.size(-1) / 2;
    let x1 = x.slice(-1, None, Some(h));
    let x2 = x.slice(-1, Some(h), None);
    let n = x2.neg()?;
    let out = Tensor::cat(&[&n, &x1], -1)?;
    drop(n);
    Ok(out)
}

/// `apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`:
///
/// ```python
/// cos = cos.unsqueeze(unsqueeze_dim); sin = sin.unsqueeze(unsqueeze_dim)
/// q_embed = (q * cos) + (rotate_half(q) * sin)
/// k_embed = (k * cos) + (rotate_half(k) * sin)
/// ```
///
/// Each line: `q*cos`, `rotate_half(q)` (which dies after `* sin`), the
/// sum; then the two products die, left operand first.
pub(crate) fn apply_rotary_pos_emb(
    q: &Tensor,
    k: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let cos = cos.unsqueeze(1)?;
    let sin = sin.unsqueeze(1)?;
    let embed = |x: &Tensor| -> Result<Tensor> {
        let a = x.mul(&cos)?;
        let b = {
            let r = rotate_half(x)?;
            r.mul(&sin)?
        };
        let out = a.add(&b)?;
        drop(a);
        drop(b);
        Ok(out)
    };
    let q_embed = embed(q)?;
    let k_embed = embed(k)?;
    Ok((q_embed, k_embed))
}

// ---- attention ----------------------------------------------------------------------

/// `repeat_kv(x, n_rep)`: `x[:, :, None].expand(b, h, n_rep, s, d).reshape(b,
/// h*n_rep, s, d)` — a contiguous copy (the expanded view cannot be
/// viewed); `x` itself when `n_rep == 1`.
pub(crate) fn repeat_kv(x: &Tensor, n_rep: i64) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x.clone());
    }
    let (b, h, s, d) = (x.size(0), x.size(1), x.size(2), x.size(3));
    let e = x.unsqueeze(2)?.expand(&[b, h, n_rep, s, d])?;
    Ok(e.reshape(&[b, h * n_rep, s, d])?)
}

/// `integrations/sdpa_attention.sdpa_attention_forward` for a module with
/// `num_key_value_groups = n_kv_groups` and `is_causal = True`:
///
/// - GQA goes to SDPA (`enable_gqa=True`) when there is no mask and the
///   head dims are equal and at most 256 (`use_gqa_in_sdpa`), else
///   [`repeat_kv`] copies key and value;
/// - `is_causal = q_len > 1 and attention_mask is None`;
/// - keys longer than the queries are cut (a view) when causal;
/// - `attn_output.transpose(1, 2).contiguous()`: no copy for the
///   flash/efficient/cuDNN outputs (stored as `(b, s, h, d)`), a copy for
///   the math backend's.
///
/// Returns `(b, s, h, d)`.
pub(crate) fn sdpa_attention_forward(
    query: &Tensor,
    key: &Tensor,
    value: &Tensor,
    attention_mask: Option<&Tensor>,
    dropout: f64,
    scaling: f64,
    n_kv_groups: i64,
) -> Result<Tensor> {
    let mut key = key.clone();
    let mut value = value.clone();
    let mut enable_gqa = false;
    if n_kv_groups > 1 {
        let gqa = attention_mask.is_none() && key.size(-1) == value.size(-1) && key.size(-1) <= 256;
        if gqa {
            enable_gqa = true;
        } else {
            key = repeat_kv(&key, n_kv_groups)?;
            value = repeat_kv(&value, n_kv_groups)?;
        }
    }
    let q_len = query.size(2);
    let kv_len = key.size(2);
    let is_causal = q_len > 1 && attention_mask.is_none();
    if is_causal && kv_len > q_len {
        key = key.slice(2, None, Some(q_len));
        value = value.slice(2, None, Some(q_len));
    }
    let out = Tensor::sdpa(
        query,
        &key,
        &value,
        &SdpaArgs {
            attn_mask: attention_mask,
            dropout_p: dropout,
            is_causal,
            scale: Some(scaling),
            enable_gqa,
        },
    )?;
    let t = out.transpose(1, 2);
    drop(out);
    let c = t.contiguous()?;
    drop(t);
    Ok(c)
}

/// What the attention interface reads of a decoder's attention module
/// (`LlamaAttention`, `Phi3Attention`, `Gemma2Attention`) besides its
/// projections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sdpa {
    /// `layer_idx` (its cache layer)
    pub(crate) layer_idx: usize,
    /// `num_key_value_groups`
    pub(crate) n_kv_groups: i64,
    /// `scaling`
    pub(crate) scaling: f64,
    /// `attention_dropout`
    pub(crate) dropout: f64,
}

impl Sdpa {
    /// Layer `layer_idx`'s: `num_key_value_groups = heads // kv_heads`.
    pub(crate) fn new(
        layer_idx: usize,
        heads: i64,
        kv_heads: i64,
        scaling: f64,
        dropout: f64,
    ) -> Self {
        Sdpa {
            layer_idx,
            n_kv_groups: heads / kv_heads,
            scaling,
            dropout,
        }
    }
    /// The attention of the projected `(b, heads, s, head_dim)` states, up
    /// to `o_proj`:
    ///
    /// ```python
    /// if past_key_values is not None:
    ///     key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
    /// attn_output, attn_weights = attention_interface(self, query_states, key_states, value_states,
    ///     attention_mask, dropout=0.0 if not self.training else self.attention_dropout,
    ///     scaling=self.scaling)
    /// attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    /// ```
    ///
    /// The cache update rebinds `key` and `value` (the old ones die there);
    /// the states stay the caller's, to die at its return.
    pub(crate) fn attend(
        &self,
        query: &Tensor,
        key: &mut Tensor,
        value: &mut Tensor,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<KvCache>>,
        training: bool,
    ) -> Result<Tensor> {
        let (b, s) = (query.size(0), query.size(2));
        if let Some(c) = cache {
            let (k, v) = c.borrow_mut().update(key, value, self.layer_idx)?;
            *key = k;
            *value = v;
        }
        let dropout = if training { self.dropout } else { 0.0 };
        let attn = sdpa_attention_forward(
            query,
            key,
            value,
            mask,
            dropout,
            self.scaling,
            self.n_kv_groups,
        )?;
        let r = attn.reshape(&[b, s, -1])?;
        drop(attn);
        Ok(r.contiguous()?)
    }
}

/// `LlamaAttention` (Mistral's, Qwen2's, Qwen3's with `q_norm`/`k_norm`,
/// and `Gemma2Attention`, whose `softcap` and `sliding_window` the `sdpa`
/// interface swallows in its `**kwargs`).
#[derive(Clone)]
pub(crate) struct Attention {
    pub(crate) q_proj: Linear,
    pub(crate) k_proj: Linear,
    pub(crate) v_proj: Linear,
    pub(crate) o_proj: Linear,
    /// Qwen3's RMSNorms over `head_dim`, applied before the transpose
    pub(crate) q_norm: Option<RmsNorm>,
    pub(crate) k_norm: Option<RmsNorm>,
    pub(crate) head_dim: i64,
    pub(crate) sdpa: Sdpa,
}

/// What an [`Attention`] is built from (its config's fields).
pub(crate) struct AttentionConfig {
    pub(crate) hidden: i64,
    pub(crate) heads: i64,
    pub(crate) kv_heads: i64,
    pub(crate) head_dim: i64,
    /// `attention_bias` of q, k and v
    pub(crate) qkv_bias: bool,
    /// `o_proj`'s bias
    pub(crate) o_bias: bool,
    pub(crate) scaling: f64,
    pub(crate) dropout: f64,
    /// Qwen3's `q_norm`/`k_norm` (their `rms_norm_eps`)
    pub(crate) qk_norm_eps: Option<f64>,
}

impl Attention {
    /// Layer `layer_idx`'s attention, built on the CPU in `dtype` in
    /// registration order: `q_proj`, `k_proj`, `v_proj`, `o_proj`, then
    /// Qwen3's `q_norm` and `k_norm`.
    pub(crate) fn new(
        rt: &Runtime,
        layer_idx: usize,
        c: &AttentionConfig,
        dtype: DType,
    ) -> Result<Self> {
        let (h, hd) = (c.hidden, c.head_dim);
        let norm = || -> Result<Option<RmsNorm>> {
            c.qk_norm_eps
                .map(|eps| RmsNorm::new(rt, hd, eps, dtype))
                .transpose()
        };
        Ok(Attention {
            q_proj: Linear::new(rt, h, c.heads * hd, c.qkv_bias, dtype)?,
            k_proj: Linear::new(rt, h, c.kv_heads * hd, c.qkv_bias, dtype)?,
            v_proj: Linear::new(rt, h, c.kv_heads * hd, c.qkv_bias, dtype)?,
            o_proj: Linear::new(rt, c.heads * hd, h, c.o_bias, dtype)?,
            q_norm: norm()?,
            k_norm: norm()?,
            head_dim: hd,
            sdpa: Sdpa::new(layer_idx, c.heads, c.kv_heads, c.scaling, c.dropout),
        })
    }

    /// The forward of `x` with the position embeddings `(cos, sin)`:
    /// `self.q_proj(hidden_states).view(hidden_shape)` (Qwen3: its `q_norm`),
    /// `.transpose(1, 2)`, the same for k and v, RoPE, [`Sdpa::attend`],
    /// `o_proj`; then the locals die: query_states, key_states, value_states.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        training: bool,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<KvCache>>,
    ) -> Result<Tensor> {
        let query_states = self.project(
            x,
            &self.q_proj,
            "q_proj",
            self.q_norm.as_ref().map(|n| (n, "q_norm")),
        )?;
        let key_states = self.project(
            x,
            &self.k_proj,
            "k_proj",
            self.k_norm.as_ref().map(|n| (n, "k_norm")),
        )?;
        let value_states = self.project(x, &self.v_proj, "v_proj", None)?;
        self.rotate_attend(
            (query_states, key_states, value_states),
            (cos, sin),
            training,
            mask,
            cache,
        )
    }

    /// `lin(x).view(b, s, -1, head_dim)` (the projection dies at the
    /// rebinding), Qwen3's `norm` (the view dies), `.transpose(1, 2)`.
    pub(crate) fn project(
        &self,
        x: &Tensor,
        lin: &Linear,
        name: &str,
        norm: Option<(&RmsNorm, &str)>,
    ) -> Result<Tensor> {
        let p = lin.forward(name, x)?;
        let v = p.view(&[x.size(0), x.size(1), -1, self.head_dim])?;
        drop(p);
        match norm {
            Some((n, nname)) => {
                let o = n.forward(nname, &v)?;
                drop(v);
                Ok(o.transpose(1, 2))
            }
            None => Ok(v.transpose(1, 2)),
        }
    }

    /// The forward from the projected states on: RoPE (the states before it
    /// die at the rebinding unless saved), [`Sdpa::attend`], `o_proj`; then
    /// the locals die: query_states, key_states, value_states.
    pub(crate) fn rotate_attend(
        &self,
        (mut query_states, mut key_states, mut value_states): (Tensor, Tensor, Tensor),
        (cos, sin): (&Tensor, &Tensor),
        training: bool,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<KvCache>>,
    ) -> Result<Tensor> {
        let (qe, ke) = apply_rotary_pos_emb(&query_states, &key_states, cos, sin)?;
        query_states = qe;
        key_states = ke;
        let attn = self.sdpa.attend(
            &query_states,
            &mut key_states,
            &mut value_states,
            mask,
            cache,
            training,
        )?;
        let out = self.o_proj.forward("o_proj", &attn)?;
        drop(attn);
        drop(query_states);
        drop(key_states);
        drop(value_states);
        Ok(out)
    }

    /// `Module._apply(cuda)`: q, k, v, o, then the norms.
    pub(crate) fn cuda(&mut self) -> Result<()> {
        self.q_proj.cuda()?;
        self.k_proj.cuda()?;
        self.v_proj.cuda()?;
        self.o_proj.cuda()?;
        for n in [&mut self.q_norm, &mut self.k_norm].into_iter().flatten() {
            to_cuda(&mut n.weight, Category::Parameter)?;
        }
        Ok(())
    }

    /// Its parameters, in registration order.
    pub(crate) fn params(&self, out: &mut Vec<Tensor>) {
        self.q_proj.params(out);
        self.k_proj.params(out);
        self.v_proj.params(out);
        self.o_proj.params(out);
        for n in [&self.q_norm, &self.k_norm].into_iter().flatten() {
            out.push(n.weight.clone());
        }
    }
}

// ---- position ids and masks ---------------------------------------------------------

/// `torch.arange(seq, device=dev) + past_seen_tokens` then `.unsqueeze(0)`
/// (the `+ 0` is a new tensor: the `arange` dies after it).
pub(crate) fn position_ids(rt: &Runtime, seq: i64, _past_seen: i64) -> Result<Tensor> {
    let a = rt.arange(seq, DType::I64, Device::Cuda)?;
    let p = a.add_scalar(0.0)?;
    drop(a);
    Ok(p.unsqueeze(0)?)
}

/// `masking_utils.find_packed_sequence_indices(position_ids)` (run when
/// there is no cache, e.g. under gradient checkpointing): for the position
/// ids the models build (one sequence per row) it finds no packing and
/// returns `None`, after these allocations (batch `b`, length `s`):
///
/// ```python
/// first_dummy_value = position_ids[:, :1] - 1                                  # (b,1) int64
/// position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)  # cat (b,s+1), then a
///                                                                              # narrow - narrow (b,s)
/// packed_sequence_mask = (position_diff != 1).cumsum(-1)   # bool (b,s); cumsum output int64 (b,s),
///                                                          # then the bool input cast to int64 (temp)
/// if (packed_sequence_mask[:, -1] == 0).all(): return None # bool (b,), bool ()
/// ```
///
/// With `b == 1` (`numel == size(dim)`) CUDA's `scan_dim` takes CUB's
/// temporary storage for the scan (`Tensor::cumsum`).
pub(crate) fn find_packed_sequence_indices(position_ids: &Tensor) -> Result<()> {
    let first_dummy_value = {
        let s = position_ids.slice(1, None, Some(1));
        s.sub_scalar(1.0)?
    };
    let position_diff = {
        let cat = Tensor::cat(&[&first_dummy_value, position_ids], -1)?;
        let n = cat.size(-1) - 1;
        let hi = cat.narrow(-1, 1, n);
        let lo = cat.narrow(-1, 0, n);
        let d = hi.sub(&lo)?;
        drop(lo);
        drop(hi);
        drop(cat);
        d
    };
    let packed_sequence_mask = {
        let ne = position_diff.ne_scalar(1.0)?;
        // cumsum_out: the int64 output, `self.to(int64)`, and at batch 1
        // CUB's scan storage
        let out = ne.cumsum(-1)?;
        drop(ne);
        out
    };
    {
        let last = packed_sequence_mask.select(1, -1);
        let eq = last.eq_scalar(0.0)?;
        let all = eq.all()?;
        drop(eq);
        drop(all);
    }
    drop(first_dummy_value);
    drop(position_diff);
    drop(packed_sequence_mask);
    Ok(())
}

/// What the mask functions need to know about the cache for the layer the
/// mask is built for (`_preprocess_mask_arguments`).
fn mask_sizes(cache: Option<&KvCache>, q_len: i64, sliding: bool) -> (i64, i64, i64) {
    match cache {
        Some(c) => {
            // create_causal_mask: the first full layer; sliding: the first sliding one
            let idx = c
                .layers
                .iter()
                .position(|l| l.is_sliding() == sliding)
                .unwrap_or(0);
            let q_offset = c.get_seq_length(idx);
            let (kv_len, kv_offset) = c.get_mask_sizes(q_len, idx);
            (q_offset, kv_len, kv_offset)
        }
        None => (0, q_len, 0),
    }
}

/// `create_causal_mask(config, inputs_embeds, attention_mask=None,
/// past_key_values, position_ids)` for `sdpa` (no 2-D padding mask: the
/// workloads pass none). Without a cache the packed-sequence detection runs
/// first ([`find_packed_sequence_indices`]). The mask is then skipped
/// (`None`, SDPA's `is_causal`) when `q_len == 1` or `kv_len == q_len`, or
/// when the cache is empty (`q_offset == 0`); otherwise [`sdpa_mask`]
/// materialises it.
pub(crate) fn create_causal_mask(
    inputs_embeds: &Tensor,
    cache: Option<&KvCache>,
    position_ids: &Tensor,
) -> Result<Option<Tensor>> {
    let (b, q_len) = (inputs_embeds.size(0), inputs_embeds.size(1));
    let (q_offset, kv_len, _) = mask_sizes(cache, q_len, false);
    if cache.is_none() {
        let p = expand_position_ids(position_ids, b)?;
        find_packed_sequence_indices(&p)?;
    }
    // _ignore_causal_mask_sdpa (no padding mask, no local size)
    if q_len == 1 || kv_len == q_len || q_offset == 0 {
        return Ok(None);
    }
    sdpa_mask(inputs_embeds, b, q_len, kv_len, None, None).map(Some)
}

/// `create_sliding_window_causal_mask(...)` for `sdpa`: as
/// [`create_causal_mask`], except that the mask is skipped only while
/// `kv_len < sliding_window` (`_ignore_causal_mask_sdpa` with
/// `local_attention_size`); otherwise the bool mask of
/// `sliding_window_causal_mask_function` (`and_masks(sliding_window_overlay,
/// causal_mask_function)`) is materialised.
pub(crate) fn create_sliding_window_causal_mask(
    inputs_embeds: &Tensor,
    cache: Option<&KvCache>,
    position_ids: &Tensor,
    sliding_window: i64,
) -> Result<Option<Tensor>> {
    let (b, q_len) = (inputs_embeds.size(0), inputs_embeds.size(1));
    let (q_offset, kv_len, _) = mask_sizes(cache, q_len, true);
    if cache.is_none() {
        let p = expand_position_ids(position_ids, b)?;
        find_packed_sequence_indices(&p)?;
    }
    if kv_len < sliding_window && (q_len == 1 || kv_len == q_len || q_offset == 0) {
        return Ok(None);
    }
    sdpa_mask(inputs_embeds, b, q_len, kv_len, Some(sliding_window), None).map(Some)
}

/// `create_causal_mask` / `create_sliding_window_causal_mask` for `sdpa`
/// with the 2-D padding mask `generate` passes (all ones):
/// `_preprocess_mask_arguments` casts it (`attention_mask.to(bool)`, alive
/// until the mask is made); a compileable (static) cache never skips the
/// mask at one query (`allow_is_causal_skip`); `sdpa_mask` pads it with
/// `False` to `kv_length + kv_offset` (`prepare_padding_mask`, a static
/// cache's keys being longer than the tokens seen) and asks
/// [`ignore_causal_mask_sdpa`] whether to skip. A mask not skipped is
/// [`sdpa_mask`]'s with the padding folded in (`and_masks(mask_function,
/// padding_mask_function)`).
pub(crate) fn generation_mask(
    inputs_embeds: &Tensor,
    cache: &KvCache,
    attention_mask: &Tensor,
    sliding_window: Option<i64>,
) -> Result<Option<Tensor>> {
    let (b, q_len) = (inputs_embeds.size(0), inputs_embeds.size(1));
    let (q_offset, kv_len, kv_offset) = mask_sizes(Some(cache), q_len, sliding_window.is_some());
    let attention_mask = attention_mask.to_dtype(DType::Bool)?;
    let allow_skip = !(cache.is_compileable() && q_len == 1);
    // prepare_padding_mask: F.pad(attention_mask, (0, padding_length))
    let pad = kv_len + kv_offset - attention_mask.size(-1);
    let padded = if pad > 0 {
        Some(attention_mask.constant_pad(&[0, pad])?)
    } else {
        None
    };
    let padding_mask = padded.as_ref().unwrap_or(&attention_mask);
    let skip = allow_skip
        && ignore_causal_mask_sdpa(
            padding_mask,
            q_len,
            kv_len,
            q_offset,
            kv_offset,
            sliding_window,
        )?;
    let mask = if skip {
        None
    } else {
        Some(sdpa_mask(
            inputs_embeds,
            b,
            q_len,
            kv_len,
            sliding_window,
            Some(padding_mask),
        )?)
    };
    // sdpa_mask's padded mask dies at its return, the cast one at the caller's
    drop(padded);
    drop(attention_mask);
    Ok(mask)
}

/// `_ignore_causal_mask_sdpa(padding_mask, q_length, kv_length, q_offset,
/// kv_offset, local_attention_size)` for an all-ones padding mask (padded
/// with `False` past the tokens seen): a mask longer than the keys is cut
/// first (`padding_mask[:, arange(kv_length) + kv_offset]`, a sliding layer
/// past its window); a sliding layer whose keys reach the window is never
/// skipped; otherwise the mask is skipped when `q_len == 1` or `kv_len ==
/// q_len` (after `fast_all(padding_mask)`: `sum() == numel()`), or when the
/// cache is empty (`q_offset == 0`: a static cache's prefill) after
/// `fast_all(padding_mask[:, :q_length])` and `fast_all(~padding_mask[:,
/// q_length:])`. Its locals die at return: the cut mask, then the indices.
fn ignore_causal_mask_sdpa(
    padding_mask: &Tensor,
    q_len: i64,
    kv_len: i64,
    q_offset: i64,
    kv_offset: i64,
    local_attention_size: Option<i64>,
) -> Result<bool> {
    let rt = padding_mask.runtime().clone();
    let cut = if padding_mask.size(-1) > kv_len {
        let ar = rt.arange(kv_len, DType::I64, Device::Cuda)?;
        let mask_indices = ar.add_scalar(kv_offset as f64)?;
        drop(ar);
        let cut = padding_mask.index(&[None, Some(&mask_indices)])?;
        Some((cut, mask_indices))
    } else {
        None
    };
    let pm = cut.as_ref().map(|c| &c.0).unwrap_or(padding_mask);
    // fast_all(t): `t.sum() == t.numel()`, read by `bool()` and dropped
    let fast_all = |t: &Tensor| -> Result<()> {
        let sum = t.sum()?;
        let all = sum.eq_scalar(0.0)?;
        drop(sum);
        drop(all);
        Ok(())
    };
    let skip = if local_attention_size.is_some_and(|w| kv_len >= w) {
        false
    } else if q_len == 1 || kv_len == q_len {
        fast_all(pm)?;
        true
    } else if q_offset == 0 {
        fast_all(&pm.slice(1, None, Some(q_len)))?;
        let inverted = pm.slice(1, Some(q_len), None).logical_not()?;
        fast_all(&inverted)?;
        drop(inverted);
        true
    } else {
        return Err(ModelError::Unsupported(format!(
            "a generation step of {q_len} queries over {kv_len} keys (chunked prefill)"
        )));
    };
    drop(cut);
    Ok(skip)
}

/// What one forward of `generate()` passes besides `input_ids`: the 2-D
/// attention mask, the position ids and the cache, all owned by the loop.
pub(crate) struct GenStep<'a> {
    /// `attention_mask` (batch, length) int64, all ones
    pub(crate) attention_mask: &'a Tensor,
    /// `position_ids` (batch, queries) int64
    pub(crate) position_ids: &'a Tensor,
    /// `past_key_values`
    pub(crate) cache: &'a RefCell<KvCache>,
    /// the masks `prepare_inputs_for_generation` made for a compileable
    /// (static) cache (`create_masks_for_generate`), which the forward
    /// takes as they are
    pub(crate) prepared: Option<&'a Masks>,
    /// a decode forward: `_sample` runs them under
    /// `_optimize_model_for_decode`, which switches the experts of a
    /// mixture-of-experts model from `grouped_mm` to `batched_mm` on CUDA
    pub(crate) decode: bool,
}

/// `position_ids.expand(batch_size, -1)` when the batch differs (a view).
fn expand_position_ids(position_ids: &Tensor, b: i64) -> Result<Tensor> {
    if position_ids.size(0) != b {
        Ok(position_ids.expand(&[b, -1])?)
    } else {
        Ok(position_ids.clone())
    }
}

/// `sdpa_mask(...)` materialising the mask without vmap:
///
/// ```python
/// batch_arange = torch.arange(batch_size); head_arange = torch.arange(1)
/// q_arange = torch.arange(q_length) + q_offset; kv_arange = torch.arange(kv_length) + kv_offset
/// attention_mask = mask_function(b[:,None,None,None], h[None,:,None,None], q[None,None,:,None], kv[None,None,None,:])
/// attention_mask = attention_mask.expand(batch_size, -1, q_length, kv_length)
/// # locals die: batch_arange, head_arange, q_arange, kv_arange
/// ```
///
/// `causal_mask_function` is `kv_idx <= q_idx` (bool `(1,1,q,kv)`); the
/// sliding one is `and_masks(...)`: `result = q_idx.new_ones((), bool)`, then
/// per function `result = result & f(...)` (the function's mask dies, then
/// the old result). A 2-D `padding` mask wraps that in one more `and_masks`
/// whose second function is `padding_mask[batch_idx, kv_idx]`.
fn sdpa_mask(
    like: &Tensor,
    b: i64,
    q_len: i64,
    kv_len: i64,
    sliding_window: Option<i64>,
    padding: Option<&Tensor>,
) -> Result<Tensor> {
    let rt = like.runtime().clone();
    let batch_arange = rt.arange(b, DType::I64, Device::Cuda)?;
    let head_arange = rt.arange(1, DType::I64, Device::Cuda)?;
    let q_arange = {
        let a = rt.arange(q_len, DType::I64, Device::Cuda)?;
        a.add_scalar(0.0)?
    };
    let kv_arange = {
        let a = rt.arange(kv_len, DType::I64, Device::Cuda)?;
        a.add_scalar(0.0)?
    };
    let q_idx = q_arange.unsqueeze(0)?.unsqueeze(0)?.unsqueeze(-1)?;
    let kv_idx = kv_arange.unsqueeze(0)?.unsqueeze(0)?.unsqueeze(0)?;
    let and = |result: Tensor, m: Tensor| -> Result<Tensor> {
        let r = result.bitwise_and(&m)?;
        drop(m);
        drop(result);
        Ok(r)
    };
    let pattern = || -> Result<Tensor> {
        match sliding_window {
            None => Ok(kv_idx.le(&q_idx)?),
            Some(sw) => {
                let result = q_idx.new_full(&[], DType::Bool)?;
                // sliding_window_overlay: kv_idx > q_idx - sliding_window
                let overlay = {
                    let t = q_idx.sub_scalar(sw as f64)?;
                    kv_idx.gt(&t)?
                };
                let result = and(result, overlay)?;
                // causal_mask_function: kv_idx <= q_idx
                and(result, kv_idx.le(&q_idx)?)
            }
        }
    };
    let mask = match padding {
        None => pattern()?,
        Some(pm) => {
            let result = q_idx.new_full(&[], DType::Bool)?;
            let result = and(result, pattern()?)?;
            // padding_mask_function: padding_mask[batch_idx, kv_idx]
            let batch_idx = batch_arange.unsqueeze(1)?.unsqueeze(1)?.unsqueeze(1)?;
            let p = pm.index(&[Some(&batch_idx), Some(&kv_idx)])?;
            drop(batch_idx);
            and(result, p)?
        }
    };
    drop(q_idx);
    drop(kv_idx);
    let expanded = mask.expand(&[b, -1, q_len, kv_len])?;
    drop(mask);
    drop(batch_arange);
    drop(head_arange);
    drop(q_arange);
    drop(kv_arange);
    Ok(expanded)
}

// ---- loss ---------------------------------------------------------------------------

/// `loss_utils.ForCausalLMLoss(logits, labels, vocab_size)` with
/// `num_items_in_batch=None`, `ignore_index=-100`:
///
/// ```python
/// logits = logits.float()                                   # a copy unless fp32
/// labels = nn.functional.pad(labels, (0, 1), value=-100)    # (b, s+1) int64
/// shift_labels = labels[..., 1:].contiguous()               # (b, s) int64
/// logits = logits.view(-1, vocab_size)
/// shift_labels = shift_labels.view(-1).to(logits.device)
/// loss = F.cross_entropy(logits, shift_labels, ignore_index=-100, reduction="mean")
/// # locals die: logits, labels (the pad), shift_labels (kept by NllLossBackward0)
/// ```
pub(crate) fn for_causal_lm_loss(logits: &Tensor, labels: &Tensor, vocab: i64) -> Result<Tensor> {
    let mut logits = logits.to_dtype(DType::F32)?;
    let labels = labels.constant_pad(&[0, 1])?;
    let shift_labels = {
        let s = labels.slice(-1, Some(1), None);
        s.contiguous()?
    };
    logits = logits.view(&[-1, vocab])?;
    let shift_labels = shift_labels.view(&[-1])?;
    let loss = logits.cross_entropy(&shift_labels)?;
    drop(logits);
    drop(labels);
    drop(shift_labels);
    Ok(loss)
}

// ---- gradient checkpointing ----------------------------------------------------------

/// `GradientCheckpointingLayer.__call__` with `gradient_checkpointing` set:
/// `self._gradient_checkpointing_func(partial(super().__call__, **kwargs),
/// hidden_states)` = `checkpoint(..., use_reentrant=False)` with the hidden
/// states the only positional input; everything else the layer needs
/// (weights, position embeddings, mask) is captured by `layer`, as the
/// `partial` captures the keyword arguments.
pub(crate) fn checkpointed(
    rt: &Runtime,
    hidden: &Tensor,
    layer: impl Fn(&Tensor) -> vramscope_engine::Result<Tensor> + 'static,
) -> Result<Tensor> {
    let mut out = checkpoint(rt, &[hidden], move |xs: &[Tensor]| Ok(vec![layer(&xs[0])?]))?;
    out.pop()
        .ok_or_else(|| ModelError::Unsupported("checkpointed layer returned nothing".into()))
}

/// A model error inside a checkpointed function (whose errors are the engine's).
fn to_engine(e: ModelError) -> vramscope_engine::EngineError {
    match e {
        ModelError::Engine(e) => e,
        other => vramscope_engine::EngineError::Unsupported {
            what: other.to_string(),
        },
    }
}

/// A `…DecoderLayer` (a `GradientCheckpointingLayer`).
pub(crate) trait Layer: Clone + 'static {
    /// `forward(hidden_states, position_embeddings, mask, cache)`, without
    /// the checkpointing wrapper.
    fn forward(
        &self,
        x: &Tensor,
        args: &LayerArgs,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<KvCache>>,
    ) -> Result<Tensor>;
    /// A `"sliding_attention"` layer: it gets the sliding-window mask.
    fn sliding(&self) -> bool;
}

/// One pre-norm sublayer of a decoder layer:
/// `residual = hidden_states; hidden_states = norm(hidden_states);
/// hidden_states = module(hidden_states)`, `module` run as `name` (the
/// normed states die after it). Returns the residual and the module's
/// output, for the layer to add as its family does.
pub(crate) fn pre_norm_sublayer(
    x: &Tensor,
    norm: impl FnOnce(&Tensor) -> Result<Tensor>,
    name: &str,
    module: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<(Tensor, Tensor)> {
    let residual = x.clone();
    let h = norm(x)?;
    let out = x.runtime().in_module(name, || module(&h))?;
    drop(h);
    Ok((residual, out))
}

/// The masks of `causal_mask_mapping` (`"full_attention"`, then
/// `"sliding_attention"`), each `None` where SDPA's `is_causal` does; they
/// die in that order (the dict's insertion order).
#[derive(Clone)]
pub(crate) struct Masks {
    full: Option<Tensor>,
    sliding: Option<Tensor>,
}

impl Masks {
    /// `create_causal_mask` when `full`, then
    /// `create_sliding_window_causal_mask` when `sliding` gives the window;
    /// in a forward of `generate()` ([`GenStep`]), each from its 2-D
    /// attention mask ([`generation_mask`]), or the step's prepared ones
    /// as they are (a 4-D mask returns early; a skipped one, made again
    /// from no 2-D mask, is skipped again with no tensor).
    pub(crate) fn new(
        inputs_embeds: &Tensor,
        position_ids: &Tensor,
        cache: Option<&RefCell<KvCache>>,
        step: Option<&GenStep>,
        full: bool,
        sliding: Option<i64>,
    ) -> Result<Self> {
        if let Some(p) = step.and_then(|g| g.prepared) {
            return Ok(p.clone());
        }
        let c = cache.map(|c| c.borrow());
        let c = c.as_deref();
        let mask = |window: Option<i64>| match (step, c, window) {
            (Some(g), Some(c), _) => generation_mask(inputs_embeds, c, g.attention_mask, window),
            (_, _, None) => create_causal_mask(inputs_embeds, c, position_ids),
            (_, _, Some(w)) => create_sliding_window_causal_mask(inputs_embeds, c, position_ids, w),
        };
        let full = if full { mask(None)? } else { None };
        let sliding = match sliding {
            Some(w) => mask(Some(w))?,
            None => None,
        };
        Ok(Masks { full, sliding })
    }

    /// `create_masks_for_generate` for the cache's layer types (`None`: a
    /// full layer, `Some(window)`: a sliding one) on the `(batch, q_len)`
    /// inputs of a forward of `generate()`: the full layers' mask, then the
    /// sliding layers' (a hybrid config's `layer_types` go through a
    /// Python `set`, whose order of the two strings varies with the
    /// process's hash seed: full first is taken), each from the 2-D
    /// `attention_mask` ([`generation_mask`]). `inputs_embeds` is
    /// `torch.empty((b, q_len, 0))`: no memory.
    pub(crate) fn for_generate(
        rt: &Runtime,
        layers: &[Option<i64>],
        (b, q_len): (i64, i64),
        attention_mask: &Tensor,
        cache: &KvCache,
    ) -> Result<Self> {
        let embeds = rt.empty(&[b, q_len, 0], DType::F32, Device::Cuda)?;
        let full = if layers.iter().any(Option::is_none) {
            generation_mask(&embeds, cache, attention_mask, None)?
        } else {
            None
        };
        let sliding = match layers.iter().flatten().next() {
            Some(&w) => generation_mask(&embeds, cache, attention_mask, Some(w))?,
            None => None,
        };
        Ok(Masks { full, sliding })
    }

    /// The mask a layer gets.
    fn for_layer(&self, sliding: bool) -> Option<&Tensor> {
        if sliding {
            self.sliding.as_ref()
        } else {
            self.full.as_ref()
        }
    }
}

/// The `position_embeddings` tuple `(cos, sin)` once the layers are done;
/// dropping it releases its items last to first, as `tupledealloc` does
/// (its fields are declared in that order), then Gemma-3's second pair
/// (the dict's next value).
pub(crate) struct PositionEmbeddings {
    _sin: Tensor,
    _cos: Tensor,
    _local: Option<Box<PositionEmbeddings>>,
}

/// The decoder's body from `inputs_embeds`, once its masks and position
/// embeddings are made:
///
/// ```python
/// for decoder_layer in self.layers:
///     hidden_states = decoder_layer(hidden_states, attention_mask=causal_mask_mapping[decoder_layer.attention_type], ...)
/// hidden_states = self.norm(hidden_states)
/// ```
///
/// Each layer runs as `layers.{i}`; a `GradientCheckpointingLayer` whose
/// flag is set runs under [`checkpointed`] in training with grad enabled
/// (there is no cache then: `use_cache` is off), capturing its own copy of
/// the layer, the args and the mask as the `partial` does. Returns the
/// normed output and the position embeddings, for the caller to drop where
/// its locals die (the args' own `position_ids` reference goes now).
pub(crate) fn decoder_stack<L: Layer>(
    layers: &[L],
    inputs_embeds: &Tensor,
    args: LayerArgs,
    masks: &Masks,
    flags: &Flags,
    cache: Option<&RefCell<KvCache>>,
    norm: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<(Tensor, PositionEmbeddings)> {
    let rt = inputs_embeds.runtime().clone();
    let mut hidden = inputs_embeds.clone();
    for (i, l) in layers.iter().enumerate() {
        let mask = masks.for_layer(l.sliding());
        let name = format!("layers.{i}");
        let out = rt.in_module(&name, || -> Result<Tensor> {
            // the module's forward hooks (FSDP's pre-forward may wrap the input)
            let wrapped = match &flags.hooks {
                Some(h) => h.0.pre_forward(1 + i, Some(&hidden))?,
                None => None,
            };
            let input = wrapped.as_ref().unwrap_or(&hidden);
            let out = if flags.checkpointed(i) && flags.training && rt.is_grad_enabled() {
                let layer = l.clone();
                let args = args.clone();
                let mask = mask.cloned();
                checkpointed(&rt, input, move |x| {
                    layer
                        .forward(x, &args, mask.as_ref(), None)
                        .map_err(to_engine)
                })
            } else {
                l.forward(input, &args, mask, cache)
            }?;
            drop(wrapped);
            if let Some(h) = &flags.hooks {
                h.0.post_forward(1 + i, &[&out])?;
            }
            Ok(out)
        })?;
        hidden = out;
    }
    let out = norm(&hidden)?;
    drop(hidden);
    Ok((out, args.release()))
}

// ---- …ForCausalLM --------------------------------------------------------------------

/// What `model.train()` / `model.eval()` and `gradient_checkpointing_enable`
/// set, as a decoder's forward reads it.
#[derive(Debug, Clone)]
pub(crate) struct Flags {
    /// `self.training`
    pub(crate) training: bool,
    /// `self.gradient_checkpointing` and the layers it applies to (each
    /// `GradientCheckpointingLayer`'s `layer_index % every_n_layers == 0`)
    pub(crate) checkpointing: Option<Checkpointing>,
    /// `enable_input_require_grads()`: a forward hook makes the input
    /// embeddings' output require grad
    pub(crate) input_requires_grad: bool,
    /// forward hooks on the model and its layers
    pub(crate) hooks: Option<Hooks>,
}

/// Registered forward hooks ([`super::ModuleHooks`]).
#[derive(Clone)]
pub(crate) struct Hooks(pub(crate) std::rc::Rc<dyn super::ModuleHooks>);

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooks")
    }
}

impl Flags {
    /// Whether layer `index`'s `gradient_checkpointing` flag is set.
    pub(crate) fn checkpointed(&self, index: usize) -> bool {
        self.checkpointing
            .as_ref()
            .is_some_and(|which| which.applies(index))
    }

    /// `merge_with_config_defaults`: `use_cache=False` under gradient
    /// checkpointing in training.
    pub(crate) fn use_cache(&self, config_use_cache: bool) -> bool {
        config_use_cache && !(self.checkpointing.is_some() && self.training)
    }

    /// `past_key_values = DynamicCache(config=self.config)` when the
    /// forward uses a cache ([`Flags::use_cache`]), with each layer's
    /// sliding window (`None`: a full layer).
    pub(crate) fn new_cache(
        &self,
        config_use_cache: bool,
        layers: &[Option<i64>],
    ) -> Option<RefCell<DynamicCache>> {
        self.use_cache(config_use_cache)
            .then(|| RefCell::new(DynamicCache::new(layers)))
    }
}

/// A family's decoder stack (`LlamaModel`, `Phi3Model`, `Gemma2Model`): the
/// `model` of its `…ForCausalLM`.
pub(crate) trait Decoder {
    /// `embed_tokens.weight` (what a tied `lm_head` multiplies by).
    fn embed_weight(&self) -> &Tensor;
    /// `Module._apply(cuda)` over its parameters and buffers, in
    /// registration order (`embed_tokens` first).
    fn cuda(&mut self) -> Result<()>;
    /// Its parameters, in registration order, appended to `out`.
    fn parameters(&self, out: &mut Vec<Tensor>);
    /// Each decoder layer's parameters, in registration order (`None`
    /// where the family does not list them).
    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        None
    }
    /// `named_buffers()`, in registration order (`None` where the family
    /// does not list them).
    fn buffers(&self) -> Option<Vec<Tensor>> {
        None
    }
    /// `forward(input_ids)`: the final hidden states and the cache (when
    /// `use_cache`).
    fn forward(
        &self,
        ids: &Tensor,
        flags: &Flags,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)>;
    /// One forward of `generate()` (the mask, positions and cache given):
    /// the final hidden states. `None` where the family does not model it.
    fn forward_generate(
        &self,
        _ids: &Tensor,
        _flags: &Flags,
        _step: &GenStep,
    ) -> Option<Result<Tensor>> {
        None
    }
    /// `DynamicCache(config=config)`'s layers (`Some(window)`: sliding).
    fn cache_layers(&self) -> Vec<Option<i64>> {
        Vec::new()
    }
    /// Its `nn.Linear`s with their names under `model.` (`layers.0.self_attn.q_proj`),
    /// in `named_modules()` order; empty where LoRA is not modelled.
    fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        Vec::new()
    }
    /// peft's default `target_modules` for the family
    /// (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`).
    fn default_lora_targets(&self) -> &'static [&'static str] {
        &[]
    }
}

/// What `generate()` is refused with on a family that does not model it.
const GENERATE_FAMILIES: &str =
    "generate() is modelled for llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, gemma2 and \
     gemma3_text";

/// `…ForCausalLM`: `model` (a [`Decoder`]), then `lm_head`, and
/// `ForCausalLMLoss` when there are labels.
pub(crate) struct CausalLm<D> {
    rt: Runtime,
    model: D,
    /// `None` when tied to `model.embed_tokens`
    lm_head: Option<Linear>,
    vocab: i64,
    /// Gemma2's `final_logit_softcapping`
    softcap: Option<f64>,
    flags: Flags,
    /// the generation config's special tokens
    tokens: crate::families::generate::Tokens,
}

impl<D: Decoder> CausalLm<D> {
    /// `model` and, unless tied, `lm_head = nn.Linear(hidden, vocab,
    /// bias=False)` (built after it), in training mode.
    pub(crate) fn new(
        rt: &Runtime,
        model: D,
        hidden: i64,
        vocab: i64,
        tie: bool,
        weights: DType,
    ) -> Result<Self> {
        let lm_head = Linear::new(rt, hidden, vocab, false, weights)?;
        // tied: `post_init` ties the head to the embedding, and the weight
        // `nn.Linear` made is freed (a CPU mapping of its own, mapped and
        // unmapped: `validation/malloc_log.c`'s logs of SmolLM2 and Gemma-2)
        let lm_head = (!tie).then_some(lm_head);
        Ok(CausalLm {
            rt: rt.clone(),
            model,
            lm_head,
            vocab,
            softcap: None,
            flags: Flags {
                training: true,
                checkpointing: None,
                hooks: None,
                input_requires_grad: false,
            },
            tokens: Default::default(),
        })
    }

    /// With the special tokens `generate()` reads from the config.
    pub(crate) fn with_tokens(mut self, tokens: crate::families::generate::Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// With `final_logit_softcapping` (Gemma2): `logits / cap`, `tanh`, `* cap`
    /// before the loss.
    pub(crate) fn with_softcap(mut self, cap: Option<f64>) -> Self {
        self.softcap = cap;
        self
    }

    /// The logits after `final_logit_softcapping` where it is set: `logits
    /// / cap`, `torch.tanh`, `* cap`, each a new tensor (the one before
    /// dies at the rebinding unless autograd saved it).
    fn softcapped(&self, mut logits: Tensor) -> Result<Tensor> {
        if let Some(cap) = self.softcap {
            logits = logits.div_scalar(cap)?;
            logits = logits.tanh()?;
            logits = logits.mul_scalar(cap)?;
        }
        Ok(logits)
    }
}

impl<D: Decoder> HfModel for CausalLm<D> {
    fn cuda(&mut self) -> Result<()> {
        // Module._apply: model, then lm_head (a tied weight is already on the device)
        self.model.cuda()?;
        if let Some(h) = &mut self.lm_head {
            h.cuda()?;
        }
        Ok(())
    }

    fn parameters(&self) -> Vec<Tensor> {
        let mut v = Vec::new();
        self.model.parameters(&mut v);
        if let Some(h) = &self.lm_head {
            h.params(&mut v);
        }
        v
    }

    fn set_training(&mut self, training: bool) {
        self.flags.training = training;
    }

    fn enable_gradient_checkpointing(&mut self, which: &Checkpointing) -> Result<()> {
        self.flags.checkpointing = Some(which.clone());
        Ok(())
    }

    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        self.model.layer_parameters()
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        self.model.buffers()
    }

    fn set_module_hooks(&mut self, hooks: std::rc::Rc<dyn super::ModuleHooks>) -> Result<()> {
        if self.model.layer_parameters().is_none() {
            return Err(ModelError::Unsupported(
                "forward hooks on this family's layers (FSDP)".into(),
            ));
        }
        self.flags.hooks = Some(Hooks(hooks));
        Ok(())
    }

    fn apply_lora(&mut self, spec: &crate::workload::LoraSpec, training: bool) -> Result<usize> {
        let frozen = self.parameters();
        let targets: Vec<String> = if spec.targets.is_empty() {
            self.model
                .default_lora_targets()
                .iter()
                .map(|t| t.to_string())
                .collect()
        } else {
            spec.targets.clone()
        };
        let mut linears: Vec<(String, &mut Linear)> = self
            .model
            .linears_mut()
            .into_iter()
            .map(|(n, l)| (format!("model.{n}"), l))
            .collect();
        if linears.is_empty() {
            return Err(ModelError::Unsupported(
                "LoRA is modelled for llama, mistral, qwen2, qwen3, mixtral and qwen3_moe".into(),
            ));
        }
        if targets.is_empty() {
            return Err(ModelError::Unsupported(
                "LoRA without --lora-targets on a family peft has no default target_modules for \
                 (expected --lora-targets, e.g. q_proj,v_proj or all-linear)"
                    .into(),
            ));
        }
        if let Some(h) = &mut self.lm_head {
            linears.push(("lm_head".into(), h));
        }
        // peft's `target_modules="all-linear"` (`_maybe_include_all_linear_layers`):
        // every `nn.Linear` by its full name but the output embeddings
        let targets = if targets == ["all-linear"] {
            linears
                .iter()
                .map(|(n, _)| n.clone())
                .filter(|n| n != "lm_head")
                .collect()
        } else {
            targets
        };
        let dropout = if training { spec.dropout } else { 0.0 };
        let n = inject_lora(&self.rt, linears, &frozen, spec.r, &targets, dropout)?;
        if n == 0 {
            return Err(ModelError::Unsupported(format!(
                "no module matches the LoRA targets {targets:?}"
            )));
        }
        Ok(n)
    }

    fn enable_input_require_grads(&mut self) {
        self.flags.input_requires_grad = true;
    }

    fn generate(
        &self,
        input_ids: &Tensor,
        spec: &crate::families::generate::GenerateSpec,
        on: &mut dyn FnMut(crate::families::generate::GenerateEvent) -> Result<()>,
    ) -> Result<Tensor> {
        let layers = self.model.cache_layers();
        let forward = |ids: &Tensor, step: &GenStep| -> Result<Tensor> {
            let hidden = self.rt.in_module("model", || {
                self.model
                    .forward_generate(ids, &self.flags, step)
                    .unwrap_or_else(|| {
                        Err(ModelError::Unsupported("generate() for this family".into()))
                    })
            })?;
            // logits = self.lm_head(hidden_states[:, slice(-1, None), :])
            let sl = hidden.slice(1, Some(-1), None);
            let logits =
                match &self.lm_head {
                    Some(h) => h.forward("lm_head", &sl),
                    None => self.rt.in_module("lm_head", || {
                        Ok(sl.linear(self.model.embed_weight(), None)?)
                    }),
                };
            drop(sl);
            // (the hidden states, `outputs`, live until the forward returns)
            let logits = self.softcapped(logits?);
            drop(hidden);
            logits
        };
        if layers.is_empty() {
            return Err(ModelError::Unsupported(GENERATE_FAMILIES.into()));
        }
        let model = crate::families::generate::Generator {
            rt: &self.rt,
            vocab: self.vocab,
            cache_layers: &layers,
            tokens: &self.tokens,
            forward: &forward,
        };
        crate::families::generate::generate(&model, input_ids, spec, on)
    }

    fn forward(&self, inputs: &Inputs) -> Result<ModelOutput> {
        let rt = self.rt.clone();
        if let Some(h) = &self.flags.hooks {
            h.0.pre_forward(0, None)?;
        }
        let ids = inputs
            .input_ids
            .as_ref()
            .ok_or_else(|| ModelError::Unsupported("a causal LM needs input_ids".into()))?;
        if ids.dim() != 2 {
            return Err(bad(
                "input_ids",
                format!("expected (batch, seq), got {:?}", ids.sizes()),
            ));
        }
        let (hidden, cache) = rt.in_module("model", || self.model.forward(ids, &self.flags))?;
        // logits = self.lm_head(hidden_states[:, slice(-0, None), :]): a full
        // slice, returned as an alias of the hidden states
        let mut logits = {
            let sl = hidden.alias();
            let r = match &self.lm_head {
                Some(h) => h.forward("lm_head", &sl),
                None => rt.in_module(
                    "lm_head",
                    || Ok(sl.linear(self.model.embed_weight(), None)?),
                ),
            };
            drop(sl);
            r?
        };
        logits = self.softcapped(logits)?;
        let loss = match &inputs.labels {
            Some(labels) => Some(for_causal_lm_loss(&logits, labels, self.vocab)?),
            None => None,
        };
        // `outputs` (the hidden states) die at return; the cache goes with the output
        drop(hidden);
        let retained = cache
            .map(|c| c.into_inner().into_retained())
            .unwrap_or_default();
        if let Some(h) = &self.flags.hooks {
            // the output's tensors, flattened (`loss`, then `logits`)
            let outs: Vec<&Tensor> = loss.iter().chain(std::iter::once(&logits)).collect();
            h.0.post_forward(0, &outs)?;
        }
        Ok(ModelOutput {
            loss,
            logits: Some(logits),
            retained,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vramscope_engine::MemEvent;

    /// The sizes of the allocations `f` makes, in order.
    pub(crate) fn alloc_sizes(rt: &Runtime, f: impl FnOnce()) -> Vec<u64> {
        allocs(rt, f).into_iter().map(|(bytes, _)| bytes).collect()
    }

    /// The allocations `f` makes, in order: bytes and op.
    fn allocs(rt: &Runtime, f: impl FnOnce()) -> Vec<(u64, &'static str)> {
        rt.start_event_log();
        f();
        let log = rt.take_event_log().unwrap();
        log.events
            .iter()
            .filter_map(|e| match e {
                MemEvent::Alloc(r) => Some((r.bytes, r.op)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_padding_index_outside_the_vocabulary_is_refused_as_nn_embedding_refuses_it() {
        let cfg = |extra: &str| {
            HfConfig::parse(&format!(
                r#"{{"model_type": "phi3", "vocab_size": 32000{extra}}}"#
            ))
            .unwrap()
        };
        // Phi-3's default 32000 is not an index of 32000 rows (the GPU's
        // `AssertionError: Padding_idx must be within num_embeddings`)
        let e = check_padding_idx(&cfg(""), Some(32000), 32000).unwrap_err();
        assert!(e.to_string().contains("pad_token_id"), "{e}");
        // an explicit null is no padding index; the last row and -vocab are
        assert!(check_padding_idx(&cfg(r#", "pad_token_id": null"#), Some(32000), 32000).is_ok());
        assert!(check_padding_idx(&cfg(r#", "pad_token_id": 31999"#), Some(32000), 32000).is_ok());
        assert!(check_padding_idx(&cfg(r#", "pad_token_id": -32000"#), None, 32000).is_ok());
        assert!(check_padding_idx(&cfg(r#", "pad_token_id": -32001"#), None, 32000).is_err());
        assert!(check_padding_idx(&cfg(""), None, 8).is_ok());
        // the family's parse refuses the config
        assert!(crate::families::phi3::Config::parse(&cfg("")).is_err());
        assert!(crate::families::phi3::Config::parse(&cfg(r#", "pad_token_id": null"#)).is_ok());
    }

    #[test]
    fn rmsnorm_in_bf16_allocates_the_fp32_upcast_pow_mean_rsqrt_mul_cast_and_weight_mul() {
        let rt = Runtime::default();
        let mut norm = RmsNorm::new(&rt, 512, 1e-6, DType::BF16).unwrap();
        to_cuda(&mut norm.weight, Category::Parameter).unwrap();
        let x = rt.empty(&[4, 512, 512], DType::BF16, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let (b, s, h) = (4u64, 512u64, 512u64);
        let full32 = b * s * h * 4;
        let full16 = b * s * h * 2;
        let row32 = b * s * 4;
        let mut y = None;
        let a = allocs(&rt, || y = Some(norm.forward("norm", &x).unwrap()));
        assert_eq!(
            a,
            vec![
                (full32, "_to_copy"), // hidden_states.to(torch.float32)
                (full32, "pow"),      // .pow(2)
                (row32, "mean"),      // .mean(-1, keepdim=True)
                (row32, "add"),       // variance + eps
                (row32, "rsqrt"),     // torch.rsqrt(...)
                (full32, "mul"),      // hidden_states * rsqrt
                (full16, "_to_copy"), // .to(input_dtype)
                (full16, "mul"),      // self.weight * ...
            ]
        );
        // live after the call: the fp32 copy (saved by pow and mul), rsqrt
        // (saved by its backward and mul), the bf16 cast (saved by the weight
        // mul) and the output; pow, mean, add and the fp32 product are gone
        let live = rt.memory_allocated() as u64 - full16 - 1024;
        assert_eq!(live, full32 + 8192 + full16 + full16);
        drop(y);
    }

    #[test]
    fn rmsnorm_under_no_grad_keeps_only_the_output() {
        let rt = Runtime::default();
        let mut norm = RmsNorm::new(&rt, 512, 1e-6, DType::F32).unwrap();
        to_cuda(&mut norm.weight, Category::Parameter).unwrap();
        let x = rt.empty(&[2, 512, 512], DType::F32, Device::Cuda).unwrap();
        let base = rt.memory_allocated();
        rt.reset_peak_memory_stats();
        let y = rt.no_grad(|| norm.forward("norm", &x).unwrap());
        let full = 2 * 512 * 512 * 4;
        let row = 2 * 512 * 4;
        // fp32 input: `.to(float32)` is the input itself; everything but the
        // output is gone after the call
        assert_eq!(rt.memory_allocated() - base, full);
        // the peak is at the weight product: the normalised states, the
        // output and `variance` (`rsqrt` died with the statement before)
        assert_eq!(rt.max_memory_allocated() - base, 2 * full + row);
        drop(y);
    }

    #[test]
    fn rotary_forward_matches_the_bf16_trace_sizes() {
        // mistral_infer_bf16 (head_dim 64, seq 512): 2048, 65536 (+32 MiB
        // cuBLAS), 131072 x5, 65536 x2, as the H100 trace
        let rt = Runtime::default();
        let mut rope = RotaryEmbedding::new(&rt, 64, RopeType::Default).unwrap();
        rope.cuda().unwrap();
        let x = rt.empty(&[4, 512, 512], DType::BF16, Device::Cuda).unwrap();
        let pos = position_ids(&rt, 512, 0).unwrap();
        let mut out = None;
        let a = allocs(&rt, || {
            out = Some(rope.forward("rotary_emb", &x, &pos).unwrap())
        });
        let sizes: Vec<u64> = a.iter().map(|x| x.0).collect();
        assert_eq!(
            sizes,
            vec![2048, 65536, 33_554_432, 131072, 131072, 131072, 131072, 131072, 65536, 65536]
        );
        let (c, s) = out.unwrap();
        assert_eq!((c.sizes(), c.dtype()), (&[1i64, 512, 64][..], DType::BF16));
        drop((c, s));
    }

    #[test]
    fn sliding_mask_is_a_bool_matrix_expanded_over_the_batch() {
        let rt = Runtime::default();
        let emb = rt.empty(&[4, 512, 8], DType::BF16, Device::Cuda).unwrap();
        let pos = position_ids(&rt, 512, 0).unwrap();
        let cache = DynamicCache::new(&[Some(256); 2]);
        let m = create_sliding_window_causal_mask(&emb, Some(&cache), &pos, 256)
            .unwrap()
            .unwrap();
        assert_eq!(m.sizes(), &[4, 1, 512, 512]);
        assert_eq!(m.storage_nbytes(), 512 * 512);
        // a window at least as long as the sequence: SDPA's is_causal
        assert!(
            create_sliding_window_causal_mask(&emb, Some(&cache), &pos, 4096)
                .unwrap()
                .is_none()
        );
        assert!(create_causal_mask(&emb, Some(&cache), &pos)
            .unwrap()
            .is_none());
    }

    #[test]
    fn dynamic_cache_copies_keys_and_values() {
        let rt = Runtime::default();
        let k = rt
            .empty(&[4, 2, 512, 64], DType::BF16, Device::Cuda)
            .unwrap();
        let v = rt
            .empty(&[4, 2, 512, 64], DType::BF16, Device::Cuda)
            .unwrap();
        let mut c = DynamicCache::new(&[None, Some(256)]);
        let base = rt.memory_allocated();
        let (k0, v0) = c.update(&k, &v, 0).unwrap();
        assert!(!k0.shares_storage(&k) && !v0.shares_storage(&v));
        assert_eq!(rt.memory_allocated() - base, 2 * 524_288);
        let (k1, _v1) = c.update(&k, &v, 1).unwrap();
        // the sliding layer's window tensor (8 bytes, a 512-byte block)
        assert_eq!(rt.memory_allocated() - base, 4 * 524_288 + 512);
        assert_eq!(c.get_seq_length(0), 512);
        assert_eq!(c.get_mask_sizes(1, 1), (256, 257));
        assert_eq!(k1.sizes(), &[4, 2, 512, 64]);
        assert_eq!(c.into_retained().len(), 5);
    }

    #[test]
    fn causal_lm_loss_allocates_pad_shift_log_softmax_and_nll() {
        let rt = Runtime::default();
        let logits = rt
            .empty(&[4, 512, 32000], DType::F32, Device::Cuda)
            .unwrap();
        logits.requires_grad_(true).unwrap();
        let labels = rt.empty(&[4, 512], DType::I64, Device::Cuda).unwrap();
        let mut loss = None;
        let a = allocs(&rt, || {
            loss = Some(for_causal_lm_loss(&logits, &labels, 32000).unwrap())
        });
        let sizes: Vec<u64> = a.iter().map(|x| x.0).collect();
        // the H100 trace of llama_train_fp32_adamw: 16416, 16384, 262144000, 4, 4
        assert_eq!(sizes, vec![16416, 16384, 262_144_000, 4, 4]);
        drop(loss);
    }

    #[test]
    fn rope_types_that_recompute_inv_freq_are_refused() {
        let c = HfConfig::parse(
            r#"{"model_type":"llama","rope_scaling":{"type":"dynamic","factor":2.0}}"#,
        )
        .unwrap();
        assert!(rope_type(&c).is_err());
        let c = HfConfig::parse(
            r#"{"model_type":"llama","rope_parameters":{"rope_type":"llama3","rope_theta":5e5}}"#,
        )
        .unwrap();
        assert_eq!(rope_type(&c).unwrap(), RopeType::Llama3);
        let c = HfConfig::parse(r#"{"model_type":"llama"}"#).unwrap();
        assert_eq!(rope_type(&c).unwrap(), RopeType::Default);
    }
}
