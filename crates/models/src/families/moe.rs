//! The sparse mixture-of-experts block of `modeling_mixtral.py` and
//! `modeling_qwen3_moe.py` (transformers 5.17): a top-k router and the
//! experts as two 3-D parameters, run by `integrations/moe.py`'s
//! `grouped_mm_experts_forward` (the `experts_implementation` 5.17 picks by
//! default: `get_correct_experts_implementation` gives `"grouped_mm"`).
//!
//! That implementation sorts the `tokens x top_k` (token, expert) pairs by
//! expert and runs every pair through one `_grouped_mm` per projection, so
//! every tensor it allocates has a size fixed by the shapes: the routing
//! (how many tokens each expert gets) changes only the groups' offsets,
//! which no allocation depends on. The figures are the same for every
//! routing, the one a random-initialised model makes of random inputs
//! included. `generate()` runs its decode forwards under
//! `_optimize_model_for_decode`, which on CUDA switches the experts to
//! `batched_mm_experts_forward`: each (token, expert) pair gathers its
//! expert's weights (`gate_up_proj[expert_ids]`, `(tokens x top_k, 2 x
//! intermediate, hidden)`) and multiplies them by `bmm`; again no size
//! depends on the routing.

use vramscope_engine::{DType, Runtime, Tensor};

use crate::error::Result;
use crate::families::common::{parameter, to_cuda, Act, GatedMlp, Linear};
use vramscope_engine::Category;

/// Which router (`MixtralTopKRouter` or `Qwen3MoeTopKRouter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Router {
    /// softmax of `router_logits.float()`, top-k, always renormalised; the
    /// weights stay float32
    Mixtral,
    /// `softmax(router_logits, dtype=float)`, top-k, renormalised when
    /// `norm_topk_prob`, then cast back to the logits' dtype
    Qwen3 { norm_topk_prob: bool },
}

/// The block's sizes (`num_local_experts`/`num_experts`,
/// `num_experts_per_tok`, the experts' intermediate size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MoeConfig {
    pub(crate) experts: i64,
    pub(crate) top_k: i64,
    pub(crate) intermediate: i64,
    pub(crate) router: Router,
}

/// `MixtralSparseMoeBlock` / `Qwen3MoeSparseMoeBlock`.
#[derive(Clone)]
pub(crate) struct SparseMoe {
    cfg: MoeConfig,
    hidden: i64,
    /// the router's `weight` `(experts, hidden)` (F.linear without bias)
    gate: Linear,
    /// `experts.gate_up_proj` `(experts, 2 * intermediate, hidden)`
    gate_up_proj: Tensor,
    /// `experts.down_proj` `(experts, hidden, intermediate)`
    down_proj: Tensor,
}

impl SparseMoe {
    /// Built on the CPU in `dtype`.
    pub(crate) fn new(rt: &Runtime, hidden: i64, cfg: MoeConfig, dtype: DType) -> Result<Self> {
        let (e, i) = (cfg.experts, cfg.intermediate);
        Ok(SparseMoe {
            cfg,
            hidden,
            gate: Linear::new(rt, hidden, e, false, dtype)?,
            gate_up_proj: parameter(rt, &[e, 2 * i, hidden], dtype)?,
            down_proj: parameter(rt, &[e, hidden, i], dtype)?,
        })
    }

    /// The parameters in registration order: Mixtral registers `gate`
    /// before `experts`, Qwen3-MoE after.
    pub(crate) fn params(&self, out: &mut Vec<Tensor>) {
        let experts = [self.gate_up_proj.clone(), self.down_proj.clone()];
        match self.cfg.router {
            Router::Mixtral => {
                out.push(self.gate.weight.clone());
                out.extend(experts);
            }
            Router::Qwen3 { .. } => {
                out.extend(experts);
                out.push(self.gate.weight.clone());
            }
        }
    }

    /// `Module._apply(cuda)` in registration order.
    pub(crate) fn cuda(&mut self) -> Result<()> {
        let first_gate = self.cfg.router == Router::Mixtral;
        if first_gate {
            self.gate.cuda()?;
        }
        to_cuda(&mut self.gate_up_proj, Category::Parameter)?;
        to_cuda(&mut self.down_proj, Category::Parameter)?;
        if !first_gate {
            self.gate.cuda()?;
        }
        Ok(())
    }

    /// The block's forward on `(b, s, hidden)`; `decode`: a decode forward
    /// of `generate()` (the `batched_mm` experts).
    pub(crate) fn forward(&self, x: &Tensor, decode: bool) -> Result<Tensor> {
        let rt = x.runtime().clone();
        let (b, s, h) = (x.size(0), x.size(1), self.hidden);
        let flat = x.view(&[-1, h])?;
        // `_, top_k_weights, top_k_index = self.gate(hidden_states)`: `_`
        // (the router logits) is a local until the block returns
        let (router_logits, weights, index) = rt.in_module("gate", || self.router(&flat))?;
        let out = rt.in_module("experts", || {
            if decode {
                self.experts_batched(&flat, &index, &weights)
            } else {
                self.experts(&flat, &index, &weights)
            }
        })?;
        drop(flat);
        let out = out.reshape(&[b, s, h])?;
        // locals die: `_`, the weights, the indices
        drop(router_logits);
        drop(weights);
        drop(index);
        Ok(out)
    }

    /// The router on `(tokens, hidden)`: `(router_logits, scores, indices)`.
    fn router(&self, h: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        // F.linear(hidden_states, self.weight)
        let logits = h.linear(&self.gate.weight, None)?;
        // Mixtral: softmax(router_logits.float()); Qwen3: softmax(.., dtype=float)
        let probs = match self.cfg.router {
            Router::Mixtral => {
                let f = logits.to_dtype(DType::F32)?;
                let p = f.softmax(-1)?;
                drop(f);
                p
            }
            Router::Qwen3 { .. } => logits.softmax_dtype(-1, Some(DType::F32))?,
        };
        let (mut top_value, indices) = probs.topk(self.cfg.top_k)?;
        let renormalise = match self.cfg.router {
            Router::Mixtral => true,
            Router::Qwen3 { norm_topk_prob } => norm_topk_prob,
        };
        if renormalise {
            // `router_top_value /= router_top_value.sum(dim=-1, keepdim=True)`:
            // in place; the sum dies after it
            let sum = top_value.sum_dims(&[-1], true)?;
            top_value.div_(&sum)?;
            drop(sum);
        }
        if let Router::Qwen3 { .. } = self.cfg.router {
            top_value = top_value.to_dtype(logits.dtype())?;
        }
        // locals die at return: router_probs (the others are returned)
        drop(probs);
        Ok((logits, top_value, indices))
    }

    /// `grouped_mm_experts_forward(self, hidden_states, top_k_index,
    /// top_k_weights)`, each line with its allocations; the locals die at
    /// return in `co_varnames` order.
    fn experts(
        &self,
        hidden: &Tensor,
        top_k_index: &Tensor,
        top_k_weights: &Tensor,
    ) -> Result<Tensor> {
        let rt = hidden.runtime().clone();
        let (k, e) = (self.cfg.top_k, self.cfg.experts);
        let sample_weights = top_k_weights.reshape(&[-1])?;
        let expert_ids = top_k_index.reshape(&[-1])?;
        let (expert_ids_g, perm) = expert_ids.sort()?;
        let selected_hidden_states_g = {
            let idx = perm.floor_divide_scalar(k)?;
            hidden.index(&[Some(&idx)])?
        };
        let sample_weights_g = sample_weights.index(&[Some(&perm)])?;
        // `expert_ids_g.int()` on CUDA (histc counts int inputs there)
        let histc_input = expert_ids_g.to_dtype(DType::I32)?;
        let tokens_per_expert = histc_input.histc(e)?;
        let offsets = tokens_per_expert.cumsum_dtype(0, Some(DType::I32))?;
        let sentinel_mask = expert_ids_g.ge_scalar(e as f64)?.unsqueeze(-1)?;
        // `expert_ids_g.clamp_(max=...)` (in place, no node), then
        // `selected_hidden_states_g.masked_fill_(sentinel_mask, 0.0)`
        selected_hidden_states_g.masked_fill_(&sentinel_mask)?;
        let mut proj_out = grouped_linear(&selected_hidden_states_g, &self.gate_up_proj, &offsets)?;
        proj_out = proj_out.masked_fill(&sentinel_mask)?;
        proj_out = rt.in_module("act_fn", || apply_gate(&proj_out))?;
        proj_out = grouped_linear(&proj_out, &self.down_proj, &offsets)?;
        proj_out = proj_out.masked_fill(&sentinel_mask)?;
        let mut weighted_out = proj_out.mul(&sample_weights_g.unsqueeze(-1)?)?;
        let inv_perm = perm.empty_like()?;
        {
            let arange = rt.arange(perm.size(0), DType::I64, perm.device())?;
            inv_perm.index_put_(&perm, &arange)?;
        }
        weighted_out = weighted_out.index(&[Some(&inv_perm)])?;
        let (final_hidden_states, out) = sum_over_top_k(&weighted_out, hidden, k)?;
        for dead in [
            sample_weights,
            expert_ids,
            expert_ids_g,
            perm,
            selected_hidden_states_g,
            sample_weights_g,
            histc_input,
            tokens_per_expert,
            offsets,
            sentinel_mask,
            proj_out,
            weighted_out,
            inv_perm,
            final_hidden_states,
        ] {
            drop(dead);
        }
        Ok(out)
    }
}

impl SparseMoe {
    /// `batched_mm_experts_forward(self, hidden_states, top_k_index,
    /// top_k_weights)`: every pair's input row and expert weights gathered,
    /// two `bmm`s; the locals die at return in `co_varnames` order.
    fn experts_batched(
        &self,
        hidden: &Tensor,
        top_k_index: &Tensor,
        top_k_weights: &Tensor,
    ) -> Result<Tensor> {
        let rt = hidden.runtime().clone();
        let (k, t, h) = (self.cfg.top_k, hidden.size(0), hidden.size(1));
        // `hidden_states.repeat_interleave(num_top_k, dim=0)`: unsqueeze,
        // expand, a contiguous clone, flatten
        let selected_hidden_states = hidden
            .unsqueeze(1)?
            .expand(&[t, k, h])?
            .contiguous()?
            .view(&[-1, h])?;
        let sample_weights = top_k_weights.reshape(&[-1])?;
        // `top_k_index.reshape(-1).clamp(0, num_experts - 1)`: out of place
        let expert_ids = top_k_index.reshape(&[-1])?.clamp_scalars()?;
        let mut selected_weights = self.gate_up_proj.index(&[Some(&expert_ids)])?;
        let mut proj_out = batched_linear(&selected_hidden_states, &selected_weights)?;
        proj_out = rt.in_module("act_fn", || apply_gate(&proj_out))?;
        selected_weights = self.down_proj.index(&[Some(&expert_ids)])?;
        proj_out = batched_linear(&proj_out, &selected_weights)?;
        let weighted_out = proj_out.mul(&sample_weights.unsqueeze(-1)?)?;
        let (final_hidden_states, out) = sum_over_top_k(&weighted_out, hidden, k)?;
        for dead in [
            selected_hidden_states,
            sample_weights,
            expert_ids,
            selected_weights,
            proj_out,
            weighted_out,
            final_hidden_states,
        ] {
            drop(dead);
        }
        Ok(out)
    }
}

/// Both expert forwards' tail: `final_hidden_states =
/// weighted_out.view(num_tokens, num_top_k, hidden_dim).sum(dim=1)` (a local
/// of the caller's, dying with its frame) and its
/// `.to(hidden_states.dtype)`, returned.
fn sum_over_top_k(weighted_out: &Tensor, hidden: &Tensor, k: i64) -> Result<(Tensor, Tensor)> {
    let (t, h) = (hidden.size(0), hidden.size(1));
    let final_hidden_states = weighted_out.view(&[t, k, h])?.sum_dims(&[1], false)?;
    let out = final_hidden_states.to_dtype(hidden.dtype())?;
    Ok((final_hidden_states, out))
}

/// `_batched_linear(input, weight)` (not transposed, no bias):
/// `torch.bmm(weight, input.unsqueeze(-1)).squeeze(-1)`.
fn batched_linear(input: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let x = input.unsqueeze(-1)?;
    let out = weight.bmm(&x)?;
    drop(x);
    Ok(out.squeeze_dim(-1))
}

/// `_grouped_linear(input, weight, offs)` (not transposed, no bias):
/// `_grouped_mm(input.to(weight.dtype), weight.transpose(-2, -1), offs)`.
fn grouped_linear(input: &Tensor, weight: &Tensor, offs: &Tensor) -> Result<Tensor> {
    let x = input.to_dtype(weight.dtype())?;
    let wt = weight.transpose(-2, -1);
    Ok(x.grouped_mm(&wt, offs)?)
}

/// `_default_apply_gate`: `gate, up = gate_up_out.chunk(2, dim=-1)`, then
/// `act_fn(gate) * up` (the activation dies after the product).
fn apply_gate(gate_up: &Tensor) -> Result<Tensor> {
    let half = gate_up.size(-1) / 2;
    let parts = gate_up.split(half, -1)?;
    let act = Act::Silu.forward(&parts[0])?;
    let out = act.mul(&parts[1])?;
    drop(act);
    Ok(out)
}

/// A decoder layer's feed-forward: dense (`…MLP`) or sparse.
#[derive(Clone)]
pub(crate) enum Mlp {
    Dense(GatedMlp),
    Sparse(SparseMoe),
}

impl Mlp {
    /// `decode`: a decode forward of `generate()`.
    pub(crate) fn forward(&self, x: &Tensor, decode: bool) -> Result<Tensor> {
        match self {
            Mlp::Dense(m) => m.forward(x),
            Mlp::Sparse(m) => m.forward(x, decode),
        }
    }
    pub(crate) fn cuda(&mut self) -> Result<()> {
        match self {
            Mlp::Dense(m) => m.cuda(),
            Mlp::Sparse(m) => m.cuda(),
        }
    }
    pub(crate) fn params(&self, out: &mut Vec<Tensor>) {
        match self {
            Mlp::Dense(m) => m.params(out),
            Mlp::Sparse(m) => m.params(out),
        }
    }
}
