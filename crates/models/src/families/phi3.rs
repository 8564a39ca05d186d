//! `modeling_phi3.py` (transformers 5.17): `Phi3ForCausalLM`.
//!
//! What differs from Llama, each taken from `modeling_phi3.py` /
//! `configuration_phi3.py`:
//!
//! - attention: one fused `qkv_proj` (registered after `o_proj`), sliced
//!   into query/key/value views (`qkv[..., :query_pos]`, ...: three
//!   `SliceBackward0`, each of which allocates a zeroed gradient of the
//!   whole `qkv` in backward);
//! - rotary: `partial_rotary_factor` (`inv_freq` of `int(head_dim * f) / 2`
//!   elements) and an `apply_rotary_pos_emb` that rotates `q[..., :rot]`
//!   and concatenates the untouched `q[..., rot:]` back (a `cat` even when
//!   that part is empty); `rope_type` is `default` or `longrope` (`su` and
//!   `yarn` mean `longrope`), whose `dynamic_rope_update` reads
//!   `torch.max(position_ids)` and re-registers `inv_freq` in every forward
//!   (recomputed on the device past `original_max_position_embeddings`:
//!   `CausalLm::longrope_frequency_update`);
//! - MLP: one fused `gate_up_proj`, `chunk(2, dim=-1)` (views, one
//!   `SplitBackward0` that `cat`s the two gradients back), `up * act(gate)`;
//! - `resid_attn_dropout` / `resid_mlp_dropout` (`resid_pdrop`) on each
//!   branch before the residual add; `embd_pdrop` is a config field that
//!   5.17's `Phi3Model` never uses (no embedding dropout);
//! - the mask and the cache layers follow `sliding_window` (class default
//!   `None`): a sliding-window mask and `DynamicSlidingWindowLayer`s for
//!   every layer when it is set.
//!
//! The shared pieces (RMSNorm, rotary, masks, cache, SDPA, loss) are in
//! [`super::common`].

use std::cell::RefCell;

use vramscope_engine::{Category, DType, Runtime, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::common::{
    self, bad, check_kv_heads, check_padding_idx, check_sliding_window, head_dim_of, rotate_half,
    to_cuda, Act, CausalLm, Decoder, DynamicCache, Embedding, Flags, Layer, LayerArgs, Linear,
    Masks, RmsNorm, RopeType, RotaryEmbedding, Sdpa,
};
use crate::families::HfModel;

/// Python's `x[..., start:stop]` on the last dim: a view; the whole range
/// gives `self` back from `applySlice`, which `THPVariable_getitem` turns
/// into `alias(self)` (an `AliasBackward0`, not a `SliceBackward0`).
pub(crate) fn py_slice_last(x: &Tensor, start: Option<i64>, stop: Option<i64>) -> Tensor {
    let len = x.size(-1);
    let wrap = |i: i64| (if i < 0 { i + len } else { i }).clamp(0, len);
    let s = start.map_or(0, wrap);
    let e = stop.map_or(len, wrap);
    if s == 0 && e == len {
        x.alias()
    } else {
        x.slice(-1, start, stop)
    }
}

// ---- config --------------------------------------------------------------------------

/// The RoPE of a Phi3 config: `Phi3Config.convert_rope_params_to_dict` and
/// `validate_rope` (`rope_scaling or rope_parameters`; `su`/`yarn` become
/// `longrope`; only `default` and `longrope` are valid).
#[derive(Debug, Clone, PartialEq)]
struct Rope {
    /// `partial_rotary_factor` (`rope_parameters`' value first, then the
    /// top-level field, default 1.0)
    partial_rotary_factor: f64,
    /// `longrope`: what its frequency update needs
    longrope: Option<LongRope>,
}

/// The fields of a `longrope` RoPE that shape its forward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LongRope {
    /// `original_max_position_embeddings` (for Phi3 the top-level field
    /// wins: `standardize_rope_params`), class default 4096
    original_max: i64,
    /// `rope_theta` (`base ** inv_freq_shape`; changes no memory)
    base: f64,
    /// `len(short_factor)`, `len(long_factor)`
    factor_lens: (usize, usize),
}

fn parse_rope(c: &HfConfig) -> Result<Rope> {
    let obj = |key: &str| -> Result<Option<&serde_json::Map<String, serde_json::Value>>> {
        match c.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_object()
                .map(Some)
                .ok_or_else(|| bad(key, format!("expected an object, found {v}"))),
        }
    };
    // `self.rope_parameters = rope_scaling or self.rope_parameters`
    let (key, params) = match obj("rope_scaling")? {
        Some(m) if !m.is_empty() => ("rope_scaling", Some(m)),
        _ => ("rope_parameters", obj("rope_parameters")?),
    };
    let field = |name: &str| params.and_then(|m| m.get(name)).filter(|v| !v.is_null());
    let number = |name: &str| -> Result<Option<f64>> {
        match field(name) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                bad(
                    &format!("{key}.{name}"),
                    format!("expected a number, found {v}"),
                )
            }),
        }
    };
    let rope_type = match field("rope_type").or_else(|| field("type")) {
        None => "default".to_string(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(bad(
                &format!("{key}.rope_type"),
                format!("expected a string, found {v}"),
            ))
        }
    };
    let longrope = match rope_type.as_str() {
        "default" => None,
        // convert_rope_params_to_dict: "su" and "yarn" are read as longrope
        "longrope" | "su" | "yarn" => {
            // _compute_longrope_parameters indexes both lists (a KeyError without them)
            let list_len = |name: &str| -> Result<usize> {
                match field(name) {
                    Some(serde_json::Value::Array(a)) if a.iter().all(|x| x.is_number()) => {
                        Ok(a.len())
                    }
                    Some(v) => Err(bad(
                        &format!("{key}.{name}"),
                        format!("expected a list of numbers, found {v}"),
                    )),
                    None => Err(bad(
                        &format!("{key}.{name}"),
                        format!("missing (rope_type `{rope_type}` reads it)"),
                    )),
                }
            };
            let factor_lens = (list_len("short_factor")?, list_len("long_factor")?);
            let original_max = c.size("original_max_position_embeddings", 4096)?;
            let base = match number("rope_theta")? {
                Some(b) => b,
                None => c.float("rope_theta", 10000.0)?,
            };
            Some(LongRope {
                original_max,
                base,
                factor_lens,
            })
        }
        other => {
            return Err(ModelError::Unsupported(format!(
                "config field `{key}`: rope_type `{other}` (Phi3Config.validate_rope accepts only \
                 default and longrope)"
            )))
        }
    };
    let partial_rotary_factor = match number("partial_rotary_factor")? {
        Some(f) => f,
        None => c.float("partial_rotary_factor", 1.0)?,
    };
    if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
        return Err(bad(
            "partial_rotary_factor",
            format!("must be in (0, 1], found {partial_rotary_factor}"),
        ));
    }
    Ok(Rope {
        partial_rotary_factor,
        longrope,
    })
}

/// `Phi3Config`, normalised with its class defaults (`configuration_phi3.py`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    vocab: i64,
    hidden: i64,
    intermediate: i64,
    layers: usize,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    /// `int(head_dim * partial_rotary_factor)`: the rotary module's `dim`
    rotary_dim: i64,
    /// `rope_type` `longrope` (else the default RoPE)
    longrope: Option<LongRope>,
    eps: f64,
    tie: bool,
    act: Act,
    resid_pdrop: f64,
    attention_dropout: f64,
    sliding_window: Option<i64>,
    use_cache: bool,
}

impl Config {
    pub(crate) fn parse(c: &HfConfig) -> Result<Self> {
        if c.model_type != "phi3" {
            return Err(ModelError::UnsupportedModel(c.model_type.clone()));
        }
        // class defaults of Phi3Config (5.17)
        let vocab = c.size("vocab_size", 32064)?;
        // `pad_token_id: int | None = 32000`
        check_padding_idx(c, Some(32000), vocab)?;
        let hidden = c.size("hidden_size", 3072)?;
        let intermediate = c.size("intermediate_size", 8192)?;
        let layers = c.size("num_hidden_layers", 32)? as usize;
        let heads = c.size("num_attention_heads", 32)?;
        // __post_init__: `num_key_value_heads = num_attention_heads` when None
        let kv_heads = c.size("num_key_value_heads", heads)?;
        check_kv_heads(heads, kv_heads)?;
        // Phi3Attention: getattr(config, "head_dim", hidden_size // num_attention_heads)
        let head_dim = match c.opt_int("head_dim")? {
            Some(v) if v > 0 => v,
            Some(v) => return Err(bad("head_dim", format!("must be positive, found {v}"))),
            None => head_dim_of(hidden, heads)?,
        };
        let rope = parse_rope(c)?;
        // compute_default_rope_parameters: dim = int(head_dim * partial_rotary_factor)
        let rotary_dim = (head_dim as f64 * rope.partial_rotary_factor) as i64;
        if rotary_dim < 1 {
            return Err(bad(
                "partial_rotary_factor",
                format!("leaves no rotary dimension of head_dim {head_dim}"),
            ));
        }
        if let Some(lr) = &rope.longrope {
            // validate_rope: both factor lists have int(hidden // heads * factor) // 2 entries,
            // which must match inv_freq (ceil(rotary_dim / 2)) for ext_factors * base**shape
            let want = ((hidden / heads) as f64 * rope.partial_rotary_factor) as usize / 2;
            let n = ((rotary_dim + 1) / 2) as usize;
            for (name, len) in [
                ("short_factor", lr.factor_lens.0),
                ("long_factor", lr.factor_lens.1),
            ] {
                if len != want || len != n {
                    return Err(bad(
                        &format!("rope_scaling.{name}"),
                        format!("has {len} entries, the rotary dimension needs {want}"),
                    ));
                }
            }
        }
        let act = Act::parse_gated("hidden_act", c.string("hidden_act")?.unwrap_or("silu"))?;
        c.reject_present("quantization_config", "quantized weights are not modelled")?;
        let prob = |key: &str| -> Result<f64> {
            let p = c.float(key, 0.0)?;
            if !(0.0..1.0).contains(&p) {
                return Err(bad(key, format!("must be in [0, 1), found {p}")));
            }
            Ok(p)
        };
        // `embd_pdrop` is validated but changes nothing: Phi3Model has no embedding dropout
        prob("embd_pdrop")?;
        let sliding_window = c.opt_int("sliding_window")?;
        check_sliding_window(sliding_window)?;
        Ok(Config {
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            rotary_dim,
            longrope: rope.longrope,
            eps: c.float("rms_norm_eps", 1e-5)?,
            tie: c.boolean("tie_word_embeddings", false)?,
            act,
            resid_pdrop: prob("resid_pdrop")?,
            attention_dropout: prob("attention_dropout")?,
            sliding_window,
            use_cache: c.boolean("use_cache", true)?,
        })
    }
}

// ---- modules --------------------------------------------------------------------------

/// `Phi3Attention`.
#[derive(Clone)]
struct Attention {
    o_proj: Linear,
    qkv_proj: Linear,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    sdpa: Sdpa,
}

/// `Phi3MLP`.
#[derive(Clone)]
struct Mlp {
    gate_up_proj: Linear,
    down_proj: Linear,
    act: Act,
}

/// `Phi3DecoderLayer` (a `GradientCheckpointingLayer`).
#[derive(Clone)]
struct DecoderLayer {
    self_attn: Attention,
    mlp: Mlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    resid_pdrop: f64,
    /// every layer is sliding when the config sets `sliding_window`
    sliding: bool,
}

impl DecoderLayer {
    /// Its parameters, in registration order (`o_proj` first).
    fn params(&self, v: &mut Vec<Tensor>) {
        self.self_attn.o_proj.params(v);
        self.self_attn.qkv_proj.params(v);
        self.mlp.gate_up_proj.params(v);
        self.mlp.down_proj.params(v);
        v.push(self.input_layernorm.weight.clone());
        v.push(self.post_attention_layernorm.weight.clone());
    }
}

/// Phi3's `apply_rotary_pos_emb(q, k, cos, sin)`:
///
/// ```python
/// cos = cos.unsqueeze(1); sin = sin.unsqueeze(1)
/// rotary_dim = cos.shape[-1]
/// q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
/// k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
/// q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
/// k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
/// ```
///
/// Per line: `q_rot*cos`, `rotate_half` (dies after `* sin`), the sum (the
/// two products die, left first), the `cat` (the list, and with it the
/// sum, dies after the call).
fn apply_rotary_pos_emb(
    q: &Tensor,
    k: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let cos = cos.unsqueeze(1)?;
    let sin = sin.unsqueeze(1)?;
    let rotary_dim = cos.size(-1);
    let q_rot = py_slice_last(q, None, Some(rotary_dim));
    let q_pass = py_slice_last(q, Some(rotary_dim), None);
    let k_rot = py_slice_last(k, None, Some(rotary_dim));
    let k_pass = py_slice_last(k, Some(rotary_dim), None);
    let embed = |x_rot: &Tensor, x_pass: &Tensor| -> Result<Tensor> {
        let a = x_rot.mul(&cos)?;
        let b = {
            let r = rotate_half(x_rot)?;
            r.mul(&sin)?
        };
        let s = a.add(&b)?;
        drop(a);
        drop(b);
        let out = Tensor::cat(&[&s, x_pass], -1)?;
        drop(s);
        Ok(out)
    };
    let q_embed = embed(&q_rot, &q_pass)?;
    let k_embed = embed(&k_rot, &k_pass)?;
    Ok((q_embed, k_embed))
}

/// `Phi3Attention.forward`.
fn attention_forward(
    a: &Attention,
    x: &Tensor,
    args: &LayerArgs,
    mask: Option<&Tensor>,
    cache: Option<&RefCell<DynamicCache>>,
) -> Result<Tensor> {
    let (b, s) = (x.size(0), x.size(1));
    let hidden_shape = [b, s, -1, a.head_dim];
    let qkv = a.qkv_proj.forward("qkv_proj", x)?;
    let query_pos = a.heads * a.head_dim;
    let kv_end = query_pos + a.kv_heads * a.head_dim;
    // the three slices first, then each `.view(hidden_shape).transpose(1, 2)`
    // (the order of the autograd nodes decides the order of their backward)
    let query_states = py_slice_last(&qkv, None, Some(query_pos));
    let key_states = py_slice_last(&qkv, Some(query_pos), Some(kv_end));
    let value_states = py_slice_last(&qkv, Some(kv_end), None);
    let heads_of = |sl: Tensor| -> Result<Tensor> {
        let v = sl.view(&hidden_shape)?;
        drop(sl);
        Ok(v.transpose(1, 2))
    };
    let mut query_states = heads_of(query_states)?;
    let mut key_states = heads_of(key_states)?;
    let mut value_states = heads_of(value_states)?;
    let (qe, ke) = apply_rotary_pos_emb(&query_states, &key_states, &args.cos, &args.sin)?;
    query_states = qe;
    key_states = ke;
    let attn = a.sdpa.attend(
        &query_states,
        &mut key_states,
        &mut value_states,
        mask,
        cache,
        args.training,
    )?;
    let out = a.o_proj.forward("o_proj", &attn)?;
    drop(attn);
    // locals die in co_varnames order: qkv, query_states, key_states, value_states
    drop(qkv);
    drop(query_states);
    drop(key_states);
    drop(value_states);
    Ok(out)
}

/// `Phi3MLP.forward`:
///
/// ```python
/// up_states = self.gate_up_proj(hidden_states)
/// gate, up_states = up_states.chunk(2, dim=-1)
/// up_states = up_states * self.activation_fn(gate)
/// return self.down_proj(up_states)
/// ```
fn mlp_forward(m: &Mlp, x: &Tensor) -> Result<Tensor> {
    let rt = x.runtime().clone();
    let fused = m.gate_up_proj.forward("gate_up_proj", x)?;
    // chunk(2, -1) = split(ceil(n / 2), -1)
    let n = fused.size(-1);
    let mut parts = fused.split((n + 1) / 2, -1)?.into_iter();
    let (gate, up) = match (parts.next(), parts.next(), parts.next()) {
        (Some(g), Some(u), None) => (g, u),
        _ => {
            return Err(bad(
                "intermediate_size",
                "gate_up_proj does not chunk in two",
            ))
        }
    };
    drop(fused);
    let prod = {
        let act = rt.in_module("activation_fn", || m.act.forward(&gate))?;
        up.mul(&act)?
    };
    drop(up);
    let out = m.down_proj.forward("down_proj", &prod)?;
    drop(prod);
    drop(gate);
    Ok(out)
}

/// `nn.Dropout(p)(x)`: `x` itself unless training with `p > 0`.
fn dropout(rt: &Runtime, name: &str, x: &Tensor, p: f64, training: bool) -> Result<Tensor> {
    Ok(rt.in_module(name, || x.dropout(p, training))?)
}

impl Layer for DecoderLayer {
    /// `Phi3DecoderLayer.forward`.
    fn forward(
        &self,
        x: &Tensor,
        args: &LayerArgs,
        mask: Option<&Tensor>,
        cache: Option<&RefCell<DynamicCache>>,
    ) -> Result<Tensor> {
        let l = self;
        let rt = x.runtime().clone();
        let (residual, a) = common::pre_norm_sublayer(
            x,
            |x| l.input_layernorm.forward("input_layernorm", x),
            "self_attn",
            |h| attention_forward(&l.self_attn, h, args, mask, cache),
        )?;
        // hidden_states = residual + self.resid_attn_dropout(hidden_states)
        let h = {
            let d = dropout(&rt, "resid_attn_dropout", &a, l.resid_pdrop, args.training)?;
            residual.add(&d)?
        };
        drop(a);
        drop(residual);
        let (residual, m) = common::pre_norm_sublayer(
            &h,
            |h| {
                l.post_attention_layernorm
                    .forward("post_attention_layernorm", h)
            },
            "mlp",
            |n| mlp_forward(&l.mlp, n),
        )?;
        drop(h);
        let out = {
            let d = dropout(&rt, "resid_mlp_dropout", &m, l.resid_pdrop, args.training)?;
            residual.add(&d)?
        };
        drop(m);
        drop(residual);
        Ok(out)
    }

    fn sliding(&self) -> bool {
        self.sliding
    }
}

/// `Phi3Model`.
struct Model {
    cfg: Config,
    rt: Runtime,
    embed_tokens: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    /// `Phi3RotaryEmbedding` (a `RefCell`: longrope re-registers `inv_freq`
    /// during the forward)
    rotary_emb: RefCell<RotaryEmbedding>,
    /// longrope's `self.long_inv_freq` attribute (set by the long branch)
    long_inv_freq: RefCell<Option<Tensor>>,
}

/// Build `Phi3ForCausalLM` on the CPU in `weights`.
pub(crate) fn build(rt: &Runtime, config: &HfConfig, weights: DType) -> Result<Box<dyn HfModel>> {
    let cfg = Config::parse(config)?;
    let w = weights;
    let embed_tokens = Embedding::new(rt, cfg.vocab, cfg.hidden, w)?;
    let mut layers = Vec::with_capacity(cfg.layers);
    for i in 0..cfg.layers {
        let (h, hd) = (cfg.hidden, cfg.head_dim);
        // op_size = heads * head_dim + 2 * (kv_heads * head_dim); o_proj registered first
        let op_size = cfg.heads * hd + 2 * (cfg.kv_heads * hd);
        let self_attn = Attention {
            o_proj: Linear::new(rt, cfg.heads * hd, h, false, w)?,
            qkv_proj: Linear::new(rt, h, op_size, false, w)?,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            head_dim: hd,
            sdpa: Sdpa::new(
                i,
                cfg.heads,
                cfg.kv_heads,
                (hd as f64).powf(-0.5),
                cfg.attention_dropout,
            ),
        };
        let mlp = Mlp {
            gate_up_proj: Linear::new(rt, h, 2 * cfg.intermediate, false, w)?,
            down_proj: Linear::new(rt, cfg.intermediate, h, false, w)?,
            act: cfg.act,
        };
        layers.push(DecoderLayer {
            self_attn,
            mlp,
            input_layernorm: RmsNorm::new(rt, h, cfg.eps, w)?,
            post_attention_layernorm: RmsNorm::new(rt, h, cfg.eps, w)?,
            resid_pdrop: cfg.resid_pdrop,
            sliding: cfg.sliding_window.is_some(),
        });
    }
    let norm = RmsNorm::new(rt, cfg.hidden, cfg.eps, w)?;
    let rotary_emb = RotaryEmbedding::new(rt, cfg.rotary_dim, RopeType::Default)?;
    let (hidden, vocab, tie) = (cfg.hidden, cfg.vocab, cfg.tie);
    let model = Model {
        cfg,
        rt: rt.clone(),
        embed_tokens,
        layers,
        norm,
        rotary_emb: RefCell::new(rotary_emb),
        long_inv_freq: RefCell::new(None),
    };
    Ok(Box::new(CausalLm::new(rt, model, hidden, vocab, tie, w)?))
}

impl Decoder for Model {
    fn embed_weight(&self) -> &Tensor {
        &self.embed_tokens.weight
    }

    fn cuda(&mut self) -> Result<()> {
        // Module._apply: embed_tokens, layers..., norm, rotary_emb's buffers
        to_cuda(&mut self.embed_tokens.weight, Category::Parameter)?;
        for l in &mut self.layers {
            l.self_attn.o_proj.cuda()?;
            l.self_attn.qkv_proj.cuda()?;
            l.mlp.gate_up_proj.cuda()?;
            l.mlp.down_proj.cuda()?;
            to_cuda(&mut l.input_layernorm.weight, Category::Parameter)?;
            to_cuda(&mut l.post_attention_layernorm.weight, Category::Parameter)?;
        }
        to_cuda(&mut self.norm.weight, Category::Parameter)?;
        self.rotary_emb.get_mut().cuda()
    }

    fn parameters(&self, v: &mut Vec<Tensor>) {
        v.push(self.embed_tokens.weight.clone());
        for l in &self.layers {
            l.params(v);
        }
        v.push(self.norm.weight.clone());
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        // Phi3RotaryEmbedding's `inv_freq` and `original_inv_freq` (as
        // registered now: longrope re-registers `inv_freq` in a forward)
        let r = self.rotary_emb.borrow();
        Some(vec![r.inv_freq.clone(), r.original_inv_freq.clone()])
    }

    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        common::per_layer(&self.layers, DecoderLayer::params)
    }

    /// `Phi3Model.forward`.
    fn forward(
        &self,
        ids: &Tensor,
        flags: &Flags,
    ) -> Result<(Tensor, Option<RefCell<DynamicCache>>)> {
        let rt = self.rt.clone();
        let cfg = &self.cfg;
        let inputs_embeds = self.embed_tokens.forward("embed_tokens", ids)?;
        // DynamicCache(config): no layer_types on Phi3Config, so every layer is
        // sliding when sliding_window is set (get_layer_types_and_kwargs)
        let cache = flags.new_cache(cfg.use_cache, &vec![cfg.sliding_window; cfg.layers]);
        let position_ids = common::position_ids(&rt, inputs_embeds.size(1), 0)?;
        // mask_function = create_causal_mask if sliding_window is None else create_sliding_window_causal_mask
        let (full, sliding) = (cfg.sliding_window.is_none(), cfg.sliding_window);
        let masks = Masks::new(
            &inputs_embeds,
            &position_ids,
            cache.as_ref(),
            None,
            full,
            sliding,
        )?;
        // self.rotary_emb(hidden_states, position_ids): under @torch.no_grad(),
        // @dynamic_rope_update first (longrope only)
        if let Some(lr) = &cfg.longrope {
            rt.in_module("rotary_emb", || {
                rt.no_grad(|| {
                    self.longrope_frequency_update(&position_ids, inputs_embeds.size(1), lr)
                })
            })?;
        }
        let cos_sin =
            self.rotary_emb
                .borrow()
                .forward("rotary_emb", &inputs_embeds, &position_ids)?;
        // `position_ids=` before `position_embeddings=` (modeling_phi3)
        let args = LayerArgs::new(cos_sin, &position_ids, true, flags.training);
        let (out, position_embeddings) = common::decoder_stack(
            &self.layers,
            &inputs_embeds,
            args,
            &masks,
            flags,
            cache.as_ref(),
            |h| self.norm.forward("norm", h),
        )?;
        // locals die in co_varnames order: position_ids, inputs_embeds,
        // causal_mask, position_embeddings
        drop(position_ids);
        drop(inputs_embeds);
        drop(masks);
        drop(position_embeddings);
        Ok((out, cache))
    }
}

impl Model {
    /// `dynamic_rope_update`'s `longrope_frequency_update(self, position_ids,
    /// device)` for position ids `0..seq`:
    ///
    /// ```python
    /// seq_len = torch.max(position_ids) + 1                  # 0-dim int64 (the max dies)
    /// if seq_len > original_max_position_embeddings:          # a 0-dim bool, read by .item()
    ///     if not hasattr(self, "None_long_inv_freq"):         # never true: recomputed each time
    ///         long_inv_freq, _ = rope_init_fn(config, device, seq_len=original_max + 1)
    ///     self.register_buffer("inv_freq", long_inv_freq)     # the old buffer goes, unless
    ///     setattr(self, "long_inv_freq", long_inv_freq)       # held here (from the last call)
    /// else:
    ///     original_inv_freq = original_inv_freq.to(device)    # already there
    ///     self.register_buffer("inv_freq", original_inv_freq) # the first call frees the
    ///                                                         # buffer .cuda() made
    /// ```
    ///
    /// `_compute_longrope_parameters` on the device (`n = ceil(dim / 2)`):
    ///
    /// ```python
    /// ext_factors = torch.tensor(long_factor, dtype=torch.float32, device=device)  # n f32
    /// inv_freq_shape = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    ///                                            # n i64, n f32 (the arange dies), n f32 (.float() dies)
    /// inv_freq = 1.0 / (ext_factors * base**inv_freq_shape)
    ///                      # pow, product (pow dies), reciprocal, * 1.0 (reciprocal, then product die)
    /// return inv_freq, attention_factor                      # ext_factors, inv_freq_shape die
    /// ```
    fn longrope_frequency_update(
        &self,
        position_ids: &Tensor,
        seq: i64,
        lr: &LongRope,
    ) -> Result<()> {
        let rt = self.rt.clone();
        let seq_len = {
            let m = position_ids.max_all()?;
            m.add_scalar(1.0)?
        };
        let long = {
            let gt = seq_len.gt_scalar(lr.original_max as f64)?;
            drop(gt);
            seq > lr.original_max
        };
        let mut rotary = self.rotary_emb.borrow_mut();
        if long {
            let n = rotary.inv_freq.numel();
            let dim = self.cfg.rotary_dim as f64;
            let long_inv_freq = {
                let ext_factors = rt
                    .empty(&[n], DType::F32, vramscope_engine::Device::Cpu)?
                    .to_device(vramscope_engine::Device::Cuda)?;
                let inv_freq_shape = {
                    let a = rt.arange(n, DType::I64, vramscope_engine::Device::Cuda)?;
                    let f = a.to_dtype(DType::F32)?;
                    drop(a);
                    let d = f.div_scalar(dim)?;
                    drop(f);
                    d
                };
                let inv_freq = {
                    let prod = {
                        let p = inv_freq_shape.rpow_scalar(lr.base)?;
                        ext_factors.mul(&p)?
                    };
                    prod.rdiv_scalar(1.0)?
                };
                drop(ext_factors);
                drop(inv_freq_shape);
                inv_freq
            };
            let old = std::mem::replace(&mut rotary.inv_freq, long_inv_freq.clone());
            drop(old);
            let prev = self.long_inv_freq.replace(Some(long_inv_freq));
            drop(prev);
        } else {
            let orig = rotary.original_inv_freq.clone();
            let old = std::mem::replace(&mut rotary.inv_freq, orig);
            drop(old);
        }
        drop(rotary);
        drop(seq_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::common::tests::alloc_sizes;
    use crate::families::Inputs;
    use crate::workload::Task;
    use vramscope_engine::Device;

    fn cfg(json: &str) -> Result<Config> {
        Config::parse(&HfConfig::parse(json).unwrap())
    }

    #[test]
    fn class_defaults_fill_absent_fields() {
        let c = cfg(r#"{"model_type":"phi3"}"#).unwrap();
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
            (32064, 3072, 8192, 32, 32, 32, 96)
        );
        assert_eq!(
            (c.rotary_dim, c.act, c.tie, c.sliding_window),
            (96, Act::Silu, false, None)
        );
        let c = cfg(r#"{"model_type":"phi3","hidden_size":512,"num_attention_heads":8,"num_key_value_heads":2,
                        "partial_rotary_factor":0.5,"sliding_window":2047}"#)
        .unwrap();
        assert_eq!(
            (c.kv_heads, c.head_dim, c.rotary_dim, c.sliding_window),
            (2, 64, 32, Some(2047))
        );
        // rope_parameters' own factor wins over the top-level one
        let c = cfg(r#"{"model_type":"phi3","hidden_size":512,"num_attention_heads":8,"partial_rotary_factor":0.5,
                        "rope_parameters":{"rope_type":"default","partial_rotary_factor":0.75}}"#)
        .unwrap();
        assert_eq!(c.rotary_dim, 48);
    }

    #[test]
    fn the_phi_3_mini_preset_is_accepted() {
        let c = Config::parse(&crate::presets::get("phi-3-mini").unwrap()).unwrap();
        assert_eq!(
            (c.hidden, c.layers, c.head_dim, c.sliding_window),
            (3072, 32, 96, Some(2047))
        );
    }

    #[test]
    fn unmodelled_fields_are_refused() {
        for bad in [
            // longrope reads both factor lists (KeyError without them)
            r#"{"model_type":"phi3","rope_scaling":{"type":"su"}}"#,
            r#"{"model_type":"phi3","rope_parameters":{"rope_type":"longrope","short_factor":[1.0]}}"#,
            r#"{"model_type":"phi3","rope_scaling":{"rope_type":"yarn","factor":4.0}}"#,
            // wrong lengths (validate_rope): head_dim 96 needs 48 entries
            r#"{"model_type":"phi3","rope_scaling":{"type":"longrope","short_factor":[1.0],"long_factor":[1.0]}}"#,
            r#"{"model_type":"phi3","rope_scaling":{"rope_type":"linear","factor":2.0}}"#,
            r#"{"model_type":"phi3","rope_scaling":{"rope_type":"dynamic","factor":2.0}}"#,
            r#"{"model_type":"phi3","hidden_act":"gelu_new"}"#,
            r#"{"model_type":"phi3","num_attention_heads":8,"num_key_value_heads":3}"#,
            r#"{"model_type":"phi3","quantization_config":{"bits":4}}"#,
            r#"{"model_type":"phi3","resid_pdrop":1.0}"#,
            r#"{"model_type":"phi3","sliding_window":0}"#,
            r#"{"model_type":"phi3","partial_rotary_factor":0.0}"#,
        ] {
            assert!(cfg(bad).is_err(), "{bad}");
        }
        let e = cfg(r#"{"model_type":"phi3","rope_scaling":{"type":"linear"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("default and longrope"), "{e}");
    }

    fn longrope_json(extra: &str) -> String {
        let f = vec!["1.0"; 16].join(",");
        format!(
            r#"{{"model_type":"phi3","vocab_size":100,"pad_token_id":null,"hidden_size":64,"intermediate_size":64,
                "num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":256,
                "original_max_position_embeddings":64{extra},
                "rope_scaling":{{"type":"su","short_factor":[{f}],"long_factor":[{f}]}}}}"#
        )
    }

    #[test]
    fn longrope_and_its_legacy_names_are_read() {
        let c = cfg(&longrope_json("")).unwrap();
        let lr = c.longrope.unwrap();
        assert_eq!(
            (lr.original_max, lr.factor_lens, c.rotary_dim),
            (64, (16, 16), 32)
        );
        // partial rotary halves the factor lists
        assert!(cfg(&longrope_json(r#","partial_rotary_factor":0.5"#)).is_err());
    }

    /// Per inference forward of the model of `json`: the allocations between
    /// the position ids and the rotary embedding's own (`position_ids.float()`),
    /// and what the pass leaves allocated (relative to before the first).
    fn longrope_update_allocs(json: &str, seq: i64) -> (Vec<Vec<u64>>, Vec<i64>) {
        let rt = Runtime::default();
        let config = HfConfig::parse(json).unwrap();
        let mut m = crate::families::build(&rt, &config, Task::Causal, DType::F32).unwrap();
        m.cuda().unwrap();
        m.set_training(false);
        let ids = rt.empty(&[1, seq], DType::I64, Device::Cuda).unwrap();
        let inputs = Inputs {
            input_ids: Some(ids),
            ..Inputs::default()
        };
        let mut per_pass = Vec::new();
        let mut after = Vec::new();
        let before = rt.memory_allocated();
        for _ in 0..2 {
            let a = alloc_sizes(&rt, || {
                let out = rt.no_grad(|| m.forward(&inputs)).unwrap();
                drop(out);
            });
            after.push(rt.memory_allocated() - before);
            // embedding, arange, + 0 (position ids), then the update
            let end = a.iter().position(|&b| b == (seq * 4) as u64).unwrap();
            per_pass.push(a[3..end].to_vec());
        }
        (per_pass, after)
    }

    #[test]
    fn longrope_short_branch_reads_the_ids_and_drops_the_moved_inv_freq() {
        let (a, after) = longrope_update_allocs(&longrope_json(""), 32);
        // max, + 1, the comparison
        assert_eq!(a, vec![vec![8, 8, 1], vec![8, 8, 1]]);
        // the first pass re-registered original_inv_freq: the buffer .cuda()
        // made (a 512-byte block) is gone; the second changes nothing. The
        // default RoPE keeps it (and allocates nothing before the rotary).
        let default = longrope_json("").replace(r#""type":"su""#, r#""type":"default""#);
        let (d, d_after) = longrope_update_allocs(&default, 32);
        assert_eq!(d, vec![Vec::<u64>::new(), vec![]]);
        assert_eq!(after[0], after[1]);
        assert_eq!(d_after[0] - after[0], 512);
    }

    #[test]
    fn longrope_long_branch_recomputes_inv_freq_on_the_device() {
        let (a, after) = longrope_update_allocs(&longrope_json(""), 128);
        // max, + 1, >, then torch.tensor(long_factor), arange, float, / dim,
        // pow, *, reciprocal, * 1.0 (16 entries)
        let one = vec![8, 8, 1, 64, 128, 64, 64, 64, 64, 64, 64];
        assert_eq!(a, vec![one.clone(), one]);
        // the long inv_freq replaces the moved buffer; the next pass's
        // replaces the last one (held by `long_inv_freq` until then)
        assert_eq!(after[0], after[1]);
    }

    #[test]
    fn partial_rotary_concatenates_the_pass_through_part_back() {
        // head_dim 64, rotary 32: q_rot*cos, -x2, cat, *sin, +, cat([.., q_pass])
        let rt = Runtime::default();
        let q = rt
            .empty(&[2, 4, 128, 64], DType::BF16, Device::Cuda)
            .unwrap();
        let k = rt
            .empty(&[2, 4, 128, 64], DType::BF16, Device::Cuda)
            .unwrap();
        let cos = rt.empty(&[1, 128, 32], DType::BF16, Device::Cuda).unwrap();
        let sin = rt.empty(&[1, 128, 32], DType::BF16, Device::Cuda).unwrap();
        let half = 2 * 4 * 128 * 32 * 2;
        let mut out = None;
        let a = alloc_sizes(&rt, || {
            out = Some(apply_rotary_pos_emb(&q, &k, &cos, &sin).unwrap())
        });
        let one = vec![half, half / 2, half, half, half, 2 * half];
        assert_eq!(a, [one.clone(), one].concat());
        let (qe, ke) = out.unwrap();
        assert_eq!(qe.sizes(), &[2, 4, 128, 64]);
        // only the two results are left
        drop((qe, ke));
    }

    #[test]
    fn full_rotary_still_concatenates_an_empty_pass_through() {
        // the H100 trace of phi3_train_bf16 (head_dim 64, all rotary): the
        // last allocation per tensor is the cat with the empty q[..., 64:]
        let rt = Runtime::default();
        let q = rt
            .empty(&[4, 8, 512, 64], DType::BF16, Device::Cuda)
            .unwrap();
        let cos = rt.empty(&[1, 512, 64], DType::BF16, Device::Cuda).unwrap();
        let full = 4 * 8 * 512 * 64 * 2;
        let mut out = None;
        let a = alloc_sizes(&rt, || {
            out = Some(apply_rotary_pos_emb(&q, &q, &cos, &cos).unwrap())
        });
        assert_eq!(&a[..6], &[full, full / 2, full, full, full, full]);
        drop(out);
    }

    #[test]
    fn mlp_chunks_the_fused_projection_and_keeps_it_for_backward() {
        let rt = Runtime::default();
        let mut m = Mlp {
            gate_up_proj: Linear::new(&rt, 512, 2 * 1536, false, DType::BF16).unwrap(),
            down_proj: Linear::new(&rt, 1536, 512, false, DType::BF16).unwrap(),
            act: Act::Silu,
        };
        m.gate_up_proj.cuda().unwrap();
        m.down_proj.cuda().unwrap();
        let x = rt.empty(&[4, 512, 512], DType::BF16, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let base = rt.memory_allocated();
        let y = mlp_forward(&m, &x).unwrap();
        // gate_up (12 MiB, viewed by the saved gate and up), silu (6 MiB),
        // the product (6 MiB), the output (2 MiB), and the cuBLAS workspaces
        let ws = 32 * 1024 * 1024;
        let live = rt.memory_allocated() - base - ws;
        assert_eq!(live, 12_582_912 + 2 * 6_291_456 + 2_097_152);
        assert_eq!(y.grad_fn_name(), Some("UnsafeViewBackward0"));
        drop(y);
    }
}
