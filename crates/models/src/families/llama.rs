//! `modeling_llama.py` (transformers 5.17) and the families that differ from
//! it only in small ways, each difference taken from its own modeling file:
//!
//! - `mistral` (`modeling_mistral.py`): no projection biases; `sliding_window`
//!   (class default 4096) makes every cache layer a
//!   `DynamicSlidingWindowLayer` and the mask a sliding-window mask;
//! - `qwen2` (`modeling_qwen2.py`): biases on `q_proj`/`k_proj`/`v_proj`;
//!   `layer_types` (sliding only with `use_sliding_window`, from
//!   `max_window_layers` on) pick each layer's mask and cache layer;
//! - `qwen3` (`modeling_qwen3.py`): `q_norm`/`k_norm` (RMSNorm over
//!   `head_dim`, applied before the transpose), `head_dim` default 128,
//!   `attention_bias` on all four projections, `layer_types` as qwen2;
//! - `mixtral` (`modeling_mixtral.py`): Mistral's attention and masks with a
//!   [`SparseMoe`] block for the MLP (`sliding_window` defaults to none);
//! - `qwen3_moe` (`modeling_qwen3_moe.py`): Qwen3's attention, Mistral's
//!   single mask and cache (sliding only with `use_sliding_window`), a
//!   [`SparseMoe`] block where `decoder_sparse_step` and `mlp_only_layers`
//!   put one, else a dense `Qwen3MoeMLP`.
//!
//! The task is `…ForCausalLM` with `ForCausalLMLoss`. Every op follows the
//! Python source with CPython's lifetimes; the shared pieces are in
//! [`super::common`].

use std::cell::RefCell;

use vramscope_engine::{Category, DType, Runtime, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::common::{
    self, bad, check_kv_heads, check_padding_idx, check_sliding_window, head_dim_of, to_cuda, Act,
    Attention, AttentionConfig, CausalLm, Decoder, DynamicCache, Embedding, Flags, GatedMlp,
    GenStep, Layer, LayerArgs, Linear, Masks, RmsNorm, RopeType, RotaryEmbedding,
};
use crate::families::moe::{Mlp, MoeConfig, Router, SparseMoe};
use crate::families::HfModel;

/// Which modeling file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Mixtral,
    Qwen3Moe,
}

/// The config, normalised with each family's class defaults
/// (`configuration_<family>.py`).
#[derive(Debug, Clone)]
struct Config {
    family: Family,
    vocab: i64,
    hidden: i64,
    intermediate: i64,
    layers: usize,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    eps: f64,
    tie: bool,
    /// bias of q/k/v
    qkv_bias: bool,
    /// bias of o_proj
    o_bias: bool,
    mlp_bias: bool,
    qk_norm: bool,
    /// `config.sliding_window` (as the cache and the mistral mask read it)
    sliding_window: Option<i64>,
    /// per layer: sliding attention?
    layer_sliding: Vec<bool>,
    use_cache: bool,
    attention_dropout: f64,
    rope: RopeType,
    /// the sparse block's sizes, and per layer whether it has one
    moe: Option<(MoeConfig, Vec<bool>)>,
}

impl Config {
    fn parse(c: &HfConfig) -> Result<Self> {
        let family = match c.model_type.as_str() {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "mixtral" => Family::Mixtral,
            "qwen3_moe" => Family::Qwen3Moe,
            other => return Err(ModelError::UnsupportedModel(other.into())),
        };
        // class defaults: configuration_llama / _mistral / _qwen2 / _qwen3 (5.17)
        // (and _mixtral / _qwen3_moe)
        let (d_vocab, d_inter, d_kv): (i64, i64, Option<i64>) = match family {
            Family::Llama => (32000, 11008, None),
            Family::Mistral | Family::Mixtral => (32000, 14336, Some(8)),
            Family::Qwen2 | Family::Qwen3 => (151936, 22016, Some(32)),
            Family::Qwen3Moe => (151936, 6144, Some(4)),
        };
        let (d_hidden, d_layers) = match family {
            Family::Qwen3Moe => (2048, 24),
            _ => (4096, 32),
        };
        let vocab = c.size("vocab_size", d_vocab)?;
        // `pad_token_id: int | None = None` in all six
        check_padding_idx(c, None, vocab)?;
        let hidden = c.size("hidden_size", d_hidden)?;
        let intermediate = c.size("intermediate_size", d_inter)?;
        let layers = c.size("num_hidden_layers", d_layers)? as usize;
        let heads = c.size("num_attention_heads", 32)?;
        let kv_heads = c.size("num_key_value_heads", d_kv.unwrap_or(heads))?;
        check_kv_heads(heads, kv_heads)?;
        let head_dim = match family {
            // qwen3: `head_dim: int = 128`
            Family::Qwen3 => c.size("head_dim", 128)?,
            _ => match c.opt_int("head_dim")? {
                Some(v) if v > 0 => v,
                Some(v) => {
                    return Err(ModelError::Field {
                        field: "head_dim".into(),
                        detail: format!("must be positive, found {v}"),
                    })
                }
                None => head_dim_of(hidden, heads)?,
            },
        };
        if let Some(act) = c.string("hidden_act")? {
            if act != "silu" {
                return Err(ModelError::Unsupported(format!(
                    "config field `hidden_act` = {act:?} (only silu is modelled for {})",
                    c.model_type
                )));
            }
        }
        c.reject_present("quantization_config", "quantized weights are not modelled")?;
        let attention_bias = c.boolean("attention_bias", false)?;
        let (qkv_bias, o_bias, mlp_bias) = match family {
            Family::Llama => (
                attention_bias,
                attention_bias,
                c.boolean("mlp_bias", false)?,
            ),
            Family::Mistral | Family::Mixtral => (false, false, false),
            Family::Qwen2 => (true, false, false),
            Family::Qwen3 | Family::Qwen3Moe => (attention_bias, attention_bias, false),
        };
        // sliding windows: what `config.sliding_window` and `config.layer_types` are
        let n_layers = layers;
        let (sliding_window, layer_sliding) = match family {
            Family::Llama => {
                c.reject_present("sliding_window", "llama has no sliding-window attention")?;
                c.reject_present("layer_types", "llama has one attention type")?;
                (None, vec![false; n_layers])
            }
            Family::Mistral | Family::Mixtral => {
                c.reject_present(
                    "layer_types",
                    "Mistral with layer_types (alternating attention) is not modelled",
                )?;
                // `sliding_window: int | None = 4096` (Mixtral: `= None`):
                // absent means the default, null means none
                let sw = if c.raw().contains_key("sliding_window") {
                    c.opt_int("sliding_window")?
                } else if family == Family::Mistral {
                    Some(4096)
                } else {
                    None
                };
                let all = sw.is_some();
                (sw, vec![all; n_layers])
            }
            Family::Qwen3Moe => {
                c.reject_present(
                    "layer_types",
                    "qwen3_moe with layer_types (its config has none) is not modelled",
                )?;
                // __post_init__: `sliding_window if use_sliding_window else None`
                let sw = if c.boolean("use_sliding_window", false)? {
                    if c.raw().contains_key("sliding_window") {
                        c.opt_int("sliding_window")?
                    } else {
                        Some(4096)
                    }
                } else {
                    None
                };
                let all = sw.is_some();
                (sw, vec![all; n_layers])
            }
            Family::Qwen2 | Family::Qwen3 => {
                let use_sw = c.boolean("use_sliding_window", false)?;
                let sw = if use_sw {
                    if c.raw().contains_key("sliding_window") {
                        c.opt_int("sliding_window")?
                    } else {
                        Some(4096)
                    }
                } else {
                    None
                };
                let types = match c.get("layer_types") {
                    Some(v) => {
                        let arr = v
                            .as_array()
                            .ok_or_else(|| bad("layer_types", "expected a list"))?;
                        if arr.len() != n_layers {
                            return Err(bad(
                                "layer_types",
                                format!("{} entries for {n_layers} layers", arr.len()),
                            ));
                        }
                        arr.iter()
                            .map(|t| match t.as_str() {
                                Some("full_attention") => Ok(false),
                                Some("sliding_attention") => Ok(true),
                                _ => Err(ModelError::Unsupported(format!(
                                    "config field `layer_types` entry {t} (full_attention or sliding_attention)"
                                ))),
                            })
                            .collect::<Result<Vec<bool>>>()?
                    }
                    None => {
                        let mwl = c.int("max_window_layers", 28)?;
                        (0..n_layers)
                            .map(|i| sw.is_some() && (i as i64) >= mwl)
                            .collect()
                    }
                };
                if types.iter().any(|&s| s) && sw.is_none() {
                    return Err(bad(
                        "layer_types",
                        "sliding_attention layers need a sliding_window",
                    ));
                }
                (sw, types)
            }
        };
        check_sliding_window(sliding_window)?;
        let moe = moe_config(c, family, n_layers, intermediate)?;
        Ok(Config {
            family,
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            eps: c.float("rms_norm_eps", 1e-6)?,
            tie: c.boolean("tie_word_embeddings", false)?,
            qkv_bias,
            o_bias,
            mlp_bias,
            qk_norm: matches!(family, Family::Qwen3 | Family::Qwen3Moe),
            sliding_window,
            layer_sliding,
            use_cache: c.boolean("use_cache", true)?,
            attention_dropout: c.float("attention_dropout", 0.0)?,
            rope: common::rope_type(c)?,
            moe,
        })
    }

    /// The cache layers `DynamicCache(config=config)` builds
    /// (`get_layer_types_and_kwargs`): `layer_types` if the config has them
    /// (qwen2/qwen3 always do), else all sliding when `sliding_window` is set.
    fn cache_layers(&self) -> Vec<Option<i64>> {
        match self.family {
            Family::Qwen2 | Family::Qwen3 => self
                .layer_sliding
                .iter()
                .map(|&s| if s { self.sliding_window } else { None })
                .collect(),
            Family::Llama | Family::Mistral | Family::Mixtral | Family::Qwen3Moe => {
                vec![self.sliding_window; self.layers]
            }
        }
    }
}

// ---- modules --------------------------------------------------------------------------

/// `LlamaDecoderLayer` (a `GradientCheckpointingLayer`).
#[derive(Clone)]
struct DecoderLayer {
    self_attn: Attention,
    /// `LlamaMLP` (silu), or the MoE families' sparse block
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    sliding: bool,
}

impl DecoderLayer {
    /// Its parameters, in registration order.
    fn params(&self, v: &mut Vec<Tensor>) {
        self.self_attn.params(v);
        self.mlp.params(v);
        v.push(self.input_layernorm.weight.clone());
        v.push(self.post_attention_layernorm.weight.clone());
    }
}

impl Layer for DecoderLayer {
    /// `LlamaDecoderLayer.forward`.
    fn forward(
        &self,
        x: &Tensor,
        args: &LayerArgs,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<DynamicCache>>,
    ) -> Result<Tensor> {
        let (residual, a) = common::pre_norm_sublayer(
            x,
            |x| self.input_layernorm.forward("input_layernorm", x),
            "self_attn",
            |h| {
                self.self_attn
                    .forward(h, (&args.cos, &args.sin), args.training, mask, cache)
            },
        )?;
        let h = residual.add(&a)?;
        drop(a);
        let (residual, m) = common::pre_norm_sublayer(
            &h,
            |h| {
                self.post_attention_layernorm
                    .forward("post_attention_layernorm", h)
            },
            "mlp",
            |n| self.mlp.forward(n, args.decode),
        )?;
        drop(h);
        let out = residual.add(&m)?;
        drop(m);
        drop(residual);
        Ok(out)
    }

    fn sliding(&self) -> bool {
        self.sliding
    }
}

/// `LlamaModel` (and the other families' `…Model`).
struct Model {
    cfg: Config,
    rt: Runtime,
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    rotary_emb: RotaryEmbedding,
}

/// Build `LlamaForCausalLM` (and the other families' `…ForCausalLM`) on
/// the CPU in `weights`.
pub(crate) fn build(rt: &Runtime, config: &HfConfig, weights: DType) -> Result<Box<dyn HfModel>> {
    let cfg = Config::parse(config)?;
    let w = weights;
    let embed_tokens = Embedding::new(rt, cfg.vocab, cfg.hidden, w)?;
    let mut layers = Vec::with_capacity(cfg.layers);
    for i in 0..cfg.layers {
        let h = cfg.hidden;
        let attention = AttentionConfig {
            hidden: h,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: cfg.head_dim,
            qkv_bias: cfg.qkv_bias,
            o_bias: cfg.o_bias,
            scaling: (cfg.head_dim as f64).powf(-0.5),
            dropout: cfg.attention_dropout,
            qk_norm_eps: cfg.qk_norm.then_some(cfg.eps),
        };
        let self_attn = Attention::new(rt, i, &attention, w)?;
        let mlp = match &cfg.moe {
            Some((m, sparse)) if sparse[i] => Mlp::Sparse(SparseMoe::new(rt, h, *m, w)?),
            _ => Mlp::Dense(GatedMlp::new(
                rt,
                h,
                cfg.intermediate,
                cfg.mlp_bias,
                Act::Silu,
                w,
            )?),
        };
        layers.push(DecoderLayer {
            self_attn,
            mlp,
            input_layernorm: RmsNorm::new(rt, h, cfg.eps, w)?,
            post_attention_layernorm: RmsNorm::new(rt, h, cfg.eps, w)?,
            sliding: cfg.layer_sliding[i],
        });
    }
    let norm = RmsNorm::new(rt, cfg.hidden, cfg.eps, w)?;
    let rotary_emb = RotaryEmbedding::new(rt, cfg.head_dim, cfg.rope)?;
    let (hidden, vocab, tie) = (cfg.hidden, cfg.vocab, cfg.tie);
    let tokens = generation_tokens(config, cfg.family)?;
    let model = Model {
        cfg,
        rt: rt.clone(),
        embed_tokens,
        layers,
        norm,
        rotary_emb,
    };
    Ok(Box::new(
        CausalLm::new(rt, model, hidden, vocab, tie, w)?.with_tokens(tokens),
    ))
}

/// The special tokens `generate()` reads: the config's, else the class
/// defaults (`LlamaConfig`, `MistralConfig`, `MixtralConfig`: bos 1, eos 2;
/// `Qwen2Config`, `Qwen3Config`, `Qwen3MoeConfig`: none); no pad token.
fn generation_tokens(c: &HfConfig, family: Family) -> Result<crate::families::generate::Tokens> {
    let bos_eos = match family {
        Family::Llama | Family::Mistral | Family::Mixtral => true,
        Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe => false,
    };
    crate::families::generate::Tokens::of_config(
        c,
        crate::families::generate::Tokens {
            bos: bos_eos,
            eos: bos_eos.then_some(1),
            pad: false,
        },
    )
}

/// The sparse blocks of `mixtral` (`num_local_experts`, every layer) and
/// `qwen3_moe` (`num_experts`, the layers `decoder_sparse_step` picks outside
/// `mlp_only_layers`), from `configuration_mixtral.py` /
/// `configuration_qwen3_moe.py`; `None` for the dense families.
fn moe_config(
    c: &HfConfig,
    family: Family,
    layers: usize,
    intermediate: i64,
) -> Result<Option<(MoeConfig, Vec<bool>)>> {
    if !matches!(family, Family::Mixtral | Family::Qwen3Moe) {
        return Ok(None);
    }
    if c.boolean("output_router_logits", false)? {
        return Err(ModelError::Unsupported(
            "config field `output_router_logits` = true (the router logits kept and the \
             load-balancing loss are not modelled)"
                .into(),
        ));
    }
    let (experts, top_k, moe_inter, router, sparse) = match family {
        Family::Mixtral => {
            // `if self.training and self.jitter_noise > 0: hidden_states *= ...uniform_(...)`
            if c.float("router_jitter_noise", 0.0)? != 0.0 {
                return Err(ModelError::Unsupported(
                    "config field `router_jitter_noise` other than 0 (the jitter's \
                     uniform_ noise multiplied in place in training is not modelled)"
                        .into(),
                ));
            }
            let experts = c.size("num_local_experts", 8)?;
            (
                experts,
                c.size("num_experts_per_tok", 2)?,
                intermediate,
                Router::Mixtral,
                vec![true; layers],
            )
        }
        _ => {
            let experts = c.int("num_experts", 128)?;
            let step = c.size("decoder_sparse_step", 1)?;
            let dense_only: Vec<i64> = match c.get("mlp_only_layers") {
                None => Vec::new(),
                Some(v) if v.is_null() => Vec::new(),
                Some(v) => v
                    .as_array()
                    .and_then(|a| a.iter().map(|x| x.as_i64()).collect::<Option<Vec<_>>>())
                    .ok_or_else(|| bad("mlp_only_layers", "expected a list of layer indices"))?,
            };
            let sparse = (0..layers as i64)
                .map(|i| !dense_only.contains(&i) && experts > 0 && (i + 1) % step == 0)
                .collect();
            (
                experts,
                c.size("num_experts_per_tok", 8)?,
                c.size("moe_intermediate_size", 768)?,
                Router::Qwen3 {
                    norm_topk_prob: c.boolean("norm_topk_prob", false)?,
                },
                sparse,
            )
        }
    };
    if experts <= 0 || top_k > experts {
        return Err(bad(
            "num_experts_per_tok",
            format!("{top_k} of {experts} experts"),
        ));
    }
    Ok(Some((
        MoeConfig {
            experts,
            top_k,
            intermediate: moe_inter,
            router,
        },
        sparse,
    )))
}

impl Decoder for Model {
    fn embed_weight(&self) -> &Tensor {
        &self.embed_tokens.weight
    }

    fn cuda(&mut self) -> Result<()> {
        // Module._apply: embed_tokens, layers..., norm, rotary_emb buffers
        to_cuda(&mut self.embed_tokens.weight, Category::Parameter)?;
        for l in &mut self.layers {
            l.self_attn.cuda()?;
            l.mlp.cuda()?;
            to_cuda(&mut l.input_layernorm.weight, Category::Parameter)?;
            to_cuda(&mut l.post_attention_layernorm.weight, Category::Parameter)?;
        }
        to_cuda(&mut self.norm.weight, Category::Parameter)?;
        self.rotary_emb.cuda()
    }

    fn parameters(&self, v: &mut Vec<Tensor>) {
        v.push(self.embed_tokens.weight.clone());
        for l in &self.layers {
            l.params(v);
        }
        v.push(self.norm.weight.clone());
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        // LlamaRotaryEmbedding's `inv_freq` and `original_inv_freq`
        Some(vec![
            self.rotary_emb.inv_freq.clone(),
            self.rotary_emb.original_inv_freq.clone(),
        ])
    }

    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        common::per_layer(&self.layers, DecoderLayer::params)
    }

    /// `LlamaModel.forward` (and the others').
    fn forward(
        &self,
        ids: &Tensor,
        flags: &Flags,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)> {
        self.run(ids, flags, None)
    }

    /// A forward of `generate()`: the positions, the 2-D mask and the
    /// cache come from the loop.
    fn forward_generate(
        &self,
        ids: &Tensor,
        flags: &Flags,
        step: &GenStep,
    ) -> Option<Result<Tensor>> {
        Some(self.run(ids, flags, Some(step)).map(|(h, _)| h))
    }

    fn cache_layers(&self) -> Vec<Option<i64>> {
        self.cfg.cache_layers()
    }

    fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut v = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let a = &mut l.self_attn;
            v.push((format!("layers.{i}.self_attn.q_proj"), &mut a.q_proj));
            v.push((format!("layers.{i}.self_attn.k_proj"), &mut a.k_proj));
            v.push((format!("layers.{i}.self_attn.v_proj"), &mut a.v_proj));
            v.push((format!("layers.{i}.self_attn.o_proj"), &mut a.o_proj));
            // a sparse block's experts are 3-D parameters, not Linear modules
            if let Mlp::Dense(m) = &mut l.mlp {
                v.push((format!("layers.{i}.mlp.gate_proj"), &mut m.gate_proj));
                v.push((format!("layers.{i}.mlp.up_proj"), &mut m.up_proj));
                v.push((format!("layers.{i}.mlp.down_proj"), &mut m.down_proj));
            }
        }
        v
    }

    fn default_lora_targets(&self) -> &'static [&'static str] {
        let name = match self.cfg.family {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Mixtral => "mixtral",
            Family::Qwen3Moe => "qwen3_moe",
        };
        super::peft_lora_targets(name).unwrap_or(&[])
    }
}

impl Model {
    /// The forward, with `generate()`'s inputs when `step` is given (then
    /// no cache is created and none is returned).
    fn run(
        &self,
        ids: &Tensor,
        flags: &Flags,
        step: Option<&GenStep>,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)> {
        let rt = self.rt.clone();
        let cfg = &self.cfg;
        let inputs_embeds = self.embed_tokens.forward("embed_tokens", ids)?;
        if flags.input_requires_grad && !inputs_embeds.requires_grad() {
            // enable_input_require_grads: output.requires_grad_(True)
            inputs_embeds.requires_grad_(true)?;
        }
        let cache = match step {
            None => flags.new_cache(cfg.use_cache, &cfg.cache_layers()),
            Some(_) => None,
        };
        let cache_ref = step.map(|g| g.cache).or(cache.as_ref());
        let seq = inputs_embeds.size(1);
        let position_ids = match step {
            Some(g) => g.position_ids.clone(),
            None => common::position_ids(&rt, seq, 0)?,
        };
        // the masks each layer type gets
        let (full, sliding) = match cfg.family {
            Family::Llama => (true, None),
            Family::Mistral | Family::Mixtral | Family::Qwen3Moe => {
                (cfg.sliding_window.is_none(), cfg.sliding_window)
            }
            Family::Qwen2 | Family::Qwen3 => {
                let any_sliding = cfg.layer_sliding.iter().any(|&s| s);
                (true, cfg.sliding_window.filter(|_| any_sliding))
            }
        };
        let masks = Masks::new(
            &inputs_embeds,
            &position_ids,
            cache_ref,
            step,
            full,
            sliding,
        )?;
        let cos_sin = self
            .rotary_emb
            .forward("rotary_emb", &inputs_embeds, &position_ids)?;
        // Mistral, Mixtral and Qwen3-MoE pass `position_ids=` before
        // `position_embeddings=` to each layer, Llama, Qwen2 and Qwen3 after
        let ids_first = matches!(
            cfg.family,
            Family::Mistral | Family::Mixtral | Family::Qwen3Moe
        );
        let args =
            LayerArgs::new(cos_sin, &position_ids, ids_first, flags.training).with_decode(step);
        let (out, position_embeddings) = common::decoder_stack(
            &self.layers,
            &inputs_embeds,
            args,
            &masks,
            flags,
            cache_ref,
            |h| self.norm.forward("norm", h),
        )?;
        // locals die in `co_varnames` order
        match cfg.family {
            Family::Llama | Family::Mistral | Family::Mixtral | Family::Qwen3Moe => {
                // position_ids, inputs_embeds, causal_mask, ...
                drop(position_ids);
                drop(inputs_embeds);
                drop(masks);
            }
            Family::Qwen2 | Family::Qwen3 => {
                // position_ids and inputs_embeds are still held by `mask_kwargs`;
                // `causal_mask_mapping` dies before it
                drop(masks);
                drop(inputs_embeds);
                drop(position_ids);
            }
        }
        drop(position_embeddings);
        Ok((out, cache))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::common::tests::alloc_sizes;
    use crate::workload::Task;

    fn cfg(json: &str) -> Result<Config> {
        Config::parse(&HfConfig::parse(json).unwrap())
    }

    #[test]
    fn class_defaults_fill_absent_fields() {
        let c = cfg(r#"{"model_type":"mistral","hidden_size":512,"num_attention_heads":8,"num_hidden_layers":2}"#).unwrap();
        assert_eq!(
            (c.kv_heads, c.head_dim, c.sliding_window),
            (8, 64, Some(4096))
        );
        assert_eq!(c.cache_layers(), vec![Some(4096), Some(4096)]);
        let c = cfg(r#"{"model_type":"mistral","hidden_size":512,"num_attention_heads":8,"num_key_value_heads":2,"sliding_window":null}"#).unwrap();
        assert_eq!(c.sliding_window, None);
        let c = cfg(r#"{"model_type":"qwen3","hidden_size":512,"num_attention_heads":8,"num_key_value_heads":4,"num_hidden_layers":2}"#).unwrap();
        assert_eq!((c.head_dim, c.qk_norm, c.qkv_bias), (128, true, false));
        let c = cfg(r#"{"model_type":"qwen2","hidden_size":512,"num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":30,"use_sliding_window":true,"sliding_window":256}"#).unwrap();
        assert_eq!(c.layer_sliding.iter().filter(|&&s| s).count(), 2);
        assert!(c.qkv_bias && !c.o_bias);
        let c = cfg(r#"{"model_type":"llama","hidden_size":512,"num_attention_heads":8}"#).unwrap();
        assert_eq!((c.kv_heads, c.head_dim, c.vocab), (8, 64, 32000));
    }

    #[test]
    fn cuda_moves_parameters_in_module_apply_order_and_a_tied_head_once() {
        // qwen3, 1 layer, tied: embed, q/k/v/o, q_norm, k_norm, gate/up/down,
        // the two layer norms, the final norm, inv_freq and original_inv_freq
        let c = HfConfig::parse(
            r#"{"model_type":"qwen3","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,
                "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":100,
                "tie_word_embeddings":true}"#,
        )
        .unwrap();
        let rt = Runtime::default();
        let mut m = crate::families::build(&rt, &c, Task::Causal, DType::BF16).unwrap();
        let sizes = alloc_sizes(&rt, || m.cuda().unwrap());
        let bf = |n: u64| n * 2;
        assert_eq!(
            sizes,
            vec![
                bf(100 * 64),
                bf(64 * 64),
                bf(32 * 64),
                bf(32 * 64),
                bf(64 * 64),
                bf(16),
                bf(16),
                bf(96 * 64),
                bf(96 * 64),
                bf(64 * 96),
                bf(64),
                bf(64),
                bf(64),
                8 * 4, // inv_freq: float32, head_dim / 2
                8 * 4,
            ]
        );
        let ps = m.parameters();
        assert_eq!(ps.len(), 13, "the tied lm_head is not a second parameter");
        assert!(matches!(
            crate::families::build(&rt, &c, Task::Mlm, DType::BF16),
            Err(ModelError::Unsupported(_))
        ));
    }

    #[test]
    fn moe_blocks_follow_decoder_sparse_step_and_mlp_only_layers() {
        let c = cfg(
            r#"{"model_type":"qwen3_moe","num_hidden_layers":6,"decoder_sparse_step":2,
                        "mlp_only_layers":[3]}"#,
        )
        .unwrap();
        let (m, sparse) = c.moe.unwrap();
        // layers 1 and 5 ((i + 1) % 2 == 0, not 3)
        assert_eq!(sparse, vec![false, true, false, false, false, true]);
        assert_eq!((m.experts, m.top_k, m.intermediate), (128, 8, 768));
        assert_eq!(
            (c.hidden, c.kv_heads, c.head_dim, c.sliding_window),
            (2048, 4, 64, None)
        );
        let c = cfg(r#"{"model_type":"mixtral","num_hidden_layers":2}"#).unwrap();
        let (m, sparse) = c.moe.unwrap();
        assert_eq!((m.experts, m.top_k, m.intermediate), (8, 2, 14336));
        assert_eq!((sparse, c.sliding_window), (vec![true, true], None));
        // the class defaults of max_position_embeddings (configuration_*.py, 5.17)
        for (t, n) in [
            ("mixtral", 131_072),
            ("qwen3_moe", 32768),
            ("gemma3_text", 131_072),
        ] {
            let c = HfConfig::parse(&format!(r#"{{"model_type":"{t}"}}"#)).unwrap();
            assert_eq!(crate::families::max_positions(&c).unwrap(), Some(n), "{t}");
        }
        assert!(cfg(r#"{"model_type":"mixtral","output_router_logits":true}"#).is_err());
        assert!(cfg(r#"{"model_type":"mixtral","num_experts_per_tok":9}"#).is_err());
    }

    #[test]
    fn moe_parameters_in_registration_order_and_a_training_forward() {
        let rt = Runtime::default();
        let json = |t: &str| {
            HfConfig::parse(&format!(
                r#"{{"model_type":"{t}","hidden_size":64,"intermediate_size":96,"moe_intermediate_size":32,
                    "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
                    "vocab_size":100,"num_local_experts":4,"num_experts":4,"num_experts_per_tok":2}}"#
            ))
            .unwrap()
        };
        // mixtral: gate (4, 64), then gate_up_proj (4, 192, 64), down_proj (4, 64, 96)
        let mut m =
            crate::families::build(&rt, &json("mixtral"), Task::Causal, DType::BF16).unwrap();
        let sizes = alloc_sizes(&rt, || m.cuda().unwrap());
        assert_eq!(&sizes[5..8], &[512, 4 * 192 * 64 * 2, 4 * 64 * 96 * 2]);
        // qwen3_moe registers the experts first: gate_up (4, 64, 64), down (4, 64, 32), gate
        let mut q =
            crate::families::build(&rt, &json("qwen3_moe"), Task::Causal, DType::BF16).unwrap();
        let sizes = alloc_sizes(&rt, || q.cuda().unwrap());
        assert_eq!(&sizes[7..10], &[4 * 64 * 64 * 2, 4 * 64 * 32 * 2, 512]);
        q.set_training(true);
        let ids = rt
            .empty(&[1, 8], DType::I64, vramscope_engine::Device::Cuda)
            .unwrap();
        let inputs = crate::families::Inputs {
            input_ids: Some(ids.clone()),
            labels: Some(ids),
            ..Default::default()
        };
        let out = q.forward(&inputs).unwrap();
        assert!(out.loss.is_some_and(|l| l.requires_grad()));
    }

    /// A checkpointed layer's `partial` keywords release `position_ids`
    /// and `(cos, sin)` in the order the model passes them: Mistral's
    /// `position_ids=` first (the GPU's traces of the session-16 multi-GPU
    /// set free its storage before the embeddings at the end of every
    /// backward), Llama's last.
    #[test]
    fn checkpointed_layers_release_position_ids_in_the_models_keyword_order() {
        let order = |t: &str| -> Vec<&'static str> {
            let rt = Runtime::default();
            let c = HfConfig::parse(&format!(
                r#"{{"model_type":"{t}","hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,
                    "num_attention_heads":4,"num_key_value_heads":4,"vocab_size":100}}"#
            ))
            .unwrap();
            let mut m = crate::families::build(&rt, &c, Task::Causal, DType::F32).unwrap();
            m.cuda().unwrap();
            m.enable_gradient_checkpointing(&crate::workload::Checkpointing::Every(1))
                .unwrap();
            m.set_training(true);
            let ids = rt
                .empty(&[1, 24], DType::I64, vramscope_engine::Device::Cuda)
                .unwrap();
            let inputs = crate::families::Inputs {
                input_ids: Some(ids.clone()),
                labels: Some(ids),
                ..Default::default()
            };
            rt.start_event_log();
            let out = m.forward(&inputs).unwrap();
            drop(out.logits);
            out.loss.unwrap().backward().unwrap();
            let log = rt.take_event_log().unwrap();
            // position_ids: `arange(24) + 0` (192 bytes); cos and sin:
            // `emb.cos() * 1.0`, `emb.sin() * 1.0` (1, 24, 16) float32
            let mut named = std::collections::HashMap::new();
            for e in &log.events {
                if let vramscope_engine::MemEvent::Alloc(r) = e {
                    let name = match (r.op, r.bytes) {
                        ("add", 192) => "position_ids",
                        ("mul", 1536) if !named.values().any(|n| *n == "cos") => "cos",
                        ("mul", 1536) => "sin",
                        _ => continue,
                    };
                    if !named.values().any(|n| *n == name) {
                        named.insert(r.addr, name);
                    }
                }
            }
            log.events
                .iter()
                .filter_map(|e| match e {
                    vramscope_engine::MemEvent::Free(a) => named.get(a).copied(),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(order("mistral"), ["position_ids", "cos", "sin"]);
        assert_eq!(order("llama"), ["cos", "sin", "position_ids"]);
    }

    #[test]
    fn unmodelled_fields_are_refused() {
        assert!(cfg(r#"{"model_type":"llama","hidden_act":"gelu"}"#).is_err());
        assert!(
            cfg(r#"{"model_type":"llama","num_attention_heads":8,"num_key_value_heads":3}"#)
                .is_err()
        );
        assert!(cfg(r#"{"model_type":"llama","rope_scaling":{"rope_type":"longrope"}}"#).is_err());
        assert!(cfg(r#"{"model_type":"llama","quantization_config":{"bits":4}}"#).is_err());
    }
}
