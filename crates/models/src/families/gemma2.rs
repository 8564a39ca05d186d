//! `modeling_gemma2.py` (transformers 5.17): `Gemma2ForCausalLM`, and
//! `modeling_gemma3.py`'s `Gemma3ForCausalLM` (`gemma3_text`), which differs
//! from it only in:
//!
//! - `q_norm`/`k_norm` (`Gemma3RMSNorm` over `head_dim`, the Gemma-2 norm)
//!   applied after all three projections are viewed and transposed;
//! - one rotary embedding per layer type (`sorted(set(layer_types))`: each
//!   type's `inv_freq` and `original_inv_freq` buffers), and the forward's
//!   `position_embeddings` dict holding each type's `(cos, sin)` until it
//!   returns;
//! - class defaults: vocabulary 262,208, no `final_logit_softcapping`,
//!   `layer_types` from `sliding_window_pattern` (6: every sixth layer full).
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
    Embedding, Flags, GatedMlp, GenStep, Layer, LayerArgs, Masks, RopeType, RotaryEmbedding,
};
use crate::families::HfModel;

// ---- config --------------------------------------------------------------------------

/// Which modeling file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Gemma2,
    /// `gemma3_text`
    Gemma3,
}

/// `Gemma2Config` / `Gemma3TextConfig`, normalised with its class defaults
/// (`configuration_gemma2.py`, `configuration_gemma3.py`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
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
        let family = match c.model_type.as_str() {
            "gemma2" => Family::Gemma2,
            "gemma3_text" => Family::Gemma3,
            other => return Err(ModelError::UnsupportedModel(other.into())),
        };
        // class defaults of Gemma2Config and Gemma3TextConfig (5.17): the
        // same but for the vocabulary, the logit softcapping and the pattern
        let vocab = c.size(
            "vocab_size",
            if family == Family::Gemma3 {
                262_208
            } else {
                256_000
            },
        )?;
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
        let rope = match family {
            Family::Gemma2 => common::rope_type(c)?,
            Family::Gemma3 => gemma3_rope(c)?,
        };
        if rope != RopeType::Default {
            // the non-default init functions read partial_rotary_factor
            let prf = c
                .get("rope_parameters")
                .and_then(|v| v.get("partial_rotary_factor"))
                .and_then(|v| v.as_f64())
                .or(c.opt_float("partial_rotary_factor")?);
            if prf.is_some_and(|f| f != 1.0) {
                return Err(ModelError::Unsupported(
                    "partial_rotary_factor with a non-default RoPE in gemma2/gemma3_text".into(),
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
        // __post_init__: "sliding_attention" if bool((i + 1) % pattern), with
        // pattern 2 in Gemma2Config and `sliding_window_pattern` (default 6)
        // in Gemma3TextConfig
        let pattern = match family {
            Family::Gemma2 => 2,
            Family::Gemma3 => c.size("sliding_window_pattern", 6)?,
        };
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
            None => (0..layers).map(|i| (i as i64 + 1) % pattern != 0).collect(),
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
        // `final_logit_softcapping: float | None = 30.0` (Gemma3: `= None`):
        // absent means the default, null means none
        let final_logit_softcapping = if c.raw().contains_key("final_logit_softcapping") {
            c.opt_float("final_logit_softcapping")?
        } else {
            (family == Family::Gemma2).then_some(30.0)
        };
        if let Some(cap) = final_logit_softcapping {
            if cap == 0.0 {
                return Err(bad("final_logit_softcapping", "must not be 0"));
            }
        }
        // `attn_logit_softcapping` only reaches the eager attention: validated, no memory
        c.opt_float("attn_logit_softcapping")?;
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

    /// Gemma-3's rotary embeddings, one per layer type in
    /// `sorted(set(layer_types))` order: (`"full_attention"` present,
    /// `"sliding_attention"` present); Gemma-2 has one for all layers.
    fn rotary_types(&self) -> (bool, bool) {
        let sliding = self.layer_sliding.iter().any(|&s| s);
        let full = self.layer_sliding.iter().any(|&s| !s);
        (full, sliding)
    }
}

/// Gemma-3's RoPE: `rope_parameters` per layer type (or the legacy
/// `rope_scaling`, which `convert_rope_params_to_dict` applies to
/// `"full_attention"`); every type's must be one whose memory is the
/// default's. The memory is the same for all of them.
fn gemma3_rope(c: &HfConfig) -> Result<RopeType> {
    let kind = |v: Option<&serde_json::Value>, field: &str| -> Result<RopeType> {
        let t = v
            .and_then(|v| v.get("rope_type").or_else(|| v.get("type")))
            .and_then(|t| t.as_str());
        match t {
            None | Some("default") => Ok(RopeType::Default),
            Some("linear") => Ok(RopeType::Linear),
            Some("llama3") => Ok(RopeType::Llama3),
            Some("yarn") => Ok(RopeType::Yarn),
            Some(other) => Err(ModelError::Unsupported(format!(
                "config field `{field}` rope_type `{other}` (only default, linear, llama3 and \
                 yarn RoPE are modelled: dynamic and longrope recompute inv_freq during the forward)"
            ))),
        }
    };
    let params = c.get("rope_parameters");
    let full = kind(
        params.and_then(|p| p.get("full_attention")),
        "rope_parameters.full_attention",
    )?;
    let sliding = kind(
        params.and_then(|p| p.get("sliding_attention")),
        "rope_parameters.sliding_attention",
    )?;
    let legacy = kind(c.get("rope_scaling"), "rope_scaling")?;
    Ok([full, sliding, legacy]
        .into_iter()
        .find(|&k| k != RopeType::Default)
        .unwrap_or(RopeType::Default))
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
    /// Gemma-3's `self_attn.q_norm` and `self_attn.k_norm`
    qk_norm: Option<(Gemma2RmsNorm, Gemma2RmsNorm)>,
    /// `Gemma2MLP`
    mlp: GatedMlp,
    input_layernorm: Gemma2RmsNorm,
    post_attention_layernorm: Gemma2RmsNorm,
    pre_feedforward_layernorm: Gemma2RmsNorm,
    post_feedforward_layernorm: Gemma2RmsNorm,
    sliding: bool,
}

impl DecoderLayer {
    /// Its parameters, in registration order (Gemma-3's `q_norm` and
    /// `k_norm` after the attention's projections).
    fn params(&self, v: &mut Vec<Tensor>) {
        self.self_attn.params(v);
        if let Some((q, k)) = &self.qk_norm {
            v.push(q.weight.clone());
            v.push(k.weight.clone());
        }
        self.mlp.params(v);
        v.push(self.input_layernorm.weight.clone());
        v.push(self.post_attention_layernorm.weight.clone());
        v.push(self.pre_feedforward_layernorm.weight.clone());
        v.push(self.post_feedforward_layernorm.weight.clone());
    }
}

impl Layer for DecoderLayer {
    /// `Gemma2DecoderLayer.forward` (and `Gemma3DecoderLayer`'s).
    fn forward(
        &self,
        x: &Tensor,
        args: &LayerArgs,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<DynamicCache>>,
    ) -> Result<Tensor> {
        let l = self;
        let cos_sin = args.cos_sin(l.sliding);
        let (residual, a) = common::pre_norm_sublayer(
            x,
            |x| l.input_layernorm.forward("input_layernorm", x),
            "self_attn",
            |h| match &l.qk_norm {
                None => l.self_attn.forward(h, cos_sin, args.training, mask, cache),
                Some(norms) => l.gemma3_attention(h, norms, cos_sin, args.training, mask, cache),
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

impl DecoderLayer {
    /// `Gemma3Attention.forward`: the three projections viewed and
    /// transposed ([`common::Attention::project`]), then `q_norm` and
    /// `k_norm` (the raw states die at the rebinding unless a norm saved
    /// them), then RoPE, attention and `o_proj` as every family's
    /// ([`common::Attention::rotate_attend`]).
    fn gemma3_attention(
        &self,
        x: &Tensor,
        (q_norm, k_norm): &(Gemma2RmsNorm, Gemma2RmsNorm),
        (cos, sin): (&Tensor, &Tensor),
        training: bool,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<DynamicCache>>,
    ) -> Result<Tensor> {
        let a = &self.self_attn;
        let mut query_states = a.project(x, &a.q_proj, "q_proj", None)?;
        let mut key_states = a.project(x, &a.k_proj, "k_proj", None)?;
        let value_states = a.project(x, &a.v_proj, "v_proj", None)?;
        query_states = q_norm.forward("q_norm", &query_states)?;
        key_states = k_norm.forward("k_norm", &key_states)?;
        a.rotate_attend(
            (query_states, key_states, value_states),
            (cos, sin),
            training,
            mask,
            cache,
        )
    }
}

/// `Gemma2Model` (and `Gemma3TextModel`).
struct Model {
    cfg: Config,
    rt: Runtime,
    /// `Gemma2TextScaledWordEmbedding`'s weight
    embed_tokens: Embedding,
    /// its `embed_scale` buffer (0-dim, weight dtype)
    embed_scale: Tensor,
    layers: Vec<DecoderLayer>,
    norm: Gemma2RmsNorm,
    /// the one rotary embedding (Gemma-3: the first layer type's)
    rotary_emb: RotaryEmbedding,
    /// Gemma-3's `"sliding_attention"` rotary embedding where there are
    /// both layer types
    rotary_local: Option<RotaryEmbedding>,
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
        // Gemma3Attention registers q_norm and k_norm after o_proj
        let qk_norm = match cfg.family {
            Family::Gemma2 => None,
            Family::Gemma3 => Some((
                Gemma2RmsNorm::new(rt, cfg.head_dim, cfg.eps, w)?,
                Gemma2RmsNorm::new(rt, cfg.head_dim, cfg.eps, w)?,
            )),
        };
        let mlp = GatedMlp::new(rt, h, cfg.intermediate, false, cfg.act, w)?;
        let norm = || Gemma2RmsNorm::new(rt, h, cfg.eps, w);
        layers.push(DecoderLayer {
            self_attn,
            qk_norm,
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
    let rotary_local = match (cfg.family, cfg.rotary_types()) {
        (Family::Gemma3, (true, true)) => Some(RotaryEmbedding::new(rt, cfg.head_dim, cfg.rope)?),
        _ => None,
    };
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
        rotary_local,
    };
    // `pad_token_id = 0`, `eos_token_id = 1`, `bos_token_id = 2` (both config classes)
    let tokens = crate::families::generate::Tokens::of_config(
        config,
        crate::families::generate::Tokens {
            bos: true,
            eos: Some(1),
            pad: true,
        },
    )?;
    let lm = CausalLm::new(rt, model, hidden, vocab, tie, w)?;
    Ok(Box::new(lm.with_softcap(softcap).with_tokens(tokens)))
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
            if let Some((q, k)) = &mut l.qk_norm {
                to_cuda(&mut q.weight, Category::Parameter)?;
                to_cuda(&mut k.weight, Category::Parameter)?;
            }
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
        self.rotary_emb.cuda()?;
        match &mut self.rotary_local {
            Some(r) => r.cuda(),
            None => Ok(()),
        }
    }

    fn parameters(&self, v: &mut Vec<Tensor>) {
        v.push(self.embed_tokens.weight.clone());
        for l in &self.layers {
            l.params(v);
        }
        v.push(self.norm.weight.clone());
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        // `embed_tokens.embed_scale`, then each rotary embedding's
        // `inv_freq` and `original_inv_freq` (registration order)
        let mut v = vec![self.embed_scale.clone()];
        for r in std::iter::once(&self.rotary_emb).chain(&self.rotary_local) {
            v.push(r.inv_freq.clone());
            v.push(r.original_inv_freq.clone());
        }
        Some(v)
    }

    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        common::per_layer(&self.layers, DecoderLayer::params)
    }

    /// `Gemma2Model.forward` (and `Gemma3TextModel.forward`).
    fn forward(
        &self,
        ids: &Tensor,
        flags: &Flags,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)> {
        self.run(ids, flags, None)
    }

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
}

impl Model {
    /// The forward, with `generate()`'s inputs when `step` is given (its
    /// position ids, 2-D mask and cache: no cache is created and none is
    /// returned).
    fn run(
        &self,
        ids: &Tensor,
        flags: &Flags,
        step: Option<&GenStep>,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)> {
        let rt = self.rt.clone();
        let cfg = &self.cfg;
        let inputs_embeds = self.embed(ids)?;
        let cache = match step {
            None => flags.new_cache(cfg.use_cache, &cfg.cache_layers()),
            Some(_) => None,
        };
        let cache_ref = step.map(|g| g.cache).or(cache.as_ref());
        let position_ids = match step {
            Some(g) => g.position_ids.clone(),
            None => common::position_ids(&rt, inputs_embeds.size(1), 0)?,
        };
        // causal_mask_mapping = {"full_attention": create_causal_mask(**mask_kwargs),
        //                        "sliding_attention": create_sliding_window_causal_mask(**mask_kwargs)}
        // (or generate's prepared dict of a static cache, as it is)
        let window = cfg.sliding_window.unwrap_or(i64::MAX);
        let masks = Masks::new(
            &inputs_embeds,
            &position_ids,
            cache_ref,
            step,
            true,
            Some(window),
        )?;
        // Gemma3: `for layer_type in set(self.config.layer_types)`: a pair per
        // type (the set's order varies by process; both pairs are alike)
        let cos_sin = self
            .rotary_emb
            .forward("rotary_emb", &inputs_embeds, &position_ids)?;
        let local = match &self.rotary_local {
            Some(r) => Some(r.forward("rotary_emb", &inputs_embeds, &position_ids)?),
            None => None,
        };
        // `position_ids=` after `position_embeddings=` (modeling_gemma2/3)
        let args = LayerArgs::new(cos_sin, &position_ids, false, flags.training)
            .with_local(local)
            .with_decode(step);
        let (out, position_embeddings) = common::decoder_stack(
            &self.layers,
            &inputs_embeds,
            args,
            &masks,
            flags,
            cache_ref,
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
    fn gemma3_text_defaults_and_its_layer_pattern() {
        let c = cfg(r#"{"model_type":"gemma3_text","num_hidden_layers":12}"#).unwrap();
        assert_eq!(
            (c.family, c.vocab, c.head_dim),
            (Family::Gemma3, 262_208, 256)
        );
        assert_eq!(c.final_logit_softcapping, None);
        // sliding_window_pattern 6: layers 5 and 11 full
        let full: Vec<usize> = (0..12).filter(|&i| !c.layer_sliding[i]).collect();
        assert_eq!(full, vec![5, 11]);
        assert_eq!(c.rotary_types(), (true, true));
        let c =
            cfg(r#"{"model_type":"gemma3_text","num_hidden_layers":4,"sliding_window_pattern":2}"#)
                .unwrap();
        assert_eq!(c.layer_sliding, vec![true, false, true, false]);
        // fewer layers than the pattern: all sliding, one rotary embedding
        let c = cfg(r#"{"model_type":"gemma3_text","num_hidden_layers":3}"#).unwrap();
        assert_eq!(c.rotary_types(), (false, true));
        assert!(cfg(r#"{"model_type":"gemma3_text","rope_parameters":{"full_attention":{"rope_type":"dynamic"}}}"#).is_err());
        let c = Config::parse(&crate::presets::get("gemma-3-12b").unwrap()).unwrap();
        assert_eq!(
            (c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.rope),
            (3840, 48, 16, 8, 256, RopeType::Linear)
        );
        assert_eq!(c.sliding_window, Some(1024));
    }

    #[test]
    fn gemma3_moves_its_qk_norms_and_both_rotary_embeddings() {
        let rt = Runtime::default();
        let config = HfConfig::parse(
            r#"{"model_type":"gemma3_text","vocab_size":10,"hidden_size":8,"intermediate_size":8,
                "num_hidden_layers":2,"num_attention_heads":1,"num_key_value_heads":1,"head_dim":8,
                "sliding_window_pattern":2}"#,
        )
        .unwrap();
        let mut m = crate::families::build(&rt, &config, Task::Causal, DType::F32).unwrap();
        let a = alloc_sizes(&rt, || m.cuda().unwrap());
        // embed, embed_scale, 2 x (q, k, v, o, q_norm, k_norm, gate, up, down, 4 norms),
        // norm, then two rotary embeddings' two buffers
        assert_eq!(a.len(), 2 + 2 * 13 + 1 + 4);
        assert_eq!(&a[6..8], &[32, 32]);
        assert_eq!(&a[a.len() - 4..], &[16; 4]);
        assert_eq!(m.parameters().len(), 1 + 2 * 13 + 1);
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
