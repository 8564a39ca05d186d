//! `GenerationMixin.generate` of transformers 5.x for a decoder-only model
//! with greedy search: `model.generate(input_ids, max_new_tokens=N,
//! min_new_tokens=N, do_sample=False)` (`generation/utils.py`: `generate`,
//! `_prepare_special_tokens`, `_prepare_attention_mask_for_generation`,
//! `_prepare_position_ids_for_generation`, `_sample`, `_prefill`,
//! `prepare_inputs_for_generation`, `_update_model_kwargs_for_generation`;
//! `logits_process.py`'s `MinLengthLogitsProcessor` and
//! `MinNewTokensLengthLogitsProcessor`; `stopping_criteria.py`'s
//! `MaxLengthCriteria` and `EosTokenCriteria`), every tensor it makes on the
//! device, created and released where CPython creates and releases it.

use std::cell::RefCell;

use vramscope_engine::{DType, Device, Runtime, Tensor};

use super::common::{GenStep, KvCache, Masks};
use crate::config::HfConfig;
use crate::error::Result;
use crate::workload::CacheKind;

/// The special tokens of the model's generation config
/// (`GenerationConfig.from_model_config`: the config's `bos_token_id`,
/// `eos_token_id`, `pad_token_id`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// `bos_token_id` is set
    pub bos: bool,
    /// `eos_token_id`: how many ids (an int is one)
    pub eos: Option<i64>,
    /// `pad_token_id` is set
    pub pad: bool,
}

impl Tokens {
    /// The tokens of the config (`GenerationConfig.from_model_config`:
    /// `bos_token_id`, `eos_token_id` (an int or a list), `pad_token_id`;
    /// `null` is none), `defaults` (the config class's) where absent.
    pub(crate) fn of_config(c: &HfConfig, defaults: Tokens) -> Result<Tokens> {
        // (`raw`: an explicit `null` is none, where `get` reads it as absent)
        let present = |key: &str, default: bool| match c.raw().get(key) {
            None => default,
            Some(v) => !v.is_null(),
        };
        let eos = match c.raw().get("eos_token_id") {
            None => defaults.eos,
            Some(v) if v.is_null() => None,
            Some(serde_json::Value::Array(a)) => Some(a.len() as i64),
            Some(_) => Some(1),
        };
        Ok(Tokens {
            bos: present("bos_token_id", defaults.bos),
            eos,
            pad: present("pad_token_id", defaults.pad),
        })
    }
}

/// What `generate()` is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateSpec {
    /// `max_new_tokens` = `min_new_tokens`
    pub new_tokens: i64,
    /// the cache
    pub cache: CacheKind,
    /// a static cache's `max_cache_len` where it is not `generate()`'s
    /// `max_length - 1` (prompt + N - 1): a shorter run standing in for the
    /// first steps of a longer one
    pub max_cache_len: Option<i64>,
}

impl GenerateSpec {
    /// A static cache's `max_cache_len` for a prompt of `prompt` tokens.
    fn static_len(&self, prompt: i64) -> i64 {
        self.max_cache_len.unwrap_or(prompt + self.new_tokens - 1)
    }
}

/// `torch.tensor(v, device="cuda")` of `n` int64 elements (`None`: a 0-dim
/// tensor): a copy of a CPU tensor.
fn device_ids(rt: &Runtime, n: Option<i64>) -> Result<Tensor> {
    match n {
        None => Ok(rt.empty(&[], DType::I64, Device::Cuda)?),
        Some(n) => Ok(rt.empty(&[n], DType::I64, Device::Cuda)?),
    }
}

/// Where `generate()` is, for a caller that marks its phases and steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerateEvent {
    /// the prefill's forward returned (a forward hook's view)
    PrefillDone,
    /// the loop's iteration `k` (1, 2, ...) begins:
    /// `prepare_inputs_for_generation` of its forward (iteration 0 is the
    /// prefill's)
    Step(i64),
    /// a decode forward returned (a forward hook's view)
    ForwardDone,
    /// the loop ended (its last step's stopping check returned); the locals
    /// of `generate` die next
    LoopDone,
    /// before anything runs: a sliding window of the cache (once per
    /// distinct window); a step whose keys reach it changes what the step
    /// allocates
    Window(i64),
}

/// A forward of the model on `(input_ids, step)`: the logits of the last
/// position, `(batch, 1, vocab)`.
pub(crate) type StepForward<'a> = dyn Fn(&Tensor, &GenStep) -> Result<Tensor> + 'a;

/// The model `generate()` drives: its cache's layers (`Some(window)`: a
/// sliding layer), its vocabulary, its special tokens and its forward.
pub(crate) struct Generator<'a> {
    pub(crate) rt: &'a Runtime,
    /// `config.vocab_size` (the logits' last dim)
    pub(crate) vocab: i64,
    /// one entry per cache layer; `Some(window)` for a sliding one
    pub(crate) cache_layers: &'a [Option<i64>],
    pub(crate) tokens: &'a Tokens,
    pub(crate) forward: &'a StepForward<'a>,
}

/// `model.generate(input_ids, max_new_tokens=N, min_new_tokens=N,
/// do_sample=False)` under `torch.no_grad()` for `model`; `on` hears where
/// it is ([`GenerateEvent`]). Returns the sequences `(batch, prompt + N)`.
pub(crate) fn generate(
    model: &Generator,
    input_ids: &Tensor,
    spec: &GenerateSpec,
    on: &mut dyn FnMut(GenerateEvent) -> Result<()>,
) -> Result<Tensor> {
    if spec.new_tokens < 1 {
        return Err(crate::error::ModelError::Unsupported(format!(
            "{} new tokens (expected at least 1)",
            spec.new_tokens
        )));
    }
    // a dynamic sliding layer's keys reach its window at iteration k once
    // prompt + k >= window; a static one (of min(window, max_cache_len)
    // tokens, max_cache_len = prompt + N - 1) is full, and rolls, once the
    // prompt + k - 1 tokens before the update reach it
    let s = input_ids.size(1);
    let mut windows: Vec<i64> = match spec.cache {
        CacheKind::Dynamic => model.cache_layers.iter().flatten().copied().collect(),
        CacheKind::Static => model
            .cache_layers
            .iter()
            .flatten()
            .map(|w| (*w).min(spec.static_len(s)) + 1)
            .collect(),
    };
    windows.sort_unstable();
    windows.dedup();
    for w in windows {
        on(GenerateEvent::Window(w))?;
    }
    model.rt.no_grad(|| run(model, input_ids, spec, on))
}

fn run(
    model: &Generator,
    input_ids: &Tensor,
    spec: &GenerateSpec,
    on: &mut dyn FnMut(GenerateEvent) -> Result<()>,
) -> Result<Tensor> {
    let Generator {
        rt,
        vocab,
        cache_layers,
        tokens,
        forward,
    } = *model;
    let (b, s) = (input_ids.size(0), input_ids.size(1));
    // _prepare_special_tokens: bos, eos (0-dim ids unsqueezed), pad tensors;
    // without a pad token the pad is the first eos (a view)
    let bos_t = if tokens.bos {
        Some(device_ids(rt, None)?)
    } else {
        None
    };
    let eos_t = match tokens.eos {
        Some(1) => Some(device_ids(rt, None)?.unsqueeze(0)?),
        Some(n) => Some(device_ids(rt, Some(n))?),
        None => None,
    };
    let pad_t = if tokens.pad {
        Some(device_ids(rt, None)?)
    } else {
        eos_t.as_ref().map(|e| e.select(0, 0))
    };
    if let (Some(e), Some(p)) = (&eos_t, &pad_t) {
        // torch.isin(eos_token_tensor, pad_token_tensor).any()
        let i = e.isin(p)?;
        let a = i.any_dims(&[])?;
        drop(i);
        drop(a);
    }
    if let Some(e) = &eos_t {
        // (eos_token_tensor < 0).any()
        let l = e.lt_scalar(0.0)?;
        let a = l.any_dims(&[])?;
        drop(l);
        drop(a);
    }
    // has_right_padding = torch.sum(inputs_tensor[:, -1] == pad) > 0: a
    // local of `generate`, alive until it returns
    let has_right_padding = match &pad_t {
        Some(p) if b > 1 => {
            let eq = input_ids.select(1, -1).eq_tensor(p)?;
            let sum = eq.sum()?;
            drop(eq);
            let gt = sum.gt_scalar(0.0)?;
            drop(sum);
            Some(gt)
        }
        _ => None,
    };
    let attention_mask =
        attention_mask_for_generation(rt, input_ids, eos_t.as_ref(), pad_t.as_ref())?;
    // position_ids = attention_mask.long().cumsum(-1) - 1; .masked_fill(attention_mask == 0, 0)
    let position_ids = {
        let cs = attention_mask.cumsum(-1)?;
        let sub = cs.sub_scalar(1.0)?;
        drop(cs);
        let eq = attention_mask.eq_scalar(0.0)?;
        let p = sub.masked_fill(&eq)?;
        drop(eq);
        drop(sub);
        p
    };
    // _prepare_cache_for_generation: a StaticCache of max_length - 1 tokens
    let cache = RefCell::new(match spec.cache {
        CacheKind::Dynamic => KvCache::new(cache_layers),
        CacheKind::Static => KvCache::new_static(cache_layers, spec.static_len(s)),
    });
    // prepare_inputs_for_generation: a compileable cache's masks are made
    // there (after the ids and positions), before the forward
    let prepare_masks = |q_len: i64, mask: &Tensor| -> Result<Option<Masks>> {
        match spec.cache {
            CacheKind::Dynamic => Ok(None),
            CacheKind::Static => {
                Masks::for_generate(rt, cache_layers, (b, q_len), mask, &cache.borrow()).map(Some)
            }
        }
    };
    // _sample
    let max_length = s + spec.new_tokens;
    let mut unfinished = rt.ones(&[b], DType::I64, Device::Cuda)?;
    // _prefill: prepare_inputs_for_generation clones input_ids
    let mut outputs = {
        let ids = input_ids.clone_tensor()?;
        let prepared = prepare_masks(s, &attention_mask)?;
        let logits = forward(
            &ids,
            &GenStep {
                attention_mask: &attention_mask,
                position_ids: &position_ids,
                cache: &cache,
                decode: false,
                prepared: prepared.as_ref(),
            },
        )?;
        on(GenerateEvent::PrefillDone)?;
        // `_prefill`'s model_inputs die in insertion order
        drop(ids);
        drop(prepared);
        Some(logits)
    };
    // `generate`'s model_kwargs keep the first mask and positions; `_sample`'s rebind
    let mut cur_ids = input_ids.clone();
    let mut cur_mask = attention_mask.clone();
    let mut cur_pos = position_ids.clone();
    // (input_ids, position_ids, then the 2-D mask, or a static cache's masks
    // in its place: the 2-D mask is then model_kwargs' alone)
    let mut model_inputs: Option<(Tensor, Tensor, Option<Tensor>, Option<Masks>)> = None;
    // `_sample`'s locals, rebound each step (the old value dies then)
    let mut next_token_logits: Tensor;
    let mut next_token_scores: Tensor;
    let mut next_tokens: Tensor;
    let mut step = 0;
    loop {
        if outputs.is_none() {
            step += 1;
            on(GenerateEvent::Step(step))?;
            // prepare_inputs_for_generation(input_ids, next_sequence_length=1):
            // input_ids[:, -1:].clone(), position_ids[..., -1:].clone(); the
            // previous dict dies when `model_inputs` is rebound
            let ids = cur_ids.slice(1, Some(-1), None).clone_tensor()?;
            let pos = cur_pos.slice(1, Some(-1), None).clone_tensor()?;
            let prepared = prepare_masks(1, &cur_mask)?;
            let mask = prepared.is_none().then(|| cur_mask.clone());
            model_inputs = Some((ids, pos, mask, prepared));
            let (ids, pos, _, prepared) = model_inputs.as_ref().expect("set above");
            outputs = Some(forward(
                ids,
                &GenStep {
                    attention_mask: &cur_mask,
                    position_ids: pos,
                    cache: &cache,
                    decode: true,
                    prepared: prepared.as_ref(),
                },
            )?);
            on(GenerateEvent::ForwardDone)?;
        }
        // _update_model_kwargs_for_generation: the position ids and the mask
        // grow by one; the old ones die with its locals
        {
            let old_pos = cur_pos.clone();
            let next = {
                let ar = rt.arange(1, DType::I64, Device::Cuda)?;
                let a = ar.add(&old_pos.slice(1, Some(-1), None))?;
                drop(ar);
                let n = a.add_scalar(1.0)?;
                drop(a);
                n
            };
            let np = Tensor::cat(&[&old_pos, &next], -1)?;
            drop(next);
            cur_pos = np;
            let old_mask = cur_mask.clone();
            let np = {
                let ones = old_mask.new_full(&[b, 1], DType::I64)?;
                let c = Tensor::cat(&[&old_mask, &ones], -1)?;
                drop(ones);
                c
            };
            cur_mask = np;
            drop(old_pos);
            drop(old_mask);
        }
        let logits = outputs.as_ref().expect("set above");
        // outputs.logits[:, -1].to(copy=True, dtype=torch.float32)
        let last = logits.select(1, -1);
        let ntl = if last.dtype() == DType::F32 {
            last.clone_tensor()?
        } else {
            last.to_dtype(DType::F32)?
        };
        drop(last);
        next_token_logits = ntl;
        let ntl = &next_token_logits;
        let scores = match &eos_t {
            Some(eos) => {
                let cur_len = cur_ids.size(1);
                // MinLengthLogitsProcessor(min_length = prompt + N)
                let p1 = {
                    let vocab_t = rt.arange(vocab, DType::I64, Device::Cuda)?;
                    let mask = vocab_t.isin(eos)?;
                    let mut sp = ntl.clone_tensor()?;
                    if cur_len < max_length {
                        sp = where_neg_inf(rt, &mask, ntl)?;
                    }
                    drop(vocab_t);
                    drop(mask);
                    sp
                };
                // MinNewTokensLengthLogitsProcessor(prompt, N)
                let p2 = {
                    let mut sp = p1.clone_tensor()?;
                    let vocab_t = rt.arange(vocab, DType::I64, Device::Cuda)?;
                    let mask = vocab_t.isin(eos)?;
                    if cur_len - s < spec.new_tokens {
                        sp = where_neg_inf(rt, &mask, &p1)?;
                    }
                    drop(vocab_t);
                    drop(mask);
                    sp
                };
                drop(p1);
                p2
            }
            None => ntl.clone(),
        };
        next_token_scores = scores;
        next_tokens = next_token_scores.argmax_dim(-1)?;
        if let (Some(_), Some(pad)) = (&eos_t, &pad_t) {
            // next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)
            let a = next_tokens.mul(&unfinished)?;
            let r = unfinished.rsub_scalar(1.0)?;
            let pm = pad.mul(&r)?;
            drop(r);
            let n = a.add(&pm)?;
            drop(a);
            drop(pm);
            next_tokens = n;
        }
        cur_ids = Tensor::cat(&[&cur_ids, &next_tokens.unsqueeze(1)?], -1)?;
        // unfinished_sequences & ~stopping_criteria(input_ids, scores)
        let is_done = {
            let d0 = rt.empty(&[b], DType::Bool, Device::Cuda)?;
            let m = rt.empty(&[b], DType::Bool, Device::Cuda)?;
            let d1 = d0.bitwise_or(&m)?;
            drop(m);
            drop(d0);
            match &eos_t {
                Some(eos) => {
                    let e = {
                        let i = cur_ids.slice(1, Some(-1), None).isin(eos)?;
                        let a = i.any_dims(&[-1])?;
                        drop(i);
                        a
                    };
                    let d2 = d1.bitwise_or(&e)?;
                    drop(e);
                    drop(d1);
                    d2
                }
                None => d1,
            }
        };
        let not_done = is_done.logical_not()?;
        drop(is_done);
        let nu = unfinished.bitwise_and(&not_done)?;
        drop(not_done);
        unfinished = nu;
        // StopCheck: bool(unfinished_sequences.max() == 0)
        {
            let m = unfinished.max_all()?;
            let e = m.eq_scalar(0.0)?;
            drop(m);
            drop(e);
        }
        // del outputs
        outputs = None;
        if cur_ids.size(1) >= max_length {
            break;
        }
    }
    on(GenerateEvent::LoopDone)?;
    drop(model_inputs);
    drop(next_token_logits);
    drop(next_token_scores);
    drop(next_tokens);
    drop(unfinished);
    drop(cache);
    drop(attention_mask);
    drop(position_ids);
    drop(has_right_padding);
    drop(bos_t);
    drop(pad_t);
    drop(eos_t);
    Ok(cur_ids)
}

/// `torch.where(eos_token_mask, -math.inf, scores)` (`where.ScalarSelf`):
/// the scalar becomes a 0-dim device tensor of the scores' options
/// (`at::scalar_tensor`) for the call.
fn where_neg_inf(rt: &Runtime, mask: &Tensor, scores: &Tensor) -> Result<Tensor> {
    let sc = rt.scalar_tensor(scores.dtype(), Device::Cuda)?;
    let out = Tensor::where_(&mask.unsqueeze(0)?, &sc, scores)?;
    drop(sc);
    Ok(out)
}

/// `_prepare_attention_mask_for_generation`: `torch.ones` of the inputs'
/// shape when there is no pad token; otherwise the padding inference
/// (`isin(...).any()`, `~`, `*`, `ne(...).long()`), whose operands die when
/// it returns.
fn attention_mask_for_generation(
    rt: &Runtime,
    input_ids: &Tensor,
    eos: Option<&Tensor>,
    pad: Option<&Tensor>,
) -> Result<Tensor> {
    let default = rt.ones(input_ids.sizes(), DType::I64, Device::Cuda)?;
    let Some(pad) = pad else {
        return Ok(default);
    };
    let in_inputs = {
        let i = input_ids.isin(pad)?;
        let a = i.any_dims(&[])?;
        drop(i);
        a
    };
    let not_eq = match eos {
        Some(e) => {
            let i = e.isin(pad)?;
            let a = i.any_dims(&[])?;
            drop(i);
            let n = a.logical_not()?;
            drop(a);
            Some(n)
        }
        None => None,
    };
    let can_infer = match &not_eq {
        Some(n) => in_inputs.mul(n)?,
        None => in_inputs.mul_scalar(1.0)?,
    };
    let from_padding = {
        let ne = input_ids.ne_tensor(pad)?;
        let l = ne.to_dtype(DType::I64)?;
        drop(ne);
        l
    };
    let mask = {
        let a = from_padding.mul(&can_infer)?;
        let nc = can_infer.logical_not()?;
        let b = default.mul(&nc)?;
        drop(nc);
        let m = a.add(&b)?;
        drop(a);
        drop(b);
        m
    };
    drop(default);
    drop(in_inputs);
    drop(not_eq);
    drop(can_infer);
    drop(from_padding);
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::Tokens;
    use crate::{estimate, CacheKind, EstimateOptions, HfConfig, LoraSpec, Task, Workload};

    fn llama() -> HfConfig {
        HfConfig::parse(
            r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
                "num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100}"#,
        )
        .unwrap()
    }

    fn err(config: &HfConfig, w: &Workload) -> String {
        match estimate(config, w, &EstimateOptions::default()) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn generate_grows_the_sequences_and_frees_the_rest() {
        let w = Workload::generate(Task::Causal, 2, 8, 3);
        let est = estimate(&llama(), &w, &EstimateOptions::default()).unwrap();
        let names: Vec<&str> = est.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["load", "prefill", "decode"]);
        // after generate returns: the load's tensors, the cuBLAS workspace of
        // the first matmul (32 MiB on an H100) and the (2, 11) int64 sequences
        let grown = est.phases[2].allocated_bytes - est.phases[0].allocated_bytes;
        assert_eq!(grown, (32 << 20) + 512);
    }

    #[test]
    fn gemma2_generates_with_its_logits_softcapped_and_its_pad_token() {
        let gemma2 = |cap: &str| {
            HfConfig::parse(&format!(
                r#"{{"model_type":"gemma2","hidden_size":64,"intermediate_size":128,
                "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
                "head_dim":16,"vocab_size":5000,"sliding_window":16{cap}}}"#
            ))
            .unwrap()
        };
        let w = Workload::generate(Task::Causal, 2, 8, 12);
        let o = EstimateOptions::default();
        let capped = estimate(&gemma2(""), &w, &o).unwrap();
        let plain = estimate(&gemma2(r#","final_logit_softcapping":null"#), &w, &o).unwrap();
        // `logits / cap`, `tanh`, `* cap` on each forward's (2, 1, 5000) logits
        assert!(capped.ops_simulated > plain.ops_simulated);
        assert_eq!(
            capped.phases[1].peak_allocated_bytes - plain.phases[1].peak_allocated_bytes,
            // (one fp32 (2, 1, 5000) more at the prefill's peak: 40,000 bytes rounded)
            40_448
        );
        // the pad token (gemma's 0) and bos/eos as the config class sets them
        let tokens = Tokens::of_config(
            &gemma2(r#","pad_token_id":null,"eos_token_id":[1,106]"#),
            Tokens {
                bos: true,
                eos: Some(1),
                pad: true,
            },
        )
        .unwrap();
        assert_eq!(
            tokens,
            Tokens {
                bos: true,
                eos: Some(2),
                pad: false
            }
        );
    }

    #[test]
    fn sliding_layers_past_the_window_cut_and_materialise_the_mask() {
        let mistral = |window: i64| {
            HfConfig::parse(&format!(
                r#"{{"model_type":"mistral","hidden_size":64,"intermediate_size":128,
                "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
                "vocab_size":100,"sliding_window":{window}}}"#
            ))
            .unwrap()
        };
        let w = Workload::generate(Task::Causal, 2, 8, 12);
        let o = EstimateOptions::default();
        // past the window (8 + 12 > 10) the decode forwards make more
        let past = estimate(&mistral(10), &w, &o).unwrap();
        let within = estimate(&mistral(100), &w, &o).unwrap();
        assert!(past.ops_simulated > within.ops_simulated);
        // and the prompt's forward reaches it at once (a prompt of 12, window 10)
        let long = Workload::generate(Task::Causal, 2, 12, 2);
        assert!(estimate(&mistral(10), &long, &o).is_ok());
    }

    #[test]
    fn a_static_cache_is_allocated_once_for_prompt_plus_n_minus_one_tokens() {
        let o = EstimateOptions::default();
        let st = |n| Workload {
            cache: CacheKind::Static,
            ..Workload::generate(Task::Causal, 2, 8, n)
        };
        let (a, b) = (
            estimate(&llama(), &st(3), &o).unwrap(),
            estimate(&llama(), &st(5), &o).unwrap(),
        );
        // at the prefill's end: 2 layers' keys and values of (2, 2, 8 + N - 1, 16)
        // fp32, 256 bytes a token each: two more tokens are 4 x 512 bytes
        let prefill = |e: &crate::Estimate| e.phases[1].allocated_bytes;
        assert_eq!(prefill(&b) - prefill(&a), 4 * 512);
        // a dynamic cache holds the prompt then: less
        let dy = estimate(&llama(), &Workload::generate(Task::Causal, 2, 8, 3), &o).unwrap();
        assert!(prefill(&dy) < prefill(&a));
        // the cache dies with generate(), as the dynamic one does
        assert_eq!(a.phases[2].allocated_bytes, dy.phases[2].allocated_bytes);
    }

    #[test]
    fn what_is_not_modelled_is_refused_by_name() {
        let gpt2 =
            HfConfig::parse(r#"{"model_type":"gpt2","n_embd":64,"n_layer":1,"n_head":2}"#).unwrap();
        let w = Workload::generate(Task::Causal, 1, 8, 2);
        assert!(err(&gpt2, &w).contains("generate() is modelled for llama"));
        let none = Workload {
            new_tokens: 0,
            ..w.clone()
        };
        assert!(err(&llama(), &none).contains("0 new tokens"));
        let lora = |targets: &[&str]| Workload {
            lora: Some(LoraSpec {
                r: 4,
                alpha: 8.0,
                targets: targets.iter().map(|t| t.to_string()).collect(),
                dropout: 0.0,
            }),
            ..Workload::train(Task::Causal, 1, 8)
        };
        assert!(err(&llama(), &lora(&["qkv"])).contains("no module matches"));
        assert!(err(&gpt2, &lora(&[])).contains("LoRA is modelled for"));
    }
}
