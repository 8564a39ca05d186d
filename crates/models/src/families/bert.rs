//! `modeling_bert.py` and `modeling_roberta.py` (transformers 5.17):
//! `BertForMaskedLM` and `RobertaForMaskedLM` with the `sdpa` attention, op
//! by op, with CPython's lifetimes.
//!
//! What shapes their memory:
//! - the embeddings register two int64 buffers of `(1,
//!   max_position_embeddings)` (`position_ids`, an expanded `arange`, and
//!   `token_type_ids`, zeros; both `persistent=False`), moved by `.cuda()`
//!   after the embedding modules' parameters;
//! - with no `token_type_ids` passed, BERT `gather`s the buffer at the
//!   position ids and `expand`s it over the batch: the expanded indices
//!   cannot be flattened as a view, so `F.embedding` copies them
//!   (`indices.reshape(-1)`) for the duration of the `index_select`;
//!   RoBERTa computes its position ids from `input_ids`
//!   (`create_position_ids_from_input_ids`: `ne`, `int`, `cumsum`,
//!   `type_as`, `+`, `*`, `long`, `+`, every one an allocation);
//! - with no `attention_mask`, `create_bidirectional_mask` returns `None`
//!   for sdpa (`_ignore_bidirectional_mask_sdpa`), so the attention is
//!   unmasked and non-causal;
//! - the MLM head (`transform`: dense, activation, LayerNorm, then the
//!   decoder tied to the word embeddings with its bias tied to the head's
//!   `bias`) and the loss, `CrossEntropyLoss()` on the logits as they are
//!   (no upcast).

use std::rc::Rc;

use vramscope_engine::nn::Module as _;
use vramscope_engine::{Category, DType, Device, EngineError, Runtime, SdpaArgs, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::common::{
    check_padding_idx, checkpointed, parameter, to_cuda, Act, LayerNorm, Linear,
};
use crate::families::{HfModel, Inputs, ModelOutput};
use crate::workload::Checkpointing;

/// Build `BertForMaskedLM` / `RobertaForMaskedLM` `.from_config(config,
/// dtype=weights)` on the CPU.
pub(crate) fn build(rt: &Runtime, config: &HfConfig, weights: DType) -> Result<Box<dyn HfModel>> {
    let cfg = BertConfig::from_hf(config)?;
    Ok(Box::new(BertForMaskedLM::new(rt, cfg, weights)?))
}

// ---- config ------------------------------------------------------------------------

/// Which of the two families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `modeling_bert.py`
    Bert,
    /// `modeling_roberta.py`
    Roberta,
}

/// `BertConfig` / `RobertaConfig` normalised (class defaults of
/// `configuration_bert.py` / `configuration_roberta.py`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BertConfig {
    pub(crate) flavor: Flavor,
    pub(crate) vocab_size: i64,
    pub(crate) hidden_size: i64,
    pub(crate) num_hidden_layers: i64,
    pub(crate) num_attention_heads: i64,
    pub(crate) intermediate_size: i64,
    pub(crate) act: Act,
    pub(crate) hidden_dropout_prob: f64,
    pub(crate) attention_probs_dropout_prob: f64,
    pub(crate) max_position_embeddings: i64,
    pub(crate) type_vocab_size: i64,
    /// `pad_token_id` (RoBERTa's `padding_idx`)
    pub(crate) pad_token_id: i64,
    pub(crate) tie_word_embeddings: bool,
}

impl BertConfig {
    pub(crate) fn from_hf(c: &HfConfig) -> Result<Self> {
        let flavor = match c.model_type.as_str() {
            "roberta" => Flavor::Roberta,
            _ => Flavor::Bert,
        };
        let no = serde_json::Value::Bool(false);
        c.reject_unless(
            "is_decoder",
            &[&no],
            "a decoder BERT (causal mask and cache) is not modelled",
        )?;
        c.reject_unless(
            "add_cross_attention",
            &[&no],
            "cross-attention layers are not modelled",
        )?;
        c.reject_unless(
            "chunk_size_feed_forward",
            &[&serde_json::Value::from(0)],
            "chunked feed-forward (apply_chunking_to_forward) is not modelled",
        )?;
        c.reject_unless(
            "position_embedding_type",
            &[&serde_json::Value::from("absolute")],
            "only absolute position embeddings are modelled",
        )?;
        c.reject_present("quantization_config", "quantized weights are not modelled")?;
        let hidden_size = c.size("hidden_size", 768)?;
        let heads = c.size("num_attention_heads", 12)?;
        if hidden_size % heads != 0 {
            return Err(ModelError::Field {
                field: "hidden_size".into(),
                detail: format!("{hidden_size} is not a multiple of num_attention_heads = {heads}"),
            });
        }
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
        let (vocab_default, pad_default) = match flavor {
            Flavor::Bert => (30522, 0),
            Flavor::Roberta => (50265, 1),
        };
        let max_pos = c.size("max_position_embeddings", 512)?;
        let pad = c.int("pad_token_id", pad_default)?;
        let vocab_size = c.size("vocab_size", vocab_default)?;
        check_padding_idx(c, Some(pad_default), vocab_size)?;
        if flavor == Flavor::Roberta && !(0..max_pos).contains(&pad) {
            return Err(ModelError::Field {
                field: "pad_token_id".into(),
                detail: format!(
                    "RoBERTa's padding_idx {pad} must index the {max_pos} position embeddings"
                ),
            });
        }
        Ok(BertConfig {
            flavor,
            vocab_size,
            hidden_size,
            num_hidden_layers: c.size("num_hidden_layers", 12)?,
            num_attention_heads: heads,
            intermediate_size: c.size("intermediate_size", 3072)?,
            act: Act::parse("hidden_act", c.string("hidden_act")?.unwrap_or("gelu"))?,
            hidden_dropout_prob: p("hidden_dropout_prob")?,
            attention_probs_dropout_prob: p("attention_probs_dropout_prob")?,
            max_position_embeddings: max_pos,
            type_vocab_size: c.size("type_vocab_size", 2)?,
            pad_token_id: pad,
            tie_word_embeddings: c.boolean("tie_word_embeddings", true)?,
        })
    }

    fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_attention_heads
    }
}

// ---- modules ----------------------------------------------------------------------

/// `BertSelfOutput` / `BertOutput`: dense, dropout, `LayerNorm(x + input)`.
struct DenseNorm {
    dense: Linear,
    layer_norm: LayerNorm,
}

struct Layer {
    /// `layer.{i}`
    name: String,
    query: Linear,
    key: Linear,
    value: Linear,
    attention_output: DenseNorm,
    intermediate: Linear,
    output: DenseNorm,
}

/// `BertForMaskedLM` / `RobertaForMaskedLM`.
struct BertForMaskedLM {
    rt: Runtime,
    cfg: Rc<BertConfig>,
    word_embeddings: Tensor,
    position_embeddings: Tensor,
    token_type_embeddings: Tensor,
    emb_layer_norm: LayerNorm,
    /// buffer `position_ids`: `torch.arange(max_pos).expand((1, -1))`
    position_ids: Tensor,
    /// buffer `token_type_ids`: `torch.zeros((1, max_pos), dtype=torch.long)`
    token_type_ids: Tensor,
    /// shared with the recomputation closures of checkpointed layers
    layers: Vec<Rc<Layer>>,
    /// per layer: `BertLayer.gradient_checkpointing`
    checkpointed: Vec<bool>,
    /// `transform.dense` / `lm_head.dense`
    head_dense: Linear,
    /// `transform.LayerNorm` / `lm_head.layer_norm`
    head_layer_norm: LayerNorm,
    /// `decoder.weight` and `decoder.bias` when not tied
    decoder: Option<Linear>,
    /// the head's `bias` (`decoder.bias` when tied)
    bias: Tensor,
    training: bool,
    /// forward hooks on the model and its layers (FSDP)
    hooks: Option<Rc<dyn super::ModuleHooks>>,
}

/// `F.embedding(indices, weight)` as ATen's `embedding` runs it for
/// indices of more than one dimension: `weight.index_select(0,
/// indices.reshape(-1)).view(...)`. The reshape copies indices that cannot
/// be flattened as a view (an expanded `token_type_ids`) into a temporary
/// that dies with the op; the node saves the original indices.
fn embedding(weight: &Tensor, indices: &Tensor) -> Result<Tensor> {
    let flat = if indices.dim() > 1 {
        Some(indices.reshape(&[-1])?)
    } else {
        None
    };
    let out = Tensor::embedding(weight, indices)?;
    drop(flat);
    Ok(out)
}

impl Layer {
    /// Its parameters (`named_parameters()` order).
    fn params(&self, v: &mut Vec<Tensor>) {
        for lin in [
            &self.query,
            &self.key,
            &self.value,
            &self.attention_output.dense,
        ] {
            v.push(lin.weight.clone());
            v.extend(lin.bias.clone());
        }
        v.extend(self.attention_output.layer_norm.parameters());
        for lin in [&self.intermediate, &self.output.dense] {
            v.push(lin.weight.clone());
            v.extend(lin.bias.clone());
        }
        v.extend(self.output.layer_norm.parameters());
    }

    /// `BertSelfAttention.forward` with `sdpa_attention_forward`.
    fn self_attention(&self, cfg: &BertConfig, hidden: &Tensor, training: bool) -> Result<Tensor> {
        let (b, s) = (hidden.size(0), hidden.size(1));
        let hd = cfg.head_dim();
        let shape = [b, s, -1, hd];
        // query_layer = self.query(hidden_states).view(*hidden_shape).transpose(1, 2), same for key, value
        let proj = |name: &str, lin: &Linear| -> Result<Tensor> {
            let y = lin.forward(name, hidden)?;
            Ok(y.view(&shape)?.transpose(1, 2))
        };
        let q = proj("query", &self.query)?;
        let k = proj("key", &self.key)?;
        let v = proj("value", &self.value)?;
        // is_causal = q_length > 1 and attention_mask is None and module.is_causal (False)
        let out = Tensor::sdpa(
            &q,
            &k,
            &v,
            &SdpaArgs {
                attn_mask: None,
                dropout_p: if training {
                    cfg.attention_probs_dropout_prob
                } else {
                    0.0
                },
                is_causal: false,
                scale: Some((hd as f64).powf(-0.5)),
                enable_gqa: false,
            },
        )?;
        // sdpa_attention_forward returns attn_output.transpose(1, 2).contiguous()
        let t = out.transpose(1, 2);
        drop(out);
        let mut o = t.contiguous()?;
        drop(t);
        // attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        o = o.reshape(&[b, s, -1])?.contiguous()?;
        // query_layer, key_layer, value_layer die at the return
        drop(q);
        drop(k);
        drop(v);
        Ok(o)
    }

    /// `BertSelfOutput.forward` / `BertOutput.forward`:
    /// `LayerNorm(dropout(dense(hidden_states)) + input_tensor)`.
    fn dense_norm(
        cfg: &BertConfig,
        m: &DenseNorm,
        hidden: &Tensor,
        input: &Tensor,
        training: bool,
    ) -> Result<Tensor> {
        let rt = hidden.runtime().clone();
        let mut h = m.dense.forward("dense", hidden)?;
        h = rt.in_module("dropout", || {
            Ok::<_, ModelError>(h.dropout(cfg.hidden_dropout_prob, training)?)
        })?;
        let sum = h.add(input)?;
        let out = rt.in_module("LayerNorm", || m.layer_norm.layer_norm(&sum))?;
        // the argument dies when the call returns, then the rebinding frees h
        drop(sum);
        drop(h);
        Ok(out)
    }

    /// `BertLayer.forward` (`apply_chunking_to_forward` with chunk size 0
    /// calls `feed_forward_chunk` directly).
    fn forward(&self, cfg: &BertConfig, hidden: &Tensor, training: bool) -> Result<Tensor> {
        let rt = hidden.runtime().clone();
        // BertAttention.forward
        let attention_output = rt.in_module("attention", || -> Result<Tensor> {
            let a = rt.in_module("self", || self.self_attention(cfg, hidden, training))?;
            let out = rt.in_module("output", || {
                Layer::dense_norm(cfg, &self.attention_output, &a, hidden, training)
            })?;
            drop(a);
            Ok(out)
        })?;
        // feed_forward_chunk
        let intermediate = rt.in_module("intermediate", || -> Result<Tensor> {
            let mut x = self.intermediate.forward("dense", &attention_output)?;
            x = rt.in_module("intermediate_act_fn", || cfg.act.forward(&x))?;
            Ok(x)
        })?;
        let layer_output = rt.in_module("output", || {
            Layer::dense_norm(
                cfg,
                &self.output,
                &intermediate,
                &attention_output,
                training,
            )
        })?;
        drop(intermediate);
        drop(attention_output);
        Ok(layer_output)
    }
}

impl BertForMaskedLM {
    fn new(rt: &Runtime, cfg: BertConfig, w: DType) -> Result<Self> {
        let (h, inter) = (cfg.hidden_size, cfg.intermediate_size);
        // in `BertEmbeddings.__init__`'s order, before the encoder: the CPU
        // tensors glibc maps take the address space in it (`driver_va.rs`,
        // rule 7)
        let word_embeddings = parameter(rt, &[cfg.vocab_size, h], w)?;
        let max_pos = cfg.max_position_embeddings;
        let position_embeddings = parameter(rt, &[max_pos, h], w)?;
        let token_type_embeddings = parameter(rt, &[cfg.type_vocab_size, h], w)?;
        let emb_layer_norm = LayerNorm::new_in(rt, &[h], w)?;
        // torch.arange(max_pos).expand((1, -1)): a (1, max_pos) view of
        // max_pos int64 (stride 0 on the new dim), built on the CPU
        let position_ids = rt
            .empty(&[max_pos], DType::I64, Device::Cpu)?
            .expand(&[1, -1])?;
        let token_type_ids = rt.empty(&[1, max_pos], DType::I64, Device::Cpu)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers as usize);
        for i in 0..cfg.num_hidden_layers {
            layers.push(Rc::new(Layer {
                name: format!("layer.{i}"),
                query: Linear::new(rt, h, h, true, w)?,
                key: Linear::new(rt, h, h, true, w)?,
                value: Linear::new(rt, h, h, true, w)?,
                attention_output: DenseNorm {
                    dense: Linear::new(rt, h, h, true, w)?,
                    layer_norm: LayerNorm::new_in(rt, &[h], w)?,
                },
                intermediate: Linear::new(rt, h, inter, true, w)?,
                output: DenseNorm {
                    dense: Linear::new(rt, inter, h, true, w)?,
                    layer_norm: LayerNorm::new_in(rt, &[h], w)?,
                },
            }));
        }
        Ok(BertForMaskedLM {
            rt: rt.clone(),
            word_embeddings,
            position_embeddings,
            token_type_embeddings,
            emb_layer_norm,
            position_ids: position_ids.detach(),
            token_type_ids,
            checkpointed: vec![false; layers.len()],
            layers,
            head_dense: Linear::new(rt, h, h, true, w)?,
            head_layer_norm: LayerNorm::new_in(rt, &[h], w)?,
            // tied, the decoder's own weight is made and freed when
            // `post_init` ties it, as the causal models' heads
            decoder: Some(Linear::new(rt, h, cfg.vocab_size, true, w)?)
                .filter(|_| !cfg.tie_word_embeddings),
            bias: parameter(rt, &[cfg.vocab_size], w)?,
            cfg: Rc::new(cfg),
            training: false,
            hooks: None,
        })
    }

    fn base_name(&self) -> &'static str {
        match self.cfg.flavor {
            Flavor::Bert => "bert",
            Flavor::Roberta => "roberta",
        }
    }

    /// Parameters and buffers in `Module._apply` order: each module's
    /// children in registration order, then its own parameters, then its
    /// buffers (BERT registers `position_embeddings` before
    /// `token_type_embeddings`; RoBERTa after the LayerNorm).
    fn tensors_in_apply_order(&mut self) -> Result<Vec<(&mut Tensor, Category)>> {
        let p = Category::Parameter;
        let mut v: Vec<(&mut Tensor, Category)> = Vec::new();
        match self.cfg.flavor {
            Flavor::Bert => {
                v.push((&mut self.word_embeddings, p));
                v.push((&mut self.position_embeddings, p));
                v.push((&mut self.token_type_embeddings, p));
                for t in self.emb_layer_norm.params_mut() {
                    v.push((t, p));
                }
            }
            Flavor::Roberta => {
                v.push((&mut self.word_embeddings, p));
                v.push((&mut self.token_type_embeddings, p));
                for t in self.emb_layer_norm.params_mut() {
                    v.push((t, p));
                }
                v.push((&mut self.position_embeddings, p));
            }
        }
        v.push((&mut self.position_ids, Category::Buffer));
        v.push((&mut self.token_type_ids, Category::Buffer));
        for l in &mut self.layers {
            let l = Rc::get_mut(l).ok_or_else(|| {
                ModelError::Unsupported("model.cuda() while a checkpointed forward is alive".into())
            })?;
            for lin in [&mut l.query, &mut l.key, &mut l.value] {
                v.extend(lin.params_mut().map(|t| (t, p)));
            }
            v.extend(l.attention_output.dense.params_mut().map(|t| (t, p)));
            for t in l.attention_output.layer_norm.params_mut() {
                v.push((t, p));
            }
            v.extend(l.intermediate.params_mut().map(|t| (t, p)));
            v.extend(l.output.dense.params_mut().map(|t| (t, p)));
            for t in l.output.layer_norm.params_mut() {
                v.push((t, p));
            }
        }
        v.extend(self.head_dense.params_mut().map(|t| (t, p)));
        for t in self.head_layer_norm.params_mut() {
            v.push((t, p));
        }
        // decoder: its weight (tied: already moved with the word embeddings)
        // and bias (tied: the head's `bias`, moved here), then the head's own bias
        if let Some(d) = &mut self.decoder {
            v.extend(d.params_mut().map(|t| (t, p)));
        }
        v.push((&mut self.bias, p));
        Ok(v)
    }

    fn decoder_weight(&self) -> &Tensor {
        self.decoder
            .as_ref()
            .map(|d| &d.weight)
            .unwrap_or(&self.word_embeddings)
    }

    fn decoder_bias(&self) -> &Tensor {
        self.decoder
            .as_ref()
            .and_then(|d| d.bias.as_ref())
            .unwrap_or(&self.bias)
    }

    /// `RobertaEmbeddings.create_position_ids_from_input_ids(input_ids,
    /// padding_idx, 0)`:
    /// `mask = input_ids.ne(padding_idx).int()`;
    /// `incremental_indices = (torch.cumsum(mask, dim=1).type_as(mask) + 0) * mask`;
    /// `return incremental_indices.long() + padding_idx`.
    fn roberta_position_ids(&self, input_ids: &Tensor) -> Result<Tensor> {
        let ne = input_ids.ne_scalar(self.cfg.pad_token_id as f64)?;
        let mask = ne.to_dtype(DType::I32)?;
        drop(ne);
        // (cumsum_out scans an int64 copy of the int32 mask, freed when the
        // kernel returns)
        let cs = mask.cumsum(1)?;
        let typed = cs.to_dtype(mask.dtype())?;
        drop(cs);
        let plus = typed.add_scalar(0.0)?;
        drop(typed);
        let incremental = plus.mul(&mask)?;
        drop(plus);
        let long = incremental.to_dtype(DType::I64)?;
        let out = long.add_scalar(self.cfg.pad_token_id as f64)?;
        drop(long);
        // locals die in co_varnames order: mask, incremental_indices
        drop(mask);
        drop(incremental);
        Ok(out)
    }

    /// `BertEmbeddings.forward` / `RobertaEmbeddings.forward` (no
    /// `token_type_ids`, `position_ids` nor `inputs_embeds` passed).
    fn embeddings(&self, input_ids: &Tensor, training: bool) -> Result<Tensor> {
        let rt = &self.rt;
        let (b, s) = (input_ids.size(0), input_ids.size(1));
        let position_ids = match self.cfg.flavor {
            // position_ids = self.position_ids[:, 0:seq_length]
            Flavor::Bert => self.position_ids.slice(1, Some(0), Some(s)),
            Flavor::Roberta => self.roberta_position_ids(input_ids)?,
        };
        // buffered_token_type_ids = self.token_type_ids(.to(device)).expand(position_ids.shape[0], -1)
        let expanded = self.token_type_ids.expand(&[position_ids.size(0), -1])?;
        // buffered_token_type_ids = torch.gather(buffered_token_type_ids, dim=1, index=position_ids)
        let buffered = expanded.gather(1, &position_ids)?;
        drop(expanded);
        // token_type_ids = buffered_token_type_ids.expand(batch_size, seq_length)
        let token_type_ids = buffered.expand(&[b, s])?;
        let inputs_embeds = rt.in_module("word_embeddings", || {
            embedding(&self.word_embeddings, input_ids)
        })?;
        let token_type_embeddings = rt.in_module("token_type_embeddings", || {
            embedding(&self.token_type_embeddings, &token_type_ids)
        })?;
        let mut embeddings = inputs_embeds.add(&token_type_embeddings)?;
        let position_embeddings = rt.in_module("position_embeddings", || {
            embedding(&self.position_embeddings, &position_ids)
        })?;
        embeddings = embeddings.add(&position_embeddings)?;
        embeddings = rt.in_module("LayerNorm", || self.emb_layer_norm.layer_norm(&embeddings))?;
        embeddings = rt.in_module("dropout", || {
            Ok::<_, ModelError>(embeddings.dropout(self.cfg.hidden_dropout_prob, training)?)
        })?;
        // locals die in co_varnames order: token_type_ids, position_ids,
        // inputs_embeds, buffered_token_type_ids, token_type_embeddings,
        // position_embeddings
        drop(token_type_ids);
        drop(position_ids);
        drop(inputs_embeds);
        drop(buffered);
        drop(token_type_embeddings);
        drop(position_embeddings);
        Ok(embeddings)
    }

    /// `self.layer[i](hidden_states, attention_mask, ...)` through
    /// `GradientCheckpointingLayer.__call__`: under `checkpoint(partial(
    /// BertLayer.__call__, **kwargs), hidden_states, None, None,
    /// use_reentrant=False)` when the layer is checkpointed and training.
    fn layer(&self, i: usize, hidden: &Tensor, training: bool) -> Result<Tensor> {
        let l = &self.layers[i];
        if training && self.checkpointed[i] {
            let (l, cfg) = (l.clone(), self.cfg.clone());
            return checkpointed(&self.rt, hidden, move |x: &Tensor| {
                l.forward(&cfg, x, training).map_err(|e| match e {
                    ModelError::Engine(e) => e,
                    other => EngineError::Unsupported {
                        what: other.to_string(),
                    },
                })
            });
        }
        l.forward(&self.cfg, hidden, training)
    }

    /// `BertModel.forward` / `RobertaModel.forward` (no pooler).
    fn base(&self, input_ids: &Tensor, training: bool) -> Result<Tensor> {
        let rt = &self.rt;
        let embedding_output =
            rt.in_module("embeddings", || self.embeddings(input_ids, training))?;
        // _create_attention_masks: create_bidirectional_mask(attention_mask=None)
        // is None for sdpa (no padding, no local attention)
        let mut hidden = embedding_output.clone();
        rt.in_module("encoder", || -> Result<()> {
            for (i, l) in self.layers.iter().enumerate() {
                hidden = rt.in_module(&l.name, || {
                    // the layer's forward hooks (FSDP's pre-forward may wrap the input)
                    let wrapped = match &self.hooks {
                        Some(h) => h.pre_forward(1 + i, Some(&hidden))?,
                        None => None,
                    };
                    let out = self.layer(i, wrapped.as_ref().unwrap_or(&hidden), training)?;
                    drop(wrapped);
                    if let Some(h) = &self.hooks {
                        h.post_forward(1 + i, &[&out])?;
                    }
                    Ok::<Tensor, ModelError>(out)
                })?;
            }
            Ok(())
        })?;
        // embedding_output is a local of BertModel.forward until it returns
        drop(embedding_output);
        Ok(hidden)
    }

    /// `BertOnlyMLMHead` → `BertLMPredictionHead` / `RobertaLMHead`.
    fn head(&self, seq: &Tensor) -> Result<Tensor> {
        let rt = &self.rt;
        let act = match self.cfg.flavor {
            Flavor::Bert => self.cfg.act,
            // RobertaLMHead: x = gelu(x) (activations.gelu, GELUActivation)
            Flavor::Roberta => Act::Gelu,
        };
        let (dense, act_name, ln) = match self.cfg.flavor {
            Flavor::Bert => ("dense", "transform_act_fn", "LayerNorm"),
            Flavor::Roberta => ("dense", "gelu", "layer_norm"),
        };
        let transform = || -> Result<Tensor> {
            let mut x = self.head_dense.forward(dense, seq)?;
            x = rt.in_module(act_name, || act.forward(&x))?;
            x = rt.in_module(ln, || self.head_layer_norm.layer_norm(&x))?;
            Ok(x)
        };
        let x = match self.cfg.flavor {
            Flavor::Bert => rt.in_module("transform", transform)?,
            Flavor::Roberta => transform()?,
        };
        let logits = rt.in_module("decoder", || {
            x.linear(self.decoder_weight(), Some(self.decoder_bias()))
        })?;
        drop(x);
        Ok(logits)
    }
}

impl HfModel for BertForMaskedLM {
    fn cuda(&mut self) -> Result<()> {
        for (t, cat) in self.tensors_in_apply_order()? {
            to_cuda(t, cat)?;
        }
        Ok(())
    }

    /// `named_parameters()` order: a module's own parameters before its
    /// children's (the head's `bias` comes before its transform), a tied
    /// one once.
    fn parameters(&self) -> Vec<Tensor> {
        let mut v = vec![self.word_embeddings.clone()];
        match self.cfg.flavor {
            Flavor::Bert => {
                v.push(self.position_embeddings.clone());
                v.push(self.token_type_embeddings.clone());
                v.extend(self.emb_layer_norm.parameters());
            }
            Flavor::Roberta => {
                v.push(self.token_type_embeddings.clone());
                v.extend(self.emb_layer_norm.parameters());
                v.push(self.position_embeddings.clone());
            }
        }
        for l in &self.layers {
            l.params(&mut v);
        }
        v.push(self.bias.clone());
        v.push(self.head_dense.weight.clone());
        v.extend(self.head_dense.bias.clone());
        v.extend(self.head_layer_norm.parameters());
        if let Some(d) = &self.decoder {
            v.push(d.weight.clone());
            v.extend(d.bias.clone());
        }
        v
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    fn buffers(&self) -> Option<Vec<Tensor>> {
        // the embeddings' `position_ids` and `token_type_ids`
        Some(vec![self.position_ids.clone(), self.token_type_ids.clone()])
    }

    /// Each `encoder.layer.{i}`'s parameters (`named_parameters()` order).
    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        crate::families::common::per_layer(&self.layers, |l, v| l.params(v))
    }

    fn set_module_hooks(&mut self, hooks: Rc<dyn super::ModuleHooks>) -> Result<()> {
        self.hooks = Some(hooks);
        Ok(())
    }

    /// `_set_gradient_checkpointing(every_n_layers=k)`: the `BertLayer`s are
    /// the `GradientCheckpointingLayer`s, counted in order (`use_cache` is
    /// already False for an encoder; `enable_input_require_grads` hooks the
    /// word embeddings, whose output already requires grad).
    fn enable_gradient_checkpointing(&mut self, which: &Checkpointing) -> Result<()> {
        for (i, c) in self.checkpointed.iter_mut().enumerate() {
            *c = which.applies(i);
        }
        Ok(())
    }

    fn forward(&self, inputs: &Inputs) -> Result<ModelOutput> {
        let Some(ids) = &inputs.input_ids else {
            return Err(ModelError::Unsupported(format!(
                "{} needs input_ids",
                self.cfg.flavor_name()
            )));
        };
        if ids.dim() != 2 {
            return Err(ModelError::Unsupported(format!(
                "input_ids of shape {:?} (expected (batch, seq))",
                ids.sizes()
            )));
        }
        let s = ids.size(1);
        let max = match self.cfg.flavor {
            Flavor::Bert => self.cfg.max_position_embeddings,
            // positions run from padding_idx + 1
            Flavor::Roberta => self.cfg.max_position_embeddings - self.cfg.pad_token_id - 1,
        };
        if s > max {
            return Err(ModelError::Unsupported(format!(
                "sequence length {s} > the {max} positions {} can embed",
                self.cfg.flavor_name()
            )));
        }
        let rt = &self.rt;
        let training = self.training;
        if let Some(h) = &self.hooks {
            h.pre_forward(0, None)?;
        }
        let sequence_output = rt.in_module(self.base_name(), || self.base(ids, training))?;
        let head_name = match self.cfg.flavor {
            Flavor::Bert => "cls.predictions",
            Flavor::Roberta => "lm_head",
        };
        let prediction_scores = rt.in_module(head_name, || self.head(&sequence_output))?;
        let loss = match &inputs.labels {
            // CrossEntropyLoss()(prediction_scores.view(-1, vocab_size), labels.view(-1))
            Some(labels) => {
                let lg = prediction_scores.view(&[-1, self.cfg.vocab_size])?;
                let lb = labels.view(&[-1])?;
                let l = lg.cross_entropy(&lb)?;
                drop((lg, lb));
                Some(l)
            }
            None => None,
        };
        // outputs and sequence_output die at the return
        drop(sequence_output);
        if let Some(h) = &self.hooks {
            // the output's tensors, flattened (`loss`, then `logits`)
            let outs: Vec<&Tensor> = loss
                .iter()
                .chain(std::iter::once(&prediction_scores))
                .collect();
            h.post_forward(0, &outs)?;
        }
        Ok(ModelOutput {
            loss,
            logits: Some(prediction_scores),
            retained: Vec::new(),
        })
    }
}

impl BertConfig {
    fn flavor_name(&self) -> &'static str {
        match self.flavor {
            Flavor::Bert => "bert",
            Flavor::Roberta => "roberta",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Task;

    fn cfg(model_type: &str, extra: &str) -> HfConfig {
        HfConfig::parse(&format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 40{extra}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn config_defaults_per_family() {
        let b = BertConfig::from_hf(&cfg("bert", "")).unwrap();
        assert_eq!(
            (b.flavor, b.pad_token_id, b.type_vocab_size),
            (Flavor::Bert, 0, 2)
        );
        assert_eq!(b.act, Act::Gelu);
        let r =
            BertConfig::from_hf(&HfConfig::parse(r#"{"model_type": "roberta"}"#).unwrap()).unwrap();
        assert_eq!(
            (r.flavor, r.pad_token_id, r.vocab_size),
            (Flavor::Roberta, 1, 50265)
        );
    }

    #[test]
    fn unmodelled_fields_are_refused() {
        for extra in [
            r#", "is_decoder": true"#,
            r#", "chunk_size_feed_forward": 64"#,
            r#", "position_embedding_type": "relative_key""#,
            r#", "num_attention_heads": 5"#,
            r#", "hidden_act": "mish""#,
        ] {
            assert!(BertConfig::from_hf(&cfg("bert", extra)).is_err(), "{extra}");
        }
        assert!(BertConfig::from_hf(&cfg("roberta", r#", "pad_token_id": 99"#)).is_err());
        let rt = Runtime::default();
        assert!(crate::families::build(&rt, &cfg("bert", ""), Task::Causal, DType::F32).is_err());
    }

    #[test]
    fn load_moves_buffers_after_the_embedding_parameters_and_tied_weights_once() {
        let rt = Runtime::default();
        let mut m = crate::families::build(&rt, &cfg("bert", ""), Task::Mlm, DType::F32).unwrap();
        m.cuda().unwrap();
        let sizes: Vec<u64> = rt.live_allocations().iter().map(|r| r.bytes).collect();
        // word, position, token_type, LayerNorm w/b, then the two int64 buffers
        assert_eq!(
            sizes[..7],
            [
                100 * 64 * 4,
                40 * 64 * 4,
                2 * 64 * 4,
                256,
                256,
                40 * 8,
                40 * 8
            ]
        );
        // last: the decoder's (tied) bias, once
        assert_eq!(*sizes.last().unwrap(), 100 * 4);
        let ps = m.parameters();
        assert_eq!(
            sizes.len(),
            ps.len() + 2,
            "every parameter once, plus the buffers"
        );
        // the head's bias comes before its transform in named_parameters()
        assert_eq!(ps[ps.len() - 5].sizes(), &[100]);

        let rt = Runtime::default();
        let mut r =
            crate::families::build(&rt, &cfg("roberta", ""), Task::Mlm, DType::BF16).unwrap();
        r.cuda().unwrap();
        let sizes: Vec<u64> = rt.live_allocations().iter().map(|r| r.bytes).collect();
        assert_eq!(
            sizes[..7],
            [
                100 * 64 * 2,
                2 * 64 * 2,
                128,
                128,
                40 * 64 * 2,
                40 * 8,
                40 * 8
            ]
        );
    }

    #[test]
    fn expanded_token_type_indices_are_copied_for_the_lookup() {
        let rt = Runtime::default();
        let w = rt.empty(&[2, 64], DType::F32, Device::Cuda).unwrap();
        let idx = rt.empty(&[1, 256], DType::I64, Device::Cuda).unwrap();
        let ex = idx.expand(&[8, 256]).unwrap();
        let base = rt.memory_allocated();
        let out = embedding(&w, &ex).unwrap();
        // the copy (8*256 int64) came and went; the output stays
        assert_eq!(rt.memory_allocated() - base, 8 * 256 * 64 * 4);
        assert_eq!(rt.max_memory_allocated() - base, 8 * 256 * 64 * 4 + 16384);
        drop(out);
        let base = rt.max_memory_allocated();
        let out = embedding(&w, &idx).unwrap();
        assert!(rt.max_memory_allocated() <= base.max(rt.memory_allocated()));
        drop(out);
    }

    #[test]
    fn training_step_runs_and_checkpointing_lowers_the_peak() {
        let peak = |ckpt: bool| -> i64 {
            let rt = Runtime::default();
            let mut m =
                crate::families::build(&rt, &cfg("bert", ""), Task::Mlm, DType::F32).unwrap();
            m.cuda().unwrap();
            if ckpt {
                m.enable_gradient_checkpointing(&Checkpointing::Every(1))
                    .unwrap();
            }
            m.set_training(true);
            let ids = rt.empty(&[2, 16], DType::I64, Device::Cuda).unwrap();
            let inputs = Inputs {
                labels: Some(ids.clone_tensor().unwrap()),
                input_ids: Some(ids),
                pixel_values: None,
            };
            rt.reset_peak_memory_stats();
            let out = m.forward(&inputs).unwrap();
            let p = rt.max_memory_allocated();
            assert!(out.retained.is_empty());
            let loss = out.loss.unwrap();
            drop(out.logits);
            loss.backward().unwrap();
            assert!(m.parameters().iter().all(|p| p.grad().is_some()));
            p
        };
        assert!(peak(true) < peak(false));
    }

    #[test]
    fn roberta_position_ids_allocate_each_step() {
        let rt = Runtime::default();
        let m = BertForMaskedLM::new(
            &rt,
            BertConfig::from_hf(&cfg("roberta", "")).unwrap(),
            DType::F32,
        )
        .unwrap();
        let ids = rt.empty(&[8, 32], DType::I64, Device::Cuda).unwrap();
        let base = rt.memory_allocated();
        let pos = m.roberta_position_ids(&ids).unwrap();
        assert_eq!(pos.dtype(), DType::I64);
        assert_eq!(rt.memory_allocated() - base, 8 * 32 * 8);
        drop(pos);
        assert_eq!(rt.memory_allocated(), base);
    }
}
