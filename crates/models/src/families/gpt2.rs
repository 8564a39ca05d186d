//! `modeling_gpt2.py` (transformers 5.17): `GPT2LMHeadModel` with the
//! `sdpa` attention, op by op, with CPython's lifetimes.
//!
//! What shapes its memory:
//! - `Conv1D` (`pytorch_utils.py`): `torch.addmm(bias, x.view(-1, nx),
//!   weight)` with the weight stored `(nx, nf)`, the transpose of
//!   `nn.Linear`'s;
//! - `c_attn`'s output is `split` into q, k, v views (one `SplitBackward0`,
//!   whose backward `cat`s the three gradients into one);
//! - `use_cache` is `config.use_cache` (True) even in training, unless
//!   gradient checkpointing is on (`merge_with_config_defaults`), so every
//!   layer's key and value are copied by the `DynamicCache`'s
//!   `torch.cat([torch.tensor([]), key_states], dim=-2)` and live as long as
//!   the output;
//! - `gelu_new` (`NewGELUActivation`) is a composite of seven pointwise ops
//!   (`pow` saves its input, `tanh` its result, the last `mul` both operands);
//! - dropout (`embd_pdrop`, `resid_pdrop`, `attn_pdrop` in the sdpa call)
//!   allocates a one-byte mask per element in training;
//! - `lm_head` is tied to `wte` unless `tie_word_embeddings` is false; the
//!   loss is `ForCausalLMLoss` (`loss/loss_utils.py`).

use std::rc::Rc;

use vramscope_engine::nn::Module as _;
use vramscope_engine::{Category, DType, EngineError, Runtime, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::common::{
    checkpointed, create_causal_mask, for_causal_lm_loss, parameter, position_ids,
    sdpa_attention_forward, to_cuda, Act, DynamicCache, LayerNorm,
};
use crate::families::{HfModel, Inputs, ModelOutput};
use crate::workload::Checkpointing;

/// Build `GPT2LMHeadModel.from_config(config, dtype=weights)` on the CPU.
pub(crate) fn build(rt: &Runtime, config: &HfConfig, weights: DType) -> Result<Box<dyn HfModel>> {
    let cfg = Gpt2Config::from_hf(config)?;
    Ok(Box::new(Gpt2LMHeadModel::new(rt, cfg, weights)?))
}

// ---- config ------------------------------------------------------------------------

/// `GPT2Config` normalised (`configuration_gpt2.py` defaults; the
/// `attribute_map` names `hidden_size`, `num_hidden_layers`,
/// `num_attention_heads`, `max_position_embeddings` are accepted too).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gpt2Config {
    pub(crate) vocab_size: i64,
    pub(crate) n_positions: i64,
    pub(crate) n_embd: i64,
    pub(crate) n_layer: i64,
    pub(crate) n_head: i64,
    /// `n_inner` (None: `4 * n_embd`)
    pub(crate) n_inner: i64,
    pub(crate) act: Act,
    pub(crate) resid_pdrop: f64,
    pub(crate) embd_pdrop: f64,
    pub(crate) attn_pdrop: f64,
    pub(crate) tie_word_embeddings: bool,
    pub(crate) use_cache: bool,
}

/// A size under its GPT-2 name or its `attribute_map` alias.
fn aliased_size(c: &HfConfig, key: &str, alias: &str, default: i64) -> Result<i64> {
    if c.has(key) {
        c.size(key, default)
    } else {
        c.size(alias, default)
    }
}

impl Gpt2Config {
    pub(crate) fn from_hf(c: &HfConfig) -> Result<Self> {
        c.reject_unless(
            "add_cross_attention",
            &[&serde_json::Value::Bool(false)],
            "GPT2LMHeadModel with cross-attention layers is not modelled",
        )?;
        c.reject_present("quantization_config", "quantized weights are not modelled")?;
        let n_embd = aliased_size(c, "n_embd", "hidden_size", 768)?;
        let n_head = aliased_size(c, "n_head", "num_attention_heads", 12)?;
        if n_embd % n_head != 0 {
            return Err(ModelError::Field {
                field: "n_embd".into(),
                detail: format!("{n_embd} is not divisible by n_head = {n_head}"),
            });
        }
        let n_inner = match c.opt_int("n_inner")? {
            Some(v) if v > 0 => v,
            Some(v) => {
                return Err(ModelError::Field {
                    field: "n_inner".into(),
                    detail: format!("must be positive, found {v}"),
                })
            }
            None => 4 * n_embd,
        };
        let act = Act::parse(
            "activation_function",
            c.string("activation_function")?.unwrap_or("gelu_new"),
        )?;
        let p = |k: &str| -> Result<f64> {
            let v = c.float(k, 0.1)?;
            if !(0.0..1.0).contains(&v) {
                return Err(ModelError::Field {
                    field: k.into(),
                    detail: format!("a dropout probability in [0, 1), found {v}"),
                });
            }
            Ok(v)
        };
        Ok(Gpt2Config {
            vocab_size: c.size("vocab_size", 50257)?,
            n_positions: aliased_size(c, "n_positions", "max_position_embeddings", 1024)?,
            n_embd,
            n_layer: aliased_size(c, "n_layer", "num_hidden_layers", 12)?,
            n_head,
            n_inner,
            act,
            resid_pdrop: p("resid_pdrop")?,
            embd_pdrop: p("embd_pdrop")?,
            attn_pdrop: p("attn_pdrop")?,
            tie_word_embeddings: c.boolean("tie_word_embeddings", true)?,
            use_cache: c.boolean("use_cache", true)?,
        })
    }

    fn head_dim(&self) -> i64 {
        self.n_embd / self.n_head
    }
}

// ---- modules ----------------------------------------------------------------------

/// `Conv1D(nf, nx)` (`pytorch_utils.py`): weight `(nx, nf)`, then bias `(nf,)`.
struct Conv1D {
    weight: Tensor,
    bias: Tensor,
}

impl Conv1D {
    fn new(rt: &Runtime, nf: i64, nx: i64, dtype: DType) -> Result<Self> {
        Ok(Conv1D {
            weight: parameter(rt, &[nx, nf], dtype)?,
            bias: parameter(rt, &[nf], dtype)?,
        })
    }

    /// `size_out = x.size()[:-1] + (self.nf,)`;
    /// `x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)`;
    /// `x = x.view(size_out)`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut size_out: Vec<i64> = x.sizes()[..x.dim() - 1].to_vec();
        size_out.push(self.weight.sizes()[1]);
        let flat = x.view(&[-1, x.size(-1)])?;
        let y = Tensor::addmm(&self.bias, &flat, &self.weight)?;
        drop(flat);
        Ok(y.view(&size_out)?)
    }
}

/// `GPT2Block` (with its `GPT2Attention` and `GPT2MLP`).
struct Block {
    /// `h.{i}`
    name: String,
    ln_1: LayerNorm,
    c_attn: Conv1D,
    attn_c_proj: Conv1D,
    ln_2: LayerNorm,
    c_fc: Conv1D,
    mlp_c_proj: Conv1D,
}

/// What a forward pass needs to know besides the tensors.
#[derive(Clone, Copy)]
struct Ctx {
    training: bool,
}

impl Block {
    /// `GPT2Attention.forward` (self-attention, sdpa).
    fn attention(
        &self,
        cfg: &Gpt2Config,
        hidden: &Tensor,
        mask: Option<&Tensor>,
        ctx: Ctx,
        cache: Option<(&mut DynamicCache, usize)>,
    ) -> Result<Tensor> {
        let rt = hidden.runtime().clone();
        let (e, hd) = (cfg.n_embd, cfg.head_dim());
        // query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, dim=2)
        let qkv = rt.in_module("c_attn", || self.c_attn.forward(hidden))?;
        let mut parts = qkv.split(e, 2)?.into_iter();
        drop(qkv);
        let (Some(q), Some(k), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(ModelError::Unsupported(
                "c_attn split into fewer than 3".into(),
            ));
        };
        let (b, s) = (hidden.size(0), hidden.size(1));
        let shape = [b, s, -1, hd];
        // key_states = key_states.view(shape_kv).transpose(1, 2), same for value and query
        let mut k = k.view(&shape)?.transpose(1, 2);
        let mut v = v.view(&shape)?.transpose(1, 2);
        let q = q.view(&shape)?.transpose(1, 2);
        if let Some((c, idx)) = cache {
            // key_states, value_states = curr_past_key_values.update(key_states, value_states, self.layer_idx)
            let (nk, nv) = c.update(&k, &v, idx)?;
            k = nk;
            v = nv;
        }
        // attention_interface(..., dropout=self.attn_dropout.p if self.training else 0.0, scaling=self.scaling)
        let dropout = if ctx.training { cfg.attn_pdrop } else { 0.0 };
        let mut o = sdpa_attention_forward(&q, &k, &v, mask, dropout, (hd as f64).powf(-0.5), 1)?;
        // attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        o = o.reshape(&[b, s, -1])?.contiguous()?;
        o = rt.in_module("c_proj", || self.attn_c_proj.forward(&o))?;
        o = rt.in_module("resid_dropout", || o.dropout(cfg.resid_pdrop, ctx.training))?;
        // query/key/value_states are locals until the return
        drop((q, k, v));
        Ok(o)
    }

    /// `GPT2MLP.forward`.
    fn mlp(&self, cfg: &Gpt2Config, hidden: &Tensor, ctx: Ctx) -> Result<Tensor> {
        let rt = hidden.runtime().clone();
        let mut h = rt.in_module("c_fc", || self.c_fc.forward(hidden))?;
        h = rt.in_module("act", || cfg.act.forward(&h))?;
        h = rt.in_module("c_proj", || self.mlp_c_proj.forward(&h))?;
        h = rt.in_module("dropout", || h.dropout(cfg.resid_pdrop, ctx.training))?;
        Ok(h)
    }

    /// `GPT2Block.forward`.
    fn forward(
        &self,
        cfg: &Gpt2Config,
        input: &Tensor,
        mask: Option<&Tensor>,
        ctx: Ctx,
        cache: Option<(&mut DynamicCache, usize)>,
    ) -> Result<Tensor> {
        let rt = input.runtime().clone();
        let mut residual = input.clone();
        let mut hidden = rt.in_module("ln_1", || self.ln_1.layer_norm(input))?;
        let attn_output =
            rt.in_module("attn", || self.attention(cfg, &hidden, mask, ctx, cache))?;
        // hidden_states = attn_output + residual
        hidden = attn_output.add(&residual)?;
        residual = hidden.clone();
        hidden = rt.in_module("ln_2", || self.ln_2.layer_norm(&hidden))?;
        let ff = rt.in_module("mlp", || self.mlp(cfg, &hidden, ctx))?;
        // hidden_states = residual + feed_forward_hidden_states
        hidden = residual.add(&ff)?;
        // locals die in co_varnames order: residual, attn_output, feed_forward_hidden_states
        drop(residual);
        drop(attn_output);
        drop(ff);
        Ok(hidden)
    }
}

/// `GPT2LMHeadModel`.
struct Gpt2LMHeadModel {
    rt: Runtime,
    cfg: Rc<Gpt2Config>,
    wte: Tensor,
    wpe: Tensor,
    /// shared with the recomputation closures of checkpointed blocks
    h: Vec<Rc<Block>>,
    ln_f: LayerNorm,
    /// `lm_head.weight` when not tied to `wte`
    lm_head: Option<Tensor>,
    training: bool,
    /// per block: `GPT2Block.gradient_checkpointing`
    checkpointed: Vec<bool>,
    /// `GPT2Model.gradient_checkpointing` (set by `_set_gradient_checkpointing`
    /// whatever `every_n_layers`)
    gradient_checkpointing: bool,
    /// forward hooks on the model and its blocks
    hooks: Option<Rc<dyn super::ModuleHooks>>,
}

impl Gpt2LMHeadModel {
    fn new(rt: &Runtime, cfg: Gpt2Config, w: DType) -> Result<Self> {
        let e = cfg.n_embd;
        // in `GPT2Model.__init__`'s order: the CPU tensors glibc maps take
        // the address space in it (`driver_va.rs`, rule 7)
        let wte = parameter(rt, &[cfg.vocab_size, e], w)?;
        let wpe = parameter(rt, &[cfg.n_positions, e], w)?;
        let mut h = Vec::with_capacity(cfg.n_layer as usize);
        for i in 0..cfg.n_layer {
            h.push(Rc::new(Block {
                name: format!("h.{i}"),
                ln_1: LayerNorm::new_in(rt, &[e], w)?,
                c_attn: Conv1D::new(rt, 3 * e, e, w)?,
                attn_c_proj: Conv1D::new(rt, e, e, w)?,
                ln_2: LayerNorm::new_in(rt, &[e], w)?,
                c_fc: Conv1D::new(rt, cfg.n_inner, e, w)?,
                mlp_c_proj: Conv1D::new(rt, e, cfg.n_inner, w)?,
            }));
        }
        Ok(Gpt2LMHeadModel {
            rt: rt.clone(),
            wte,
            wpe,
            checkpointed: vec![false; h.len()],
            h,
            ln_f: LayerNorm::new_in(rt, &[e], w)?,
            // tied, the head's own weight is made and freed when
            // `post_init` ties it (`validation/malloc_log.c`'s GPT-2 logs)
            lm_head: Some(parameter(rt, &[cfg.vocab_size, e], w)?)
                .filter(|_| !cfg.tie_word_embeddings),
            cfg: Rc::new(cfg),
            training: false,
            gradient_checkpointing: false,
            hooks: None,
        })
    }

    fn lm_head_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.wte)
    }

    /// `block(hidden_states, past_key_values, causal_mask, ...)` through
    /// `GradientCheckpointingLayer.__call__`: under
    /// `checkpoint(partial(GPT2Block.__call__, **kwargs), hidden_states, None,
    /// causal_mask, None, use_reentrant=False)` when the block is
    /// checkpointed and training (the mask is then an input of the
    /// checkpoint, captured here).
    fn block(
        &self,
        i: usize,
        hidden: &Tensor,
        mask: Option<&Tensor>,
        ctx: Ctx,
        cache: Option<(&mut DynamicCache, usize)>,
    ) -> Result<Tensor> {
        let blk = &self.h[i];
        if ctx.training && self.checkpointed[i] {
            let (blk, cfg, mask) = (blk.clone(), self.cfg.clone(), mask.cloned());
            return checkpointed(&self.rt, hidden, move |x: &Tensor| {
                blk.forward(&cfg, x, mask.as_ref(), ctx, None)
                    .map_err(|e| match e {
                        ModelError::Engine(e) => e,
                        other => EngineError::Unsupported {
                            what: other.to_string(),
                        },
                    })
            });
        }
        blk.forward(&self.cfg, hidden, mask, ctx, cache)
    }

    /// `GPT2Model.forward`: the last hidden state and the cache.
    fn transformer(&self, input_ids: &Tensor, ctx: Ctx) -> Result<(Tensor, Option<DynamicCache>)> {
        let rt = &self.rt;
        let (b, s) = (input_ids.size(0), input_ids.size(-1));
        // use_cache (merge_with_config_defaults): config.use_cache, False
        // under gradient checkpointing in training
        let use_cache = self.cfg.use_cache && !(self.gradient_checkpointing && ctx.training);
        // input_ids = input_ids.view(-1, input_shape[-1])
        let ids = input_ids.view(&[-1, s])?;
        let mut cache = use_cache.then(|| DynamicCache::new(&vec![None; self.h.len()]));
        let inputs_embeds = rt.in_module("wte", || Tensor::embedding(&self.wte, &ids))?;
        // position_ids = (torch.arange(seq, device=...) + past_seen_tokens).unsqueeze(0)
        let position_ids = position_ids(rt, s, 0)?;
        let position_embeds =
            rt.in_module("wpe", || Tensor::embedding(&self.wpe, &position_ids))?;
        // hidden_states = inputs_embeds + position_embeds.to(inputs_embeds.device)
        let mut hidden = inputs_embeds.add(&position_embeds)?;
        let causal_mask = create_causal_mask(&inputs_embeds, cache.as_ref(), &position_ids)?;
        hidden = rt.in_module("drop", || hidden.dropout(self.cfg.embd_pdrop, ctx.training))?;
        for i in 0..self.h.len() {
            // past_key_values if not (self.gradient_checkpointing and self.training) else None
            let c = cache.as_mut().map(|c| (c, i));
            hidden = rt.in_module(&self.h[i].name, || {
                // the block's forward hooks (FSDP's pre-forward may wrap the input)
                let wrapped = match &self.hooks {
                    Some(h) => h.pre_forward(1 + i, Some(&hidden))?,
                    None => None,
                };
                let input = wrapped.as_ref().unwrap_or(&hidden);
                let out = self.block(i, input, causal_mask.as_ref(), ctx, c)?;
                drop(wrapped);
                if let Some(h) = &self.hooks {
                    h.post_forward(1 + i, &[&out])?;
                }
                Ok::<Tensor, ModelError>(out)
            })?;
        }
        hidden = rt.in_module("ln_f", || self.ln_f.layer_norm(&hidden))?;
        // hidden_states = hidden_states.view(output_shape)
        hidden = hidden.view(&[b, s, self.cfg.n_embd])?;
        // locals die in co_varnames order: input_ids (a view), position_ids,
        // inputs_embeds, position_embeds, causal_mask
        drop(ids);
        drop(position_ids);
        drop(inputs_embeds);
        drop(position_embeds);
        drop(causal_mask);
        Ok((hidden, cache))
    }
}

impl HfModel for Gpt2LMHeadModel {
    /// `Module._apply`: children first in registration order (transformer:
    /// wte, wpe, h.*, ln_f; then lm_head, whose tied weight is already on
    /// the device).
    fn cuda(&mut self) -> Result<()> {
        let p = Category::Parameter;
        to_cuda(&mut self.wte, p)?;
        to_cuda(&mut self.wpe, p)?;
        for b in &mut self.h {
            let b = Rc::get_mut(b).ok_or_else(|| {
                ModelError::Unsupported("model.cuda() while a checkpointed forward is alive".into())
            })?;
            for t in b.ln_1.params_mut() {
                to_cuda(t, p)?;
            }
            for c in [&mut b.c_attn, &mut b.attn_c_proj] {
                to_cuda(&mut c.weight, p)?;
                to_cuda(&mut c.bias, p)?;
            }
            for t in b.ln_2.params_mut() {
                to_cuda(t, p)?;
            }
            for c in [&mut b.c_fc, &mut b.mlp_c_proj] {
                to_cuda(&mut c.weight, p)?;
                to_cuda(&mut c.bias, p)?;
            }
        }
        for t in self.ln_f.params_mut() {
            to_cuda(t, p)?;
        }
        if let Some(w) = &mut self.lm_head {
            to_cuda(w, p)?;
        }
        Ok(())
    }

    fn parameters(&self) -> Vec<Tensor> {
        let mut v = vec![self.wte.clone(), self.wpe.clone()];
        for b in &self.h {
            v.extend(b.ln_1.parameters());
            for c in [&b.c_attn, &b.attn_c_proj] {
                v.push(c.weight.clone());
                v.push(c.bias.clone());
            }
            v.extend(b.ln_2.parameters());
            for c in [&b.c_fc, &b.mlp_c_proj] {
                v.push(c.weight.clone());
                v.push(c.bias.clone());
            }
        }
        v.extend(self.ln_f.parameters());
        v.extend(self.lm_head.clone());
        v
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        // GPT2Model registers none (transformers 5 builds the causal mask
        // in the forward)
        Some(Vec::new())
    }

    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        Some(
            self.h
                .iter()
                .map(|b| {
                    let mut v: Vec<Tensor> = b.ln_1.parameters();
                    for c in [&b.c_attn, &b.attn_c_proj] {
                        v.push(c.weight.clone());
                        v.push(c.bias.clone());
                    }
                    v.extend(b.ln_2.parameters());
                    for c in [&b.c_fc, &b.mlp_c_proj] {
                        v.push(c.weight.clone());
                        v.push(c.bias.clone());
                    }
                    v
                })
                .collect(),
        )
    }

    fn set_module_hooks(&mut self, hooks: Rc<dyn super::ModuleHooks>) -> Result<()> {
        self.hooks = Some(hooks);
        Ok(())
    }

    /// `_set_gradient_checkpointing(every_n_layers=k)`: `GPT2Model`'s flag is
    /// set; the `GPT2Block`s (the `GradientCheckpointingLayer`s) are counted
    /// in order. (`enable_input_require_grads` only hooks `wte`'s output,
    /// which already requires grad.)
    fn enable_gradient_checkpointing(&mut self, which: &Checkpointing) -> Result<()> {
        self.gradient_checkpointing = true;
        for (i, c) in self.checkpointed.iter_mut().enumerate() {
            *c = which.applies(i);
        }
        Ok(())
    }

    fn forward(&self, inputs: &Inputs) -> Result<ModelOutput> {
        let Some(ids) = &inputs.input_ids else {
            return Err(ModelError::Unsupported("gpt2 needs input_ids".into()));
        };
        if ids.dim() != 2 {
            return Err(ModelError::Unsupported(format!(
                "input_ids of shape {:?} (expected (batch, seq))",
                ids.sizes()
            )));
        }
        if ids.size(1) > self.cfg.n_positions {
            return Err(ModelError::Unsupported(format!(
                "sequence length {} > n_positions {}",
                ids.size(1),
                self.cfg.n_positions
            )));
        }
        let ctx = Ctx {
            training: self.training,
        };
        let rt = &self.rt;
        if let Some(h) = &self.hooks {
            h.pre_forward(0, None)?;
        }
        let (hidden, cache) = rt.in_module("transformer", || self.transformer(ids, ctx))?;
        // logits = self.lm_head(hidden_states[:, slice(-0, None), :]): the full
        // slice is an alias (THPVariable_getitem)
        let sliced = hidden.alias();
        let logits = rt.in_module("lm_head", || sliced.linear(self.lm_head_weight(), None))?;
        drop(sliced);
        let loss = match &inputs.labels {
            Some(labels) => Some(for_causal_lm_loss(&logits, labels, self.cfg.vocab_size)?),
            None => None,
        };
        // locals die: transformer_outputs, hidden_states
        drop(hidden);
        if let Some(h) = &self.hooks {
            // the output's tensors, flattened (`loss`, then `logits`)
            let outs: Vec<&Tensor> = loss.iter().chain(std::iter::once(&logits)).collect();
            h.post_forward(0, &outs)?;
        }
        Ok(ModelOutput {
            loss,
            logits: Some(logits),
            retained: cache.map(DynamicCache::into_retained).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::common::new_gelu;
    use crate::workload::Task;
    use vramscope_engine::Device;

    fn cfg(extra: &str) -> HfConfig {
        HfConfig::parse(&format!(
            r#"{{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 32{extra}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn config_defaults_and_aliases() {
        let c = Gpt2Config::from_hf(&cfg("")).unwrap();
        assert_eq!((c.n_inner, c.act, c.use_cache), (256, Act::GeluNew, true));
        assert!(c.tie_word_embeddings);
        let c = Gpt2Config::from_hf(
            &HfConfig::parse(
                r#"{"model_type": "gpt2", "hidden_size": 32, "num_attention_heads": 2}"#,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (c.n_embd, c.n_head, c.n_layer, c.n_positions),
            (32, 2, 12, 1024)
        );
    }

    #[test]
    fn unmodelled_fields_are_refused() {
        for extra in [
            r#", "add_cross_attention": true"#,
            r#", "activation_function": "mish""#,
            r#", "n_head": 5"#,
            r#", "resid_pdrop": 1.0"#,
        ] {
            assert!(Gpt2Config::from_hf(&cfg(extra)).is_err(), "{extra}");
        }
    }

    #[test]
    fn load_moves_each_parameter_once_in_apply_order() {
        let rt = Runtime::default();
        let mut m = crate::families::build(&rt, &cfg(""), Task::Causal, DType::F32).unwrap();
        assert_eq!(rt.memory_allocated(), 0, "built on the CPU");
        m.cuda().unwrap();
        let ps = m.parameters();
        // wte, wpe, 12 per block, ln_f (lm_head tied)
        assert_eq!(ps.len(), 2 + 12 * 2 + 2);
        let bytes: i64 = ps.iter().map(|p| p.nbytes() as i64).sum();
        let live: Vec<u64> = rt.live_allocations().iter().map(|r| r.bytes).collect();
        assert_eq!(live.len(), ps.len());
        assert_eq!(live[..4], [100 * 64 * 4, 32 * 64 * 4, 64 * 4, 64 * 4]);
        // c_attn weight is (nx, nf)
        assert_eq!(ps[4].sizes(), &[64, 192]);
        assert!(rt.memory_allocated() >= bytes);
        let untied = crate::families::build(
            &rt,
            &cfg(r#", "tie_word_embeddings": false"#),
            Task::Causal,
            DType::F32,
        )
        .unwrap();
        assert_eq!(untied.parameters().len(), ps.len() + 1);
    }

    /// One training forward and backward; the peak of the forward.
    fn train_peak(rt: &Runtime, m: &mut Box<dyn HfModel>) -> i64 {
        m.set_training(true);
        let ids = rt.empty(&[2, 16], DType::I64, Device::Cuda).unwrap();
        let inputs = Inputs {
            labels: Some(ids.clone_tensor().unwrap()),
            input_ids: Some(ids),
            pixel_values: None,
        };
        rt.reset_peak_memory_stats();
        let out = m.forward(&inputs).unwrap();
        let peak = rt.max_memory_allocated();
        // the cache lives as long as the output (use_cache is on unless checkpointing)
        let loss = out.loss.unwrap();
        drop(out.logits);
        drop(out.retained);
        loss.backward().unwrap();
        assert!(m.parameters().iter().all(|p| p.grad().is_some()));
        peak
    }

    #[test]
    fn checkpointing_every_block_lowers_the_forward_peak() {
        let rt = Runtime::default();
        let mut m = crate::families::build(&rt, &cfg(""), Task::Causal, DType::F32).unwrap();
        m.cuda().unwrap();
        let plain = train_peak(&rt, &mut m);
        let rt2 = Runtime::default();
        let mut c = crate::families::build(&rt2, &cfg(""), Task::Causal, DType::F32).unwrap();
        c.cuda().unwrap();
        c.enable_gradient_checkpointing(&Checkpointing::Every(1))
            .unwrap();
        let ckpt = train_peak(&rt2, &mut c);
        assert!(ckpt < plain, "checkpointed {ckpt} vs plain {plain}");
    }

    #[test]
    fn mlm_is_not_a_gpt2_task() {
        let rt = Runtime::default();
        assert!(crate::families::build(&rt, &cfg(""), Task::Mlm, DType::F32).is_err());
    }

    #[test]
    fn new_gelu_keeps_what_its_nodes_save() {
        // pow saves x, tanh its result, the final mul both operands:
        // x (input), t, 0.5*x, 1+t and the output stay; 3 temporaries die
        let rt = Runtime::default();
        let x = rt.randn(&[1 << 18], DType::F32, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let base = rt.memory_allocated();
        let y = new_gelu(&x).unwrap();
        assert_eq!(rt.memory_allocated() - base, 4 << 20);
        // the temporaries die as they are consumed: never more than the
        // four survivors live at once
        assert_eq!(rt.max_memory_allocated() - base, 4 << 20);
        drop(y);
        assert_eq!(rt.memory_allocated(), base);
        // without grad only the output survives
        let y = rt.no_grad(|| new_gelu(&x).unwrap());
        assert_eq!(rt.memory_allocated() - base, 1 << 20);
        drop(y);
    }

    #[test]
    fn split_backward_cats_one_gradient() {
        let rt = Runtime::default();
        let x = rt.randn(&[4, 8, 3 * 64], DType::F32, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let parts = x.split(64, 2).unwrap();
        assert_eq!(parts.len(), 3);
        assert!(parts
            .iter()
            .all(|p| p.shares_storage(&x) && p.sizes() == [4, 8, 64]));
        assert_eq!(parts[0].grad_fn_name(), Some("SplitBackward0"));
        assert!(
            parts[0].grad_fn().unwrap().sequence_nr() == parts[2].grad_fn().unwrap().sequence_nr()
        );
        // only q and v used: k's gradient is materialised as zeros, then one cat
        let s = parts[0].add(&parts[2]).unwrap().sum().unwrap();
        drop(parts);
        s.backward().unwrap();
        assert_eq!(x.grad().unwrap().sizes(), x.sizes());
        assert!(x.grad().unwrap().is_contiguous());
    }
}
