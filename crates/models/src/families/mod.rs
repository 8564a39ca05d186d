//! The model families, one file per `modeling_<family>.py` of transformers
//! 5.x, and what they share: the [`HfModel`] interface the workload drives.

use vramscope_engine::{DType, Runtime, Tensor};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::workload::{Checkpointing, Task};

mod bert;
// the key/value cache: DynamicCache and StaticCache
pub(crate) mod cache;
// shared decoder blocks: RMSNorm, RoPE, masks, DynamicCache, ForCausalLMLoss
pub(crate) mod common;
mod gemma2;
pub(crate) mod generate;
mod gpt2;
mod llama;
// the sparse mixture-of-experts block of mixtral and qwen3_moe
pub(crate) mod moe;
mod phi3;
mod vit;

/// The `model_type`s vramscope models.
pub const SUPPORTED: [&str; 13] = [
    "gpt2",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen3_moe",
    "phi3",
    "gemma2",
    "gemma3_text",
    "bert",
    "roberta",
    "vit",
];

/// What the model is called with (`model(**inputs)`).
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `input_ids` (batch, seq), int64
    pub input_ids: Option<Tensor>,
    /// `pixel_values` (batch, channels, H, W)
    pub pixel_values: Option<Tensor>,
    /// `labels` (train only)
    pub labels: Option<Tensor>,
}

/// The fields of the `ModelOutput` that hold device memory.
#[derive(Debug, Default)]
pub struct ModelOutput {
    /// `loss` (when labels were given)
    pub loss: Option<Tensor>,
    /// `logits`
    pub logits: Option<Tensor>,
    /// `past_key_values` (a `DynamicCache`'s key/value tensors) and any other
    /// tensors the output object keeps alive until it is dropped
    pub retained: Vec<Tensor>,
}

/// Forward hooks a wrapper registers on the model's units (FSDP2's
/// `fully_shard`): unit 0 is the model, unit `1 + i` decoder layer `i`.
pub trait ModuleHooks {
    /// Before the unit's forward, with its input that may need a gradient
    /// (`None` for the model, whose inputs are ids): the tensor to run it on
    /// instead, if any.
    fn pre_forward(&self, unit: usize, input: Option<&Tensor>) -> Result<Option<Tensor>>;
    /// After the unit's forward, with its outputs.
    fn post_forward(&self, unit: usize, outputs: &[&Tensor]) -> Result<()>;
}

/// A model built from a config, as transformers builds it on the CPU.
pub trait HfModel {
    /// `model.cuda()`: parameters and buffers moved in `Module._apply` order
    /// (a tied weight once).
    fn cuda(&mut self) -> Result<()>;
    /// `model.parameters()`, in registration order, a tied weight once.
    fn parameters(&self) -> Vec<Tensor>;
    /// `model.train()` / `model.eval()`.
    fn set_training(&mut self, training: bool);
    /// `model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=
    /// {"use_reentrant": False}, every_n_layers=k)`: the layers for which
    /// `which.applies(index)` run under non-reentrant checkpointing.
    fn enable_gradient_checkpointing(&mut self, which: &Checkpointing) -> Result<()>;
    /// `model(**inputs)` (with `labels` when set).
    fn forward(&self, inputs: &Inputs) -> Result<ModelOutput>;
    /// Each decoder layer's parameters, in registration order (`None`: a
    /// family whose layers the wrappers do not reach yet).
    fn layer_parameters(&self) -> Option<Vec<Vec<Tensor>>> {
        None
    }
    /// `model.buffers()`, in registration order, on the device after
    /// [`HfModel::cuda`] (`None`: a family that does not list them yet).
    fn buffers(&self) -> Option<Vec<Tensor>> {
        None
    }
    /// Register forward hooks on the model and its layers.
    fn set_module_hooks(&mut self, _hooks: std::rc::Rc<dyn ModuleHooks>) -> Result<()> {
        Err(ModelError::Unsupported(
            "forward hooks on this family's layers (FSDP)".into(),
        ))
    }
    /// `get_peft_model(model, LoraConfig(...))` (`training`: its dropout
    /// is active): how many layers it wrapped.
    fn apply_lora(&mut self, _spec: &crate::workload::LoraSpec, _training: bool) -> Result<usize> {
        Err(ModelError::Unsupported(
            "LoRA is modelled for llama, mistral, qwen2 and qwen3".into(),
        ))
    }
    /// `model.enable_input_require_grads()`.
    fn enable_input_require_grads(&mut self) {}
    /// `model.generate(input_ids, ...)` under its own `torch.no_grad()`:
    /// the returned sequences. `on` hears where it is
    /// ([`generate::GenerateEvent`]).
    fn generate(
        &self,
        _input_ids: &Tensor,
        _spec: &generate::GenerateSpec,
        _on: &mut dyn FnMut(generate::GenerateEvent) -> Result<()>,
    ) -> Result<Tensor> {
        Err(ModelError::Unsupported(
            "generate() is modelled for llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, gemma2 and \
             gemma3_text"
                .into(),
        ))
    }
}

/// Build the model for `config` and `task` on the CPU, with weights in
/// `weights` (`AutoModelFor*.from_config(config, dtype=weights,
/// attn_implementation="sdpa")`).
pub fn build(
    rt: &Runtime,
    config: &HfConfig,
    task: Task,
    weights: DType,
) -> Result<Box<dyn HfModel>> {
    // each family: the one task its head serves, and its builder
    let (head, build): (Task, Build) = match config.model_type.as_str() {
        "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" | "qwen3_moe" => {
            (Task::Causal, llama::build)
        }
        "phi3" => (Task::Causal, phi3::build),
        "gemma2" | "gemma3_text" => (Task::Causal, gemma2::build),
        "gpt2" => (Task::Causal, gpt2::build),
        "bert" | "roberta" => (Task::Mlm, bert::build),
        "vit" => (Task::Image, vit::build),
        other => return Err(ModelError::UnsupportedModel(other.to_string())),
    };
    if task != head {
        return Err(unsupported_task(config, task));
    }
    build(rt, config, weights)
}

/// peft's default `target_modules` for a `model_type` whose LoRA the twin
/// models (peft 0.21's `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`);
/// `None` where `get_peft_model` without `target_modules` fails: `qwen3_moe`
/// has no entry, and for `mixtral` under transformers 5
/// `convert_peft_config_for_transformers` turns the missing targets into an
/// empty set before the default applies (`NoMatchingPeftModuleError`, on the
/// H200 too: `fixtures/llm/adafactor`).
pub fn peft_lora_targets(model_type: &str) -> Option<&'static [&'static str]> {
    match model_type {
        "llama" | "mistral" | "qwen2" | "qwen3" => Some(&["q_proj", "v_proj"]),
        _ => None,
    }
}

/// The most positions the model's config declares: `max_position_embeddings`
/// (GPT-2: `n_positions`), else its config class's default in transformers
/// 5.17 (`configuration_<family>.py`); `None` for a family without one (ViT).
pub fn max_positions(config: &HfConfig) -> Result<Option<i64>> {
    let default = match config.model_type.as_str() {
        "llama" => 2048,
        "mistral" | "mixtral" => 4096 * 32,
        "qwen2" | "qwen3" | "qwen3_moe" => 32768,
        "phi3" => 4096,
        "gemma2" => 8192,
        "gemma3_text" => 131_072,
        "bert" => 512,
        "roberta" => 514,
        "gpt2" if config.has("n_positions") => return config.size("n_positions", 1024).map(Some),
        "gpt2" => 1024,
        _ => return Ok(None),
    };
    config.size("max_position_embeddings", default).map(Some)
}

/// A family's builder: the model for `config` on the CPU, weights in the
/// given dtype (the task already checked by [`build`]).
type Build = fn(&Runtime, &HfConfig, DType) -> Result<Box<dyn HfModel>>;

/// The head a family offers for a task, or a clear error.
fn unsupported_task(config: &HfConfig, task: Task) -> ModelError {
    ModelError::Unsupported(format!(
        "task {task:?} for model_type `{}`",
        config.model_type
    ))
}
