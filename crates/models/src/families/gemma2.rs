//! `modeling_gemma2.py` (transformers 5.17): `Gemma2ForCausalLM`.
//!
//! What differs from Llama, each taken from `modeling_gemma2.py` /
//! `configuration_gemma2.py`:
//!
//! - `Gemma2TextScaledWordEmbedding`: the embedding times the buffer
//!   `embed_scale` (`torch.tensor(hidden_size ** 0.5)` built under the
//!   default dtype, i.e. in the weight dtype: a 0-dim device tensor moved
//!   after the embedding weight); the product's `MulBackward0` saves only
//!   the scale, so the embedding output dies at once;
//! - [`Gemma2RmsNorm`]: the whole norm in float32 with `1 + weight`
//!   (`weight.float()`, `1.0 + ...`, then `type_as` back), four per layer
//!   (`input_`, `post_attention_`, `pre_feedforward_`, `post_feedforward_layernorm`);
//! - MLP: `down_proj(act(gate_proj(x)) * up_proj(x))` with
//!   `hidden_activation` (class default `gelu_pytorch_tanh`);
//! - attention: `scaling = query_pre_attn_scalar ** -0.5`; layers alternate
//!   sliding / full attention (`layer_types`), each with its mask (the
//!   full one is SDPA's `is_causal`, the sliding one a bool matrix once the
//!   sequence reaches the window) and its cache layer
//!   (`DynamicSlidingWindowLayer` for sliding layers);
//!   `attn_logit_softcapping` goes to the attention interface as `softcap`,
//!   which `sdpa_attention_forward` swallows in `**kwargs`: with SDPA it
//!   changes nothing (only the eager path caps the scores);
//! - `final_logit_softcapping`: `logits / cap`, `tanh`, `* cap` on the
//!   logits (each a new tensor; `TanhBackward0` saves its result);
//! - `tie_word_embeddings` defaults to `True` (`lm_head.weight` is the
//!   embedding's: moved and counted once).
//!
//! The shared pieces (rotary, masks, cache, SDPA, loss) are in
//! [`super::common`].

use std::cell::RefCell;

use vramscope_engine::{Category, DType, Runtime, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::common::{
    self, bad, check_kv_heads, check_padding_idx, check_sliding_window, cpu_buffer, head_dim_of,
    parameter, to_cuda, Act, Attention, AttentionConfig, CausalLm, Decoder, DynamicCache,
    Embedding, Flags, GatedMlp, Layer, LayerArgs, Masks, RopeType, RotaryEmbedding,
};
use crate::families::HfModel;

// ---- config --------------------------------------------------------------------------

/// `Gemma2Config`, normalised with its class defaults (`configuration_gemma2.py`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    vocab: i64,
    hidden: i64,
    intermediate: i64,
    layers: usize,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    eps: f64,
    tie: bool,
    act: Act,
    attention_bias: bool,
    attention_dropout: f64,
    /// `query_pre_attn_scalar ** -0.5`
    scaling: f64,
    sliding_window: Option<i64>,
    /// per layer: `layer_types[i] == "sliding_attention"`
    layer_sliding: Vec<bool>,
    final_logit_softcapping: Option<f64>,
    use_cache: bool,
    rope: RopeType,
}

impl Config {
    pub(crate) fn parse(c: &HfConfig) -> Result<Self> {
        if c.model_type != "gemma2" {
            return Err(ModelError::UnsupportedModel(c.model_type.clone()));
        }
        // class defaults of Gemma2Config (5.17)
        let vocab = c.size("vocab_size", 256000)?;
        // `pad_token_id: int | None = 0`
        check_padding_idx(c, Some(0), vocab)?;
        let hidden = c.size("hidden_size", 2304)?;
        let intermediate = c.size("intermediate_size", 9216)?;
        let layers = c.size("num_hidden_layers", 26)? as usize;
        let heads = c.size("num_attention_heads", 8)?;
        // `num_key_value_heads: int = 4` (not num_attention_heads)
        let kv_heads = c.size("num_key_value_heads", 4)?;
        check_kv_heads(heads, kv_heads)?;
        // validate_architecture: hidden_size a multiple of num_attention_heads
        head_dim_of(hidden, heads)?;
        let head_dim = c.size("head_dim", 256)?;
        let act = Act::parse_gated(
            "hidden_activation",
            c.string("hidden_activation")?
                .unwrap_or("gelu_pytorch_tanh"),
        )?;
        c.reject_present("quantization_config", "quantized weights are not modelled")?;
        if c.boolean("use_bidirectional_attention", false)? {
            return Err(ModelError::Unsupported(
                "config field `use_bidirectional_attention` = true (bidirectional masks are not \
                 modelled)"
                    .into(),
            ));
        }
        let rope = common::rope_type(c)?;
        if rope != RopeType::Default {
            // the non-default init functions read partial_rotary_factor
            let prf = c
                .get("rope_parameters")
                .and_then(|v| v.get("partial_rotary_factor"))
                .and_then(|v| v.as_f64())
                .or(c.opt_float("partial_rotary_factor")?);
            if prf.is_some_and(|f| f != 1.0) {
                return Err(ModelError::Unsupported(
                    "partial_rotary_factor with a non-default RoPE in gemma2".into(),
                ));
            }
        }
        // `sliding_window: int | None = 4096`: absent means 4096, null means none
        let sliding_window = if c.raw().contains_key("sliding_window") {
            c.opt_int("sliding_window")?
        } else {
            Some(4096)
        };
        check_sliding_window(sliding_window)?;
        // __post_init__: sliding for even i ((i + 1) % 2), full for odd i
        let layer_sliding: Vec<bool> = match c.get("layer_types") {
            Some(v) => {
                let arr = v
                    .as_array()
                    .ok_or_else(|| bad("layer_types", "expected a list"))?;
                if arr.len() != layers {
                    return Err(bad(
                        "layer_types",
                        format!("{} entries for {layers} layers", arr.len()),
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
                    .collect::<Result<_>>()?
            }
            None => (0..layers).map(|i| (i + 1) % 2 == 1).collect(),
        };
        // Gemma2Model.forward always builds the sliding mask, which raises
        // without a window; so does the cache of a sliding layer
        if sliding_window.is_none() {
            return Err(bad(
                "sliding_window",
                "null, but Gemma2Model always builds a sliding-window mask \
                 (create_sliding_window_causal_mask raises)",
            ));
        }
        let dropout = c.float("attention_dropout", 0.0)?;
        if !(0.0..1.0).contains(&dropout) {
            return Err(bad(
                "attention_dropout",
                format!("must be in [0, 1), found {dropout}"),
            ));
        }
        let qpas = c.float("query_pre_attn_scalar", 256.0)?;
        if qpas <= 0.0 {
            return Err(bad(
                "query_pre_attn_scalar",
                format!("must be positive, found {qpas}"),
            ));
        }
        // `final_logit_softcapping: float | None = 30.0`: absent means 30, null means none
        let final_logit_softcapping = if c.raw().contains_key("final_logit_softcapping") {
            c.opt_float("final_logit_softcapping")?
        } else {
            Some(30.0)
        };
        if let Some(cap) = final_logit_softcapping {
            if cap == 0.0 {
                return Err(bad("final_logit_softcapping", "must not be 0"));
            }
        }
        // `attn_logit_softcapping` only reaches the eager attention: validated, no memory
        c.opt_float("attn_logit_softcapping")?;
        Ok(Config {
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            eps: c.float("rms_norm_eps", 1e-6)?,
            tie: c.boolean("tie_word_embeddings", true)?,
            act,
            attention_bias: c.boolean("attention_bias", false)?,
            attention_dropout: dropout,
            scaling: qpas.powf(-0.5),
            sliding_window,
            layer_sliding,
            final_logit_softcapping,
            use_cache: c.boolean("use_cache", true)?,
            rope,
        })
    }

    /// The cache layers `DynamicCache(config=config)` builds: one per
    /// `layer_types` entry, sliding ones with the window.
    fn cache_layers(&self) -> Vec<Option<i64>> {
        self.layer_sliding
            .iter()
            .map(|&s| if s { self.sliding_window } else { None })
            .collect()
    }
}

// ---- modules --------------------------------------------------------------------------

/// `Gemma2RMSNorm(dim, eps)`: weight `torch.zeros(dim)` in the weight dtype;
///
/// ```python
/// def _norm(self, x):
///     return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
/// def forward(self, x):
///     output = self._norm(x.float())
///     output = output * (1.0 + self.weight.float())
///     return output.type_as(x)
/// ```
///
/// `_norm`: `pow` (dies after `mean`), `mean`, `+ eps` (the mean dies),
/// `rsqrt` (the sum dies), the product (`rsqrt` dies); the float copy dies
/// when `_norm` returns unless saved (`PowBackward0` and `MulBackward0` keep
/// it in training). Then `weight.float()` (a copy unless fp32; dies after
/// the add), `1.0 + ...`, the product, the cast back; at return the fp32
/// `output` dies.
#[derive(Clone)]
pub(crate) struct Gemma2RmsNorm {
    /// `(dim,)`
    pub(crate) weight: Tensor,
    /// `eps` (changes no memory)
    pub(crate) eps: f64,
}

impl Gemma2RmsNorm {
    /// Built on the CPU in `dtype`.
    pub(crate) fn new(rt: &Runtime, dim: i64, eps: f64, dtype: DType) -> Result<Self> {
        Ok(Gemma2RmsNorm {
            weight: parameter(rt, &[dim], dtype)?,
            eps,
        })
    }

    /// `self(x)`, attributed to module `name`.
    pub(crate) fn forward(&self, name: &str, x: &Tensor) -> Result<Tensor> {
        let rt = x.runtime().clone();
        rt.in_module(name, || self.forward_inner(x))
    }

    fn forward_inner(&self, x: &Tensor) -> Result<Tensor> {
        let output = {
            let xf = x.to_dtype(DType::F32)?;
            let normed = {
                let m = {
                    let p = xf.pow_scalar(2.0)?;
                    p.mean_dims(&[-1], true)?
                };
                let a = m.add_scalar(self.eps)?;
                drop(m);
                let r = a.rsqrt()?;
                drop(a);
                xf.mul(&r)?
            };
            drop(xf);
            normed
        };
        let scaled = {
            let w1 = {
                let wf = self.weight.to_dtype(DType::F32)?;
                wf.add_scalar(1.0)?
            };
            output.mul(&w1)?
        };
        drop(output);
        let out = scaled.to_dtype(x.dtype())?;
        drop(scaled);
        Ok(out)
    }
}

/// `Gemma2DecoderLayer` (a `GradientCheckpointingLayer`).
#[derive(Clone)]
struct DecoderLayer {
    self_attn: Attention,
    /// `Gemma2MLP`
    mlp: GatedMlp,
    input_layernorm: Gemma2RmsNorm,
    post_attention_layernorm: Gemma2RmsNorm,
    pre_feedforward_layernorm: Gemma2RmsNorm,
    post_feedforward_layernorm: Gemma2RmsNorm,
    sliding: bool,
}

impl Layer for DecoderLayer {
    /// `Gemma2DecoderLayer.forward`.
    fn forward(
        &self,
        x: &Tensor,
        args: &LayerArgs,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<DynamicCache>>,
    ) -> Result<Tensor> {
        let l = self;
        let (residual, a) = common::pre_norm_sublayer(
            x,
            |x| l.input_layernorm.forward("input_layernorm", x),
            "self_attn",
            |h| {
                l.self_attn
                    .forward(h, (&args.cos, &args.sin), args.training, mask, cache)
            },
        )?;
        let n = l
            .post_attention_layernorm
            .forward("post_attention_layernorm", &a)?;
        drop(a);
        let h = residual.add(&n)?;
        drop(n);
        drop(residual);
        let (residual, m) = common::pre_norm_sublayer(
            &h,
            |h| {
                l.pre_feedforward_layernorm
                    .forward("pre_feedforward_layernorm", h)
            },
            "mlp",
            |n| l.mlp.forward(n),
        )?;
        drop(h);
        let n = l
            .post_feedforward_layernorm
            .forward("post_feedforward_layernorm", &m)?;
        drop(m);
        let out = residual.add(&n)?;
        drop(n);
        drop(residual);
        Ok(out)
    }

    fn sliding(&self) -> bool {
        self.sliding
    }
}

/// `Gemma2Model`.
struct Model {
    cfg: Config,
    rt: Runtime,
    /// `Gemma2TextScaledWordEmbedding`'s weight
    embed_tokens: Embedding,
    /// its `embed_scale` buffer (0-dim, weight dtype)
    embed_scale: Tensor,
    layers: Vec<DecoderLayer>,
    norm: Gemma2RmsNorm,
    rotary_emb: RotaryEmbedding,
}

/// Build `Gemma2ForCausalLM` on the CPU in `weights`.
pub(crate) fn build(rt: &Runtime, config: &HfConfig, weights: DType) -> Result<Box<dyn HfModel>> {
    let cfg = Config::parse(config)?;
    let w = weights;
    let embed_tokens = Embedding::new(rt, cfg.vocab, cfg.hidden, w)?;
    // nn.Buffer(torch.tensor(embed_scale)): the default dtype is the weight dtype
    let embed_scale = cpu_buffer(rt, &[], w)?;
    let mut layers = Vec::with_capacity(cfg.layers);
    for i in 0..cfg.layers {
        let h = cfg.hidden;
        let attention = AttentionConfig {
            hidden: h,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: cfg.head_dim,
            qkv_bias: cfg.attention_bias,
            o_bias: cfg.attention_bias,
            scaling: cfg.scaling,
            dropout: cfg.attention_dropout,
            qk_norm_eps: None,
        };
        let self_attn = Attention::new(rt, i, &attention, w)?;
        let mlp = GatedMlp::new(rt, h, cfg.intermediate, false, cfg.act, w)?;
        let norm = || Gemma2RmsNorm::new(rt, h, cfg.eps, w);
        layers.push(DecoderLayer {
            self_attn,
            mlp,
            input_layernorm: norm()?,
            post_attention_layernorm: norm()?,
            pre_feedforward_layernorm: norm()?,
            post_feedforward_layernorm: norm()?,
            sliding: cfg.layer_sliding[i],
        });
    }
    let norm = Gemma2RmsNorm::new(rt, cfg.hidden, cfg.eps, w)?;
    let rotary_emb = RotaryEmbedding::new(rt, cfg.head_dim, cfg.rope)?;
    let (hidden, vocab, tie) = (cfg.hidden, cfg.vocab, cfg.tie);
    let softcap = cfg.final_logit_softcapping;
    let model = Model {
        cfg,
        rt: rt.clone(),
        embed_tokens,
        embed_scale,
        layers,
        norm,
        rotary_emb,
    };
    let lm = CausalLm::new(rt, model, hidden, vocab, tie, w)?;
    Ok(Box::new(lm.with_softcap(softcap)))
}

impl Decoder for Model {
    fn embed_weight(&self) -> &Tensor {
        &self.embed_tokens.weight
    }

    fn cuda(&mut self) -> Result<()> {
        // Module._apply: embed_tokens (weight, then its embed_scale buffer),
        // layers, norm, rotary_emb's buffers
        to_cuda(&mut self.embed_tokens.weight, Category::Parameter)?;
        to_cuda(&mut self.embed_scale, Category::Buffer)?;
        for l in &mut self.layers {
            l.self_attn.cuda()?;
            l.mlp.cuda()?;
            for n in [
                &mut l.input_layernorm,
                &mut l.post_attention_layernorm,
                &mut l.pre_feedforward_layernorm,
                &mut l.post_feedforward_layernorm,
            ] {
                to_cuda(&mut n.weight, Category::Parameter)?;
            }
        }
        to_cuda(&mut self.norm.weight, Category::Parameter)?;
        self.rotary_emb.cuda()
    }

    fn parameters(&self, v: &mut Vec<Tensor>) {
        v.push(self.embed_tokens.weight.clone());
        for l in &self.layers {
            l.self_attn.params(v);
            l.mlp.params(v);
            v.push(l.input_layernorm.weight.clone());
            v.push(l.post_attention_layernorm.weight.clone());
            v.push(l.pre_feedforward_layernorm.weight.clone());
            v.push(l.post_feedforward_layernorm.weight.clone());
        }
        v.push(self.norm.weight.clone());
    }

    /// `Gemma2Model.forward`.
    fn forward(
        &self,
        ids: &Tensor,
        flags: &Flags,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)> {
        let rt = self.rt.clone();
        let cfg = &self.cfg;
        let inputs_embeds = self.embed(ids)?;
        let cache = flags.new_cache(cfg.use_cache, &cfg.cache_layers());
        let position_ids = common::position_ids(&rt, inputs_embeds.size(1), 0)?;
        // causal_mask_mapping = {"full_attention": create_causal_mask(**mask_kwargs),
        //                        "sliding_attention": create_sliding_window_causal_mask(**mask_kwargs)}
        let window = cfg.sliding_window.unwrap_or(i64::MAX);
        let masks = Masks::new(
            &inputs_embeds,
            &position_ids,
            cache.as_ref(),
            None,
            true,
            Some(window),
        )?;
        let cos_sin = self
            .rotary_emb
            .forward("rotary_emb", &inputs_embeds, &position_ids)?;
        let args = LayerArgs::new(cos_sin, &position_ids, flags.training);
        let (out, position_embeddings) = common::decoder_stack(
            &self.layers,
            &inputs_embeds,
            args,
            &masks,
            flags,
            cache.as_ref(),
            |h| self.norm.forward("norm", h),
        )?;
        // locals die in co_varnames order: position_ids and inputs_embeds are
        // also held by `mask_kwargs`, so they go with it, after
        // `causal_mask_mapping`; then the position embeddings
        drop(masks);
        drop(inputs_embeds);
        drop(position_ids);
        drop(position_embeddings);
        Ok((out, cache))
    }
}

impl Model {
    /// `Gemma2TextScaledWordEmbedding.forward`:
    /// `super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)`.
    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let rt = self.rt.clone();
        rt.in_module("embed_tokens", || {
            let e = Tensor::embedding(&self.embed_tokens.weight, ids)?;
            let scale = self
                .embed_scale
                .to_dtype(self.embed_tokens.weight.dtype())?;
            let out = e.mul(&scale)?;
            drop(scale);
            drop(e);
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::common::tests::alloc_sizes;
    use crate::families::Inputs;
    use crate::workload::Task;
    use vramscope_engine::Device;

    /// The device bytes of `embed_scale` for weights in `dtype` (what
    /// `torch.tensor(float)` gives under `torch.set_default_dtype(dtype)`).
    fn embed_scale_bytes(dtype: DType) -> u64 {
        let rt = Runtime::default();
        let config = HfConfig::parse(
            r#"{"model_type":"gemma2","vocab_size":10,"hidden_size":8,"intermediate_size":8,
                "num_hidden_layers":1,"num_attention_heads":1,"num_key_value_heads":1,"head_dim":8}"#,
        )
        .unwrap();
        let mut m = crate::families::build(&rt, &config, Task::Causal, dtype).unwrap();
        let a = alloc_sizes(&rt, || m.cuda().unwrap());
        // embed_tokens.weight, then its embed_scale buffer
        assert_eq!(a[0], 10 * 8 * dtype.size());
        a[1]
    }

    fn cfg(json: &str) -> Result<Config> {
        Config::parse(&HfConfig::parse(json).unwrap())
    }

    #[test]
    fn class_defaults_fill_absent_fields() {
        let c = cfg(r#"{"model_type":"gemma2"}"#).unwrap();
        assert_eq!(
            (
                c.vocab,
                c.hidden,
                c.intermediate,
                c.layers,
                c.heads,
                c.kv_heads,
                c.head_dim
            ),
            (256000, 2304, 9216, 26, 8, 4, 256)
        );
        assert_eq!(
            (c.act, c.tie, c.sliding_window),
            (Act::GeluTanh, true, Some(4096))
        );
        assert_eq!(c.final_logit_softcapping, Some(30.0));
        assert_eq!(c.scaling, 1.0 / 16.0);
        // layer_types: sliding, full, sliding, ...
        assert_eq!(&c.layer_sliding[..4], &[true, false, true, false]);
        assert_eq!(&c.cache_layers()[..2], &[Some(4096), None]);
        let c = cfg(r#"{"model_type":"gemma2","num_hidden_layers":2,"final_logit_softcapping":null,
                        "layer_types":["full_attention","full_attention"],"query_pre_attn_scalar":64}"#)
        .unwrap();
        assert_eq!(
            (c.final_logit_softcapping, c.layer_sliding.clone()),
            (None, vec![false, false])
        );
        assert_eq!(c.scaling, 0.125);
    }

    #[test]
    fn the_gemma_2_9b_preset_is_accepted() {
        let c = Config::parse(&crate::presets::get("gemma-2-9b").unwrap()).unwrap();
        assert_eq!(
            (c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim),
            (3584, 42, 16, 8, 256)
        );
        assert_eq!(
            (c.sliding_window, c.tie, c.act),
            (Some(4096), true, Act::GeluTanh)
        );
    }

    #[test]
    fn unmodelled_fields_are_refused() {
        for bad in [
            r#"{"model_type":"gemma2","hidden_activation":"gelu_new"}"#,
            r#"{"model_type":"gemma2","num_attention_heads":8,"num_key_value_heads":3}"#,
            r#"{"model_type":"gemma2","use_bidirectional_attention":true}"#,
            r#"{"model_type":"gemma2","sliding_window":null}"#,
            r#"{"model_type":"gemma2","num_hidden_layers":2,"layer_types":["full_attention"]}"#,
            r#"{"model_type":"gemma2","layer_types":["chunked_attention"],"num_hidden_layers":1}"#,
            r#"{"model_type":"gemma2","rope_parameters":{"rope_type":"dynamic","factor":2.0}}"#,
            r#"{"model_type":"gemma2","quantization_config":{"bits":4}}"#,
            r#"{"model_type":"gemma2","query_pre_attn_scalar":0}"#,
        ] {
            assert!(cfg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn embed_scale_is_a_scalar_in_the_weight_dtype() {
        // the H100 trace of gemma2_train_bf16: a 2-byte allocation after the embedding
        assert_eq!(embed_scale_bytes(DType::BF16), 2);
        assert_eq!(embed_scale_bytes(DType::F32), 4);
    }

    #[test]
    fn gemma_rmsnorm_runs_in_fp32_with_one_plus_weight() {
        // gemma2_train_bf16 layer 0 input_layernorm: float (2 MiB), pow, mean
        // (4096), + eps, rsqrt, mul, weight.float() (2048), 1 + (2048), mul,
        // type_as (1 MiB)
        let rt = Runtime::default();
        let mut n = Gemma2RmsNorm::new(&rt, 512, 1e-6, DType::BF16).unwrap();
        to_cuda(&mut n.weight, Category::Parameter).unwrap();
        let x = rt.empty(&[2, 512, 512], DType::BF16, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let mut y = None;
        let a = alloc_sizes(&rt, || y = Some(n.forward("input_layernorm", &x).unwrap()));
        let (f32full, rows) = (2 * 512 * 512 * 4, 2 * 512 * 4);
        assert_eq!(
            a,
            vec![
                f32full,
                f32full,
                rows,
                rows,
                rows,
                f32full,
                2048,
                2048,
                f32full,
                f32full / 2
            ]
        );
        // saved for backward: the fp32 input, rsqrt, the normalised states,
        // 1 + weight; then the output. pow, mean, + eps, weight.float() and
        // the fp32 product are gone.
        let base = 1024 + 2 * 512 * 512 * 2;
        let live = rt.memory_allocated() as u64 - base;
        assert_eq!(live, f32full + rows + f32full + 2048 + f32full / 2);
        drop(y);
        // under no_grad only the output stays
        let before = rt.memory_allocated();
        let y = rt.no_grad(|| n.forward("norm", &x).unwrap());
        assert_eq!(rt.memory_allocated() - before, (f32full / 2) as i64);
        drop(y);
    }

    #[test]
    fn final_softcapping_divides_tanhs_and_multiplies_the_logits() {
        let rt = Runtime::default();
        let config = HfConfig::parse(
            r#"{"model_type":"gemma2","vocab_size":1000,"hidden_size":64,"intermediate_size":128,
                "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":32,
                "sliding_window":16,"query_pre_attn_scalar":32}"#,
        )
        .unwrap();
        let mut m = crate::families::build(&rt, &config, Task::Causal, DType::F32).unwrap();
        m.cuda().unwrap();
        m.set_training(false);
        let ids = rt.empty(&[2, 32], DType::I64, Device::Cuda).unwrap();
        let inputs = Inputs {
            input_ids: Some(ids),
            ..Inputs::default()
        };
        let logits_bytes = 2 * 32 * 1000 * 4;
        let a = alloc_sizes(&rt, || {
            let out = rt.no_grad(|| m.forward(&inputs)).unwrap();
            assert_eq!(out.logits.as_ref().unwrap().sizes(), &[2, 32, 1000]);
            // keys and values of both layers and the sliding layer's window tensor
            assert_eq!(out.retained.len(), 5);
        });
        // lm_head, / cap, tanh, * cap: four logits-sized allocations at the end
        let n = a.len();
        assert_eq!(&a[n - 4..], &[logits_bytes; 4]);
    }
}
