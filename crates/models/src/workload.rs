//! The workload a user runs, exactly as `validation/hf_cases.py` runs it on
//! the GPU (issue #5's contract):
//!
//! - `load`: `AutoModelFor*.from_config(config, dtype=W, attn_implementation="sdpa").cuda()`,
//!   the optimizer (no memory until its first step), then the inputs:
//!   `input_ids` (batch, seq) int64 and `labels = input_ids.clone()`
//!   (images: `pixel_values` (batch, 3, H, W) in the weight dtype and
//!   `labels` (batch,) int64);
//! - train: `model.train()` (optionally gradient checkpointing of every
//!   k-th layer, `use_reentrant=False`), then per step `forward{i}`
//!   (`loss = model(**inputs, labels=labels).loss`, under autocast if asked),
//!   `backward{i}` (`loss.backward(); del loss`), `step{i}` (`opt.step()`),
//!   `zero_grad{i}` (`opt.zero_grad(set_to_none=True)`); with gradient
//!   accumulation over m micro-batches, `forward{i}.{j}` and
//!   `backward{i}.{j}` for each (the loss is not rescaled);
//! - infer: `model.eval()`, then per pass `forward{i}`: under
//!   `torch.no_grad()` (or [`Workload::grad`]'s context),
//!   `logits = model(**inputs).logits; del logits`.

use vramscope_engine::optim::{Implementation, OptimizerConfig, OptimizerKind};
use vramscope_engine::DType;

/// Which head and loss the model carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// `AutoModelForCausalLM`, loss: shifted cross entropy
    Causal,
    /// `AutoModelForMaskedLM`
    Mlm,
    /// `AutoModelForImageClassification`
    Image,
}

/// Training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// forward with loss, backward, optimizer step, `zero_grad`
    Train,
    /// forward passes under `torch.no_grad()`
    Infer,
    /// `model.generate(input_ids, max_new_tokens=N, min_new_tokens=N,
    /// do_sample=False)`: a prefill, then `N - 1` decode steps
    Generate,
}

impl Mode {
    /// The name in the CLI, case lists and JSON (`train`, `infer`, `generate`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Infer => "infer",
            Mode::Generate => "generate",
        }
    }
}

/// peft's `LoraConfig(r, lora_alpha, target_modules, lora_dropout)`
/// applied with `get_peft_model`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSpec {
    /// `r`
    pub r: i64,
    /// `lora_alpha` (scaling `alpha / r`: no memory)
    pub alpha: f64,
    /// `target_modules` (empty: peft's default for the family)
    pub targets: Vec<String>,
    /// `lora_dropout`
    pub dropout: f64,
}

/// The KV cache `generate()` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheKind {
    /// `DynamicCache`: each layer's keys and values grow by concatenation
    #[default]
    Dynamic,
    /// `StaticCache` (`cache_implementation="static"`): allocated once for
    /// prompt + new tokens
    Static,
}

impl CacheKind {
    /// The name in the CLI, case lists and JSON (`dynamic`, `static`).
    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Dynamic => "dynamic",
            CacheKind::Static => "static",
        }
    }

    /// The cache of [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [CacheKind::Dynamic, CacheKind::Static]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

/// The autograd context of inference passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GradMode {
    /// `with torch.no_grad():` (the default)
    #[default]
    NoGrad,
    /// `with torch.inference_mode():`
    InferenceMode,
    /// no context: the forward records the graph (parameters require grad),
    /// which lives until the logits are deleted
    Enabled,
}

impl GradMode {
    /// The name in case lists and JSON: `no_grad`, `inference_mode`,
    /// `enabled`.
    pub fn name(self) -> &'static str {
        match self {
            GradMode::NoGrad => "no_grad",
            GradMode::InferenceMode => "inference_mode",
            GradMode::Enabled => "enabled",
        }
    }

    /// The mode of [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [GradMode::NoGrad, GradMode::InferenceMode, GradMode::Enabled]
            .into_iter()
            .find(|g| g.name() == name)
    }
}

/// Which layers `gradient_checkpointing_enable` wraps in
/// `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpointing {
    /// transformers' `every_n_layers=k`: layer `i` when `i % k == 0`
    /// (`k = 1`: every layer)
    Every(usize),
    /// exactly these layer indices (what `plan` searches for)
    Layers(Vec<usize>),
}

impl Checkpointing {
    /// Whether layer `index` is checkpointed.
    pub fn applies(&self, index: usize) -> bool {
        match self {
            Checkpointing::Every(k) => index.is_multiple_of((*k).max(1)),
            Checkpointing::Layers(v) => v.contains(&index),
        }
    }
}

/// One workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// the head
    pub task: Task,
    /// train or infer
    pub mode: Mode,
    /// batch size
    pub batch: i64,
    /// sequence length (text tasks)
    pub seq: i64,
    /// the weights' dtype (`from_config(dtype=...)`)
    pub weights: DType,
    /// `torch.autocast("cuda", dtype=...)` around the forward
    pub autocast: Option<DType>,
    /// the optimizer (train)
    pub optimizer: OptimizerKind,
    /// how its step runs (`foreach=`/`fused=`)
    pub optimizer_impl: Implementation,
    /// SGD and RMSprop momentum
    pub momentum: f64,
    /// learning rate (does not change memory; kept for the record)
    pub lr: f64,
    /// gradient checkpointing (`None`: off)
    pub checkpointing: Option<Checkpointing>,
    /// train steps or inference passes
    pub steps: usize,
    /// gradient accumulation: micro-batches of `batch` per optimizer step
    /// (forward and backward `accumulation` times, then `step` and
    /// `zero_grad`)
    pub accumulation: usize,
    /// the autograd context of inference passes (infer)
    pub grad: GradMode,
    /// data parallelism (`None`: one GPU); the figures are one rank's
    pub parallel: Option<crate::parallel::Parallel>,
    /// generate: the tokens generated after the prompt (`seq`)
    pub new_tokens: i64,
    /// generate: the KV cache
    pub cache: CacheKind,
    /// LoRA (`get_peft_model` after `.cuda()`; with checkpointing also
    /// `enable_input_require_grads()`)
    pub lora: Option<LoraSpec>,
}

impl Workload {
    /// A training workload with the CLI's defaults (fp32, AdamW, 3 steps).
    pub fn train(task: Task, batch: i64, seq: i64) -> Self {
        Workload {
            task,
            mode: Mode::Train,
            batch,
            seq,
            weights: DType::F32,
            autocast: None,
            optimizer: OptimizerKind::AdamW,
            optimizer_impl: Implementation::Foreach,
            momentum: 0.0,
            lr: 1e-4,
            checkpointing: None,
            steps: 3,
            accumulation: 1,
            grad: GradMode::NoGrad,
            parallel: None,
            new_tokens: 0,
            cache: CacheKind::Dynamic,
            lora: None,
        }
    }

    /// An inference workload with the CLI's defaults (fp32, 2 passes).
    pub fn infer(task: Task, batch: i64, seq: i64) -> Self {
        Workload {
            mode: Mode::Infer,
            steps: 2,
            ..Workload::train(task, batch, seq)
        }
    }

    /// The optimizer as the workload constructs it.
    pub fn optimizer_config(&self) -> OptimizerConfig {
        OptimizerConfig {
            kind: self.optimizer,
            implementation: self.optimizer_impl,
            momentum: self.momentum,
        }
    }

    /// A generation workload: a prompt of `seq` tokens and `new_tokens`
    /// generated (fp32 weights, a `DynamicCache`).
    pub fn generate(task: Task, batch: i64, seq: i64, new_tokens: i64) -> Self {
        Workload {
            mode: Mode::Generate,
            steps: 1,
            new_tokens,
            ..Workload::train(task, batch, seq)
        }
    }

    /// The phase names in order (`load`, `forward0`, `backward0`, ...).
    pub fn phase_names(&self) -> Vec<String> {
        let mut v = vec!["load".to_string()];
        for i in 0..self.steps {
            match self.mode {
                Mode::Train => {
                    for m in 0..self.accumulation.max(1) {
                        let sub = if self.accumulation > 1 {
                            format!(".{m}")
                        } else {
                            String::new()
                        };
                        v.push(format!("forward{i}{sub}"));
                        v.push(format!("backward{i}{sub}"));
                    }
                    v.push(format!("step{i}"));
                    v.push(format!("zero_grad{i}"));
                }
                Mode::Infer => v.push(format!("forward{i}")),
                Mode::Generate => {
                    v.push("prefill".into());
                    v.push("decode".into());
                }
            }
        }
        v
    }
}
