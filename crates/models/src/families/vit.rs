//! `modeling_vit.py` (transformers 5.17): `ViTForImageClassification` with
//! `attn_implementation="sdpa"`, op by op, with CPython's lifetimes.
//!
//! - `ViTEmbeddings`: `projection(pixel_values).flatten(2).transpose(1, 2)`
//!   (a `Conv2d(num_channels, hidden, kernel=stride=patch)` through cuDNN),
//!   `torch.cat((cls_token.expand(b, -1, -1), embeddings), dim=1)`,
//!   `embeddings + position_embeddings` (`interpolate_pos_encoding` off), dropout;
//! - `ViTLayer` (pre-norm): `layernorm_before`, `ViTAttention` (q/k/v
//!   projections, `F.scaled_dot_product_attention` non-causal, no mask —
//!   `create_bidirectional_mask` returns `None` for sdpa without padding —
//!   dropout `attention_probs_dropout_prob` in training, `o_proj`), dropout,
//!   residual add, `layernorm_after`, `ViTMLP` (`fc1`, activation, `fc2`),
//!   dropout, residual add;
//! - final `layernorm`, no pooler (`add_pooling_layer=False`), `classifier`
//!   on the CLS token (`sequence_output[:, 0, :]`);
//! - loss: `self.loss_function` = `LOSS_MAPPING["ForImageClassification"]` =
//!   `ForSequenceClassificationLoss`: integer labels and `num_labels > 1` make
//!   `problem_type = "single_label_classification"`, so
//!   `fixed_cross_entropy(logits.view(-1, num_labels), labels.view(-1))` =
//!   `F.cross_entropy(..., ignore_index=-100, reduction="mean")`.

use std::rc::Rc;

use serde_json::Value;
use vramscope_engine::nn::Module as _;
use vramscope_engine::{Category, DType, Runtime, SdpaArgs, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::common::{checkpointed, parameter, to_cuda, Act, LayerNorm, Linear};
use crate::families::{HfModel, Inputs, ModelOutput};
use crate::workload::Checkpointing;

/// `ViTConfig` with transformers 5.17's class defaults.
#[derive(Debug, Clone, PartialEq)]
struct ViTConfig {
    hidden: i64,
    layers: usize,
    heads: i64,
    head_dim: i64,
    intermediate: i64,
    act: Act,
    hidden_dropout: f64,
    attention_dropout: f64,
    image: [i64; 2],
    patch: [i64; 2],
    channels: i64,
    qkv_bias: bool,
    num_labels: i64,
}

/// An `int | [int, int]` field (`image_size`, `patch_size`), as
/// `ViTPatchEmbeddings` reads it: an int means a square.
fn pair(c: &HfConfig, key: &str, default: i64) -> Result<[i64; 2]> {
    let bad = |detail: String| ModelError::Field {
        field: key.into(),
        detail,
    };
    let v = match c.get(key) {
        None => [default, default],
        Some(Value::Array(a)) => {
            let ints: Vec<i64> = a.iter().filter_map(Value::as_i64).collect();
            if ints.len() != 2 || a.len() != 2 {
                return Err(bad(format!(
                    "expected an integer or two, found {}",
                    Value::Array(a.clone())
                )));
            }
            [ints[0], ints[1]]
        }
        Some(_) => {
            let s = c.size(key, default)?;
            [s, s]
        }
    };
    if v.iter().any(|&x| x <= 0) {
        return Err(bad(format!("must be positive, found {v:?}")));
    }
    Ok(v)
}

impl ViTConfig {
    fn from_hf(c: &HfConfig) -> Result<Self> {
        let hidden = c.size("hidden_size", 768)?;
        let heads = c.size("num_attention_heads", 12)?;
        let head_dim = match c.opt_int("head_dim")? {
            Some(d) if d > 0 => d,
            Some(d) => {
                return Err(ModelError::Field {
                    field: "head_dim".into(),
                    detail: format!("must be positive, found {d}"),
                })
            }
            None => {
                if hidden % heads != 0 {
                    return Err(ModelError::Field {
                        field: "num_attention_heads".into(),
                        detail: format!("{heads} heads do not divide hidden_size {hidden}"),
                    });
                }
                hidden / heads
            }
        };
        let act = match c.string("hidden_act")?.unwrap_or("gelu") {
            // those with the memory of one pointwise op
            name @ ("gelu" | "gelu_pytorch_tanh" | "relu") => Act::parse("hidden_act", name)?,
            other => {
                return Err(ModelError::Unsupported(format!(
                    "config field `hidden_act` = \"{other}\" (activations other than gelu, \
                     gelu_pytorch_tanh and relu are not modelled for vit)"
                )))
            }
        };
        let prob = |key: &str| -> Result<f64> {
            let p = c.float(key, 0.0)?;
            if !(0.0..1.0).contains(&p) {
                return Err(ModelError::Field {
                    field: key.into(),
                    detail: format!("a dropout probability in [0, 1), found {p}"),
                });
            }
            Ok(p)
        };
        // PreTrainedConfig: `num_labels` sets `id2label`; config.json keeps `id2label`
        let num_labels = match c.opt_int("num_labels")? {
            Some(n) => n,
            None => match c.get("id2label") {
                Some(Value::Object(m)) => m.len() as i64,
                Some(v) => {
                    return Err(ModelError::Field {
                        field: "id2label".into(),
                        detail: format!("expected an object, found {v}"),
                    })
                }
                None => 2,
            },
        };
        if num_labels < 0 {
            return Err(ModelError::Field {
                field: "num_labels".into(),
                detail: format!("must not be negative, found {num_labels}"),
            });
        }
        c.reject_present("quantization_config", "quantized weights are not modelled")?;
        let single = Value::String("single_label_classification".into());
        c.reject_unless(
            "problem_type",
            &[&single],
            "only the single-label classification loss is modelled for vit",
        )?;
        let cfg = ViTConfig {
            hidden,
            layers: c.int("num_hidden_layers", 12)?.max(0) as usize,
            heads,
            head_dim,
            intermediate: c.size("intermediate_size", 3072)?,
            act,
            hidden_dropout: prob("hidden_dropout_prob")?,
            attention_dropout: prob("attention_probs_dropout_prob")?,
            image: pair(c, "image_size", 224)?,
            patch: pair(c, "patch_size", 16)?,
            channels: c.size("num_channels", 3)?,
            qkv_bias: c.boolean("qkv_bias", true)?,
            num_labels,
        };
        if cfg.image[0] < cfg.patch[0] || cfg.image[1] < cfg.patch[1] {
            return Err(ModelError::Field {
                field: "patch_size".into(),
                detail: format!("{:?} is larger than image_size {:?}", cfg.patch, cfg.image),
            });
        }
        Ok(cfg)
    }

    /// `ViTPatchEmbeddings.num_patches`
    fn num_patches(&self) -> i64 {
        (self.image[0] / self.patch[0]) * (self.image[1] / self.patch[1])
    }
}

/// `ViTLayer`
struct Layer {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    layernorm_before: LayerNorm,
    layernorm_after: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl Layer {
    fn new(rt: &Runtime, c: &ViTConfig, dt: DType) -> Result<Self> {
        let qkv = c.heads * c.head_dim;
        Ok(Layer {
            q_proj: Linear::new(rt, c.hidden, qkv, c.qkv_bias, dt)?,
            k_proj: Linear::new(rt, c.hidden, qkv, c.qkv_bias, dt)?,
            v_proj: Linear::new(rt, c.hidden, qkv, c.qkv_bias, dt)?,
            o_proj: Linear::new(rt, qkv, c.hidden, true, dt)?,
            layernorm_before: LayerNorm::new_in(rt, &[c.hidden], dt)?,
            layernorm_after: LayerNorm::new_in(rt, &[c.hidden], dt)?,
            fc1: Linear::new(rt, c.hidden, c.intermediate, true, dt)?,
            fc2: Linear::new(rt, c.intermediate, c.hidden, true, dt)?,
        })
    }

    /// Children in registration order: attention (q, k, v, o),
    /// layernorm_before, layernorm_after, mlp (fc1, fc2).
    fn cuda(&mut self) -> Result<()> {
        for l in [
            &mut self.q_proj,
            &mut self.k_proj,
            &mut self.v_proj,
            &mut self.o_proj,
        ] {
            l.cuda()?;
        }
        self.layernorm_before.cuda()?;
        self.layernorm_after.cuda()?;
        self.fc1.cuda()?;
        self.fc2.cuda()
    }

    fn params(&self, v: &mut Vec<Tensor>) {
        for l in [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj] {
            l.params(v);
        }
        v.extend(self.layernorm_before.parameters());
        v.extend(self.layernorm_after.parameters());
        self.fc1.params(v);
        self.fc2.params(v);
    }

    /// `ViTAttention.forward(hidden_states)` (sdpa).
    fn attention(&self, c: &ViTConfig, training: bool, x: &Tensor) -> Result<Tensor> {
        let (b, s) = (x.sizes()[0], x.sizes()[1]);
        // (*input_shape, -1, head_dim) views, transposed to (b, heads, s, head_dim)
        let proj = |name: &str, lin: &Linear| -> Result<Tensor> {
            let p = lin.forward(name, x)?;
            Ok(p.view(&[b, s, -1, c.head_dim])?.transpose(1, 2))
        };
        let query_states = proj("q_proj", &self.q_proj)?;
        let key_states = proj("k_proj", &self.k_proj)?;
        let value_states = proj("v_proj", &self.v_proj)?;
        // sdpa_attention_forward: is_causal = q_len > 1 and mask is None and
        // module.is_causal (False) → False; dropout only in training
        let dropout = if training { c.attention_dropout } else { 0.0 };
        let attn = Tensor::sdpa(
            &query_states,
            &key_states,
            &value_states,
            &SdpaArgs {
                attn_mask: None,
                dropout_p: dropout,
                is_causal: false,
                scale: Some((c.head_dim as f64).powf(-0.5)),
                enable_gqa: false,
            },
        )?;
        // attn_output.transpose(1, 2).contiguous()
        let attn = {
            let t = attn.transpose(1, 2);
            drop(attn);
            t.contiguous()?
        };
        // attn_output.reshape(*input_shape, -1).contiguous()
        let attn = {
            let r = attn.reshape(&[b, s, -1])?;
            drop(attn);
            r.contiguous()?
        };
        let out = self.o_proj.forward("o_proj", &attn)?;
        drop(attn);
        // query/key/value_states are locals until the return
        drop((query_states, key_states, value_states));
        Ok(out)
    }

    /// `ViTMLP.forward`
    fn mlp(&self, c: &ViTConfig, x: &Tensor) -> Result<Tensor> {
        let rt = x.runtime().clone();
        let h = self.fc1.forward("fc1", x)?;
        let h = {
            let a = rt.in_module("activation_fn", || c.act.forward(&h))?;
            drop(h);
            a
        };
        let out = self.fc2.forward("fc2", &h)?;
        drop(h);
        Ok(out)
    }

    /// `ViTLayer.forward(hidden_states)`
    fn forward(&self, c: &ViTConfig, training: bool, hidden_states: &Tensor) -> Result<Tensor> {
        let rt = hidden_states.runtime().clone();
        let p = c.hidden_dropout;
        // residual = hidden_states
        let h = rt.in_module("layernorm_before", || {
            self.layernorm_before.layer_norm(hidden_states)
        })?;
        let a = rt.in_module("attention", || self.attention(c, training, &h))?;
        drop(h);
        let a = {
            let d = rt.in_module("dropout", || a.dropout(p, training))?;
            drop(a);
            d
        };
        // hidden_states = hidden_states + residual
        let h = a.add(hidden_states)?;
        drop(a);
        // residual = hidden_states
        let residual = h.clone();
        let n = rt.in_module("layernorm_after", || self.layernorm_after.layer_norm(&h))?;
        drop(h);
        let m = rt.in_module("mlp", || self.mlp(c, &n))?;
        drop(n);
        let m = {
            let d = rt.in_module("dropout", || m.dropout(p, training))?;
            drop(m);
            d
        };
        let out = m.add(&residual)?;
        drop(m);
        drop(residual);
        Ok(out)
    }
}

/// `ViTForImageClassification`
struct ViT {
    rt: Runtime,
    cfg: Rc<ViTConfig>,
    // vit.embeddings
    cls_token: Tensor,
    projection_weight: Tensor,
    projection_bias: Tensor,
    position_embeddings: Tensor,
    /// shared with the recomputation closures of checkpointed layers
    layers: Vec<Rc<Layer>>,
    layernorm: LayerNorm,
    /// `None`: `nn.Identity()` (`num_labels == 0`)
    classifier: Option<Linear>,
    training: bool,
    /// per layer: `gradient_checkpointing` set by `_set_gradient_checkpointing`
    checkpointed: Vec<bool>,
    /// forward hooks on the model and its layers (FSDP)
    hooks: Option<Rc<dyn super::ModuleHooks>>,
}

/// Build the model (`ViTForImageClassification.from_config(config, dtype=weights)`).
pub(crate) fn build(rt: &Runtime, config: &HfConfig, weights: DType) -> Result<Box<dyn HfModel>> {
    let cfg = ViTConfig::from_hf(config)?;
    let dt = weights;
    let h = cfg.hidden;
    // in `ViTEmbeddings.__init__`'s order, before the encoder: the CPU
    // tensors glibc maps take the address space in it (`driver_va.rs`,
    // rule 7)
    let cls_token = parameter(rt, &[1, 1, h], dt)?;
    let projection_weight = parameter(rt, &[h, cfg.channels, cfg.patch[0], cfg.patch[1]], dt)?;
    let projection_bias = parameter(rt, &[h], dt)?;
    let position_embeddings = parameter(rt, &[1, cfg.num_patches() + 1, h], dt)?;
    let layers = (0..cfg.layers)
        .map(|_| Layer::new(rt, &cfg, dt).map(Rc::new))
        .collect::<Result<Vec<_>>>()?;
    let layernorm = LayerNorm::new_in(rt, &[h], dt)?;
    let classifier = if cfg.num_labels > 0 {
        Some(Linear::new(rt, h, cfg.num_labels, true, dt)?)
    } else {
        None
    };
    // `post_init`'s `_init_weights`, after every tensor is made: the first
    // `trunc_normal_` of more elements than ATen's grain size (its
    // `erfinv_`) runs in parallel and starts OpenMP's worker, whose stack
    // and malloc arena take address space before `.cuda()` maps a chunk
    // (the text families' `normal_` runs serially: no worker)
    rt.intra_op_worker();
    Ok(Box::new(ViT {
        rt: rt.clone(),
        cls_token,
        projection_weight,
        projection_bias,
        position_embeddings,
        checkpointed: vec![false; layers.len()],
        layers,
        layernorm,
        classifier,
        training: true,
        cfg: Rc::new(cfg),
        hooks: None,
    }))
}

impl ViT {
    /// `ViTEmbeddings.forward(pixel_values)`
    fn embeddings(&self, px: &Tensor) -> Result<Tensor> {
        let rt = &self.rt;
        let c = &self.cfg;
        let (b, ch, hgt, wid) = (px.sizes()[0], px.sizes()[1], px.sizes()[2], px.sizes()[3]);
        // ViTPatchEmbeddings.forward
        let embeddings = rt.in_module("patch_embeddings", || -> Result<Tensor> {
            if ch != c.channels {
                return Err(ModelError::Unsupported(format!(
                    "pixel_values with {ch} channels for a config of {}",
                    c.channels
                )));
            }
            let y = rt.in_module("projection", || {
                px.conv2d(
                    &self.projection_weight,
                    Some(&self.projection_bias),
                    c.patch,
                    [0, 0],
                    [1, 1],
                    1,
                )
            })?;
            // .flatten(2).transpose(1, 2): views
            let f = y.reshape(&[b, c.hidden, -1])?;
            drop(y);
            Ok(f.transpose(1, 2))
        })?;
        // cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        let cls_tokens = self.cls_token.expand(&[b, -1, -1])?;
        // embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        let embeddings = {
            let e = Tensor::cat(&[&cls_tokens, &embeddings], 1)?;
            drop(embeddings);
            e
        };
        if hgt != c.image[0] || wid != c.image[1] {
            return Err(ModelError::Unsupported(format!(
                "input image size ({hgt}*{wid}) doesn't match the model ({}*{})",
                c.image[0], c.image[1]
            )));
        }
        // embeddings = embeddings + self.position_embeddings
        let embeddings = {
            let e = embeddings.add(&self.position_embeddings)?;
            drop(embeddings);
            e
        };
        drop(cls_tokens);
        // embeddings = self.dropout(embeddings)
        let out = rt.in_module("dropout", || {
            embeddings.dropout(c.hidden_dropout, self.training)
        })?;
        Ok(out)
    }

    /// `self.layers[i](hidden_states, attention_mask)`: under
    /// `checkpoint(partial(ViTLayer.__call__), hidden_states, None,
    /// use_reentrant=False)` when the layer is checkpointed and training.
    fn layer(&self, i: usize, hidden_states: &Tensor) -> Result<Tensor> {
        let l = &self.layers[i];
        if self.training && self.checkpointed[i] {
            let (l, c, training) = (l.clone(), self.cfg.clone(), self.training);
            return checkpointed(&self.rt, hidden_states, move |x: &Tensor| {
                l.forward(&c, training, x).map_err(|e| match e {
                    ModelError::Engine(e) => e,
                    other => vramscope_engine::EngineError::Unsupported {
                        what: other.to_string(),
                    },
                })
            });
        }
        l.forward(&self.cfg, self.training, hidden_states)
    }

    /// `ViTModel.forward(pixel_values)`: `last_hidden_state`.
    fn vit(&self, pixel_values: &Tensor) -> Result<Tensor> {
        let rt = &self.rt;
        if pixel_values.dim() != 4 {
            return Err(ModelError::Unsupported(format!(
                "pixel_values of shape {:?} (expected (batch, channels, height, width))",
                pixel_values.sizes()
            )));
        }
        // pixel_values.to(projection.weight.dtype) when they differ
        let px = if pixel_values.dtype() != self.projection_weight.dtype() {
            pixel_values.to_dtype(self.projection_weight.dtype())?
        } else {
            pixel_values.clone()
        };
        let embedding_output = rt.in_module("embeddings", || self.embeddings(&px))?;
        // attention_mask = create_bidirectional_mask(...) → None for sdpa
        let mut hidden_states = embedding_output.clone();
        for i in 0..self.layers.len() {
            let out = rt.in_module("layers", || {
                rt.in_module(&i.to_string(), || {
                    // the layer's forward hooks (FSDP's pre-forward may wrap the input)
                    let wrapped = match &self.hooks {
                        Some(h) => h.pre_forward(1 + i, Some(&hidden_states))?,
                        None => None,
                    };
                    let out = self.layer(i, wrapped.as_ref().unwrap_or(&hidden_states))?;
                    drop(wrapped);
                    if let Some(h) = &self.hooks {
                        h.post_forward(1 + i, &[&out])?;
                    }
                    Ok::<Tensor, ModelError>(out)
                })
            })?;
            hidden_states = out;
        }
        let sequence_output =
            rt.in_module("layernorm", || self.layernorm.layer_norm(&hidden_states))?;
        // embedding_output, hidden_states and px are locals until the return
        drop(hidden_states);
        drop(embedding_output);
        drop(px);
        Ok(sequence_output)
    }
}

impl HfModel for ViT {
    /// `Module._apply`: children first (vit: embeddings — its child
    /// patch_embeddings.projection, then its own cls_token and
    /// position_embeddings —, layers, layernorm; classifier).
    fn cuda(&mut self) -> Result<()> {
        for p in [
            &mut self.projection_weight,
            &mut self.projection_bias,
            &mut self.cls_token,
            &mut self.position_embeddings,
        ] {
            to_cuda(p, Category::Parameter)?;
        }
        for l in &mut self.layers {
            let l = Rc::get_mut(l).ok_or_else(|| {
                ModelError::Unsupported("model.cuda() while a checkpointed forward is alive".into())
            })?;
            l.cuda()?;
        }
        self.layernorm.cuda()?;
        if let Some(c) = &mut self.classifier {
            c.cuda()?;
        }
        Ok(())
    }

    /// `named_parameters()`: a module's own parameters before its children's.
    fn parameters(&self) -> Vec<Tensor> {
        let mut v = vec![
            self.cls_token.clone(),
            self.position_embeddings.clone(),
            self.projection_weight.clone(),
            self.projection_bias.clone(),
        ];
        for l in &self.layers {
            l.params(&mut v);
        }
        v.extend(self.layernorm.parameters());
        if let Some(c) = &self.classifier {
            c.params(&mut v);
        }
        v
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        // ViTForImageClassification registers none
        Some(Vec::new())
    }

    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        crate::families::common::per_layer(&self.layers, |l, v| l.params(v))
    }

    fn set_module_hooks(&mut self, hooks: Rc<dyn super::ModuleHooks>) -> Result<()> {
        self.hooks = Some(hooks);
        Ok(())
    }

    /// `_set_gradient_checkpointing(every_n_layers=k)`: the `ViTLayer`s are
    /// the only `GradientCheckpointingLayer`s, counted in order. (ViT's
    /// `main_input_name` is `pixel_values`: no `enable_input_require_grads`.)
    fn enable_gradient_checkpointing(&mut self, which: &Checkpointing) -> Result<()> {
        for (i, c) in self.checkpointed.iter_mut().enumerate() {
            *c = which.applies(i);
        }
        Ok(())
    }

    /// `ViTForImageClassification.forward(pixel_values, labels=labels)`
    fn forward(&self, inputs: &Inputs) -> Result<ModelOutput> {
        let rt = &self.rt;
        let Some(px) = &inputs.pixel_values else {
            return Err(ModelError::Unsupported(
                "vit needs pixel_values (an image task)".into(),
            ));
        };
        if let Some(h) = &self.hooks {
            h.pre_forward(0, None)?;
        }
        let sequence_output = rt.in_module("vit", || self.vit(px))?;
        // pooled_output = sequence_output[:, 0, :]
        let pooled_output = sequence_output.select(1, 0);
        let logits = match &self.classifier {
            Some(c) => c.forward("classifier", &pooled_output)?,
            None => pooled_output.clone(),
        };
        drop(pooled_output);
        let loss = match &inputs.labels {
            None => None,
            Some(labels) => Some(self.loss(labels, &logits)?),
        };
        // `outputs` and `sequence_output` live until the forward returns,
        // after the loss (the output only returns the logits and the loss):
        // under autocast the classifier saves its bf16 copy of the CLS
        // rows, not a view of them, so this is where the last hidden state
        // is freed (the H100 trace of `shapes_and_settings/vit_train_autocast`)
        drop(sequence_output);
        if let Some(h) = &self.hooks {
            // the output's tensors, flattened (`loss`, then `logits`)
            let outs: Vec<&Tensor> = loss.iter().chain(std::iter::once(&logits)).collect();
            h.post_forward(0, &outs)?;
        }
        Ok(ModelOutput {
            loss,
            logits: Some(logits),
            retained: Vec::new(),
        })
    }
}

impl ViT {
    /// `ForSequenceClassificationLoss(labels, logits, config)`
    fn loss(&self, labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
        let n = self.cfg.num_labels;
        let integer = matches!(labels.dtype(), DType::I64 | DType::I32);
        if n <= 1 || !integer {
            return Err(ModelError::Unsupported(format!(
                "the vit loss for num_labels = {n} with {} labels (only single-label \
                 classification, num_labels > 1 with integer labels, is modelled)",
                labels.dtype()
            )));
        }
        // labels.to(pooled_logits.device): already there
        // fixed_cross_entropy(pooled_logits.view(-1, num_labels), labels.view(-1))
        let source = logits.view(&[-1, n])?;
        let target = labels.view(&[-1])?;
        let loss = self
            .rt
            .in_module("loss", || source.cross_entropy(&target))?;
        Ok(loss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Task;

    fn cfg(extra: &str) -> HfConfig {
        HfConfig::parse(&format!(
            r#"{{"model_type": "vit", "hidden_size": 384, "num_hidden_layers": 4,
                "num_attention_heads": 6, "intermediate_size": 1536, "image_size": 224,
                "patch_size": 16, "num_labels": 10{extra}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn config_defaults_and_labels() {
        let c = ViTConfig::from_hf(&cfg("")).unwrap();
        assert_eq!((c.head_dim, c.num_patches(), c.num_labels), (64, 196, 10));
        assert_eq!((c.channels, c.qkv_bias, c.act), (3, true, Act::Gelu));
        let j = HfConfig::parse(
            r#"{"model_type": "vit", "id2label": {"0": "a", "1": "b", "2": "c"},
                "image_size": [224, 160], "patch_size": [16, 32]}"#,
        )
        .unwrap();
        let c = ViTConfig::from_hf(&j).unwrap();
        assert_eq!((c.num_labels, c.hidden, c.layers), (3, 768, 12));
        assert_eq!(c.num_patches(), 14 * 5);
    }

    #[test]
    fn unmodelled_fields_are_refused() {
        assert!(ViTConfig::from_hf(&cfg(r#", "hidden_act": "quick_gelu""#)).is_err());
        assert!(ViTConfig::from_hf(&cfg(r#", "problem_type": "regression""#)).is_err());
        assert!(ViTConfig::from_hf(&cfg(r#", "quantization_config": {"bits": 4}"#)).is_err());
        assert!(ViTConfig::from_hf(&cfg(r#", "patch_size": [16]"#)).is_err());
        assert!(ViTConfig::from_hf(&cfg(r#", "num_attention_heads": 5"#)).is_err());
        assert!(ViTConfig::from_hf(&cfg(r#", "hidden_dropout_prob": 1.0"#)).is_err());
    }

    #[test]
    fn load_moves_parameters_in_module_apply_order() {
        let rt = Runtime::default();
        let mut m = crate::families::build(&rt, &cfg(""), Task::Image, DType::F32).unwrap();
        rt.record_memory_history(true);
        m.cuda().unwrap();
        let sizes: Vec<u64> = rt
            .trace()
            .iter()
            .filter(|e| e.action == vramscope_alloc::TraceAction::Alloc)
            .map(|e| e.size)
            .collect();
        // vit_train_fp32's load: projection weight, bias, cls_token, position_embeddings, q_proj...
        assert_eq!(
            &sizes[..6],
            &[1_179_648, 1536, 1536, 302_592, 589_824, 1536]
        );
        assert_eq!(&sizes[sizes.len() - 2..], &[15_360, 40]);
        // parameters(): cls_token, position_embeddings, projection weight and bias first
        let p = m.parameters();
        assert_eq!(p[0].nbytes(), 1536);
        assert_eq!(p[1].nbytes(), 302_592);
        assert_eq!(p[2].nbytes(), 1_179_648);
        assert_eq!(p.len(), 4 + 4 * 16 + 2 + 2);
        // vit_train_fp32 load: 40,447,488 bytes allocated before the inputs
        let inputs = 9_633_792 + 512; // pixel_values + labels (128 B, rounded to 512)
        assert_eq!(rt.memory_allocated() + inputs, 40_447_488);
    }
}
