//! `vramscope estimate`: the memory of a training or inference step of a
//! Hugging Face model, from its config.json, before running it.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde::Serialize;
use vramscope_alloc::{format_size, AllocatorConfig};
use vramscope_engine::{DType, DeviceProfile};
use vramscope_models::predicted::predicted_snapshot;
use vramscope_models::{
    estimate, presets, CacheKind, Checkpointing, DdpConfig, Estimate, EstimateOptions, FsdpConfig,
    GradMode, HfConfig, Implementation, LoraSpec, Mode, OptimizerKind, Parallel, Task, Workload,
};
use vramscope_snapshot::write::WriteOptions;

use crate::{signed_size, EXIT_DIFFERENT, EXIT_OK};

/// `--task`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TaskArg {
    /// causal language modelling (`AutoModelForCausalLM`, shifted cross entropy)
    Causal,
    /// masked language modelling (`AutoModelForMaskedLM`)
    Mlm,
    /// image classification (`AutoModelForImageClassification`)
    Image,
}

/// `--mode`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// forward with loss, backward, optimizer step, zero_grad(set_to_none=True)
    Train,
    /// model.eval() and forward passes under torch.no_grad()
    Infer,
    /// model.generate(input_ids, max_new_tokens=N, min_new_tokens=N,
    /// do_sample=False): a prefill (the last position's logits), then N - 1
    /// decode steps with a KV cache
    Generate,
}

/// `--cache`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheArg {
    /// DynamicCache: each layer's keys and values grow by torch.cat
    Dynamic,
    /// StaticCache (cache_implementation="static"): allocated once
    Static,
}

/// A floating-point dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DTypeArg {
    /// torch.float32
    Fp32,
    /// torch.bfloat16
    Bf16,
    /// torch.float16
    Fp16,
}

impl DTypeArg {
    fn dtype(self) -> DType {
        match self {
            DTypeArg::Fp32 => DType::F32,
            DTypeArg::Bf16 => DType::BF16,
            DTypeArg::Fp16 => DType::F16,
        }
    }
}

/// `--autocast`
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AutocastArg {
    /// torch.autocast("cuda", dtype=torch.bfloat16)
    Bf16,
    /// torch.autocast("cuda", dtype=torch.float16)
    Fp16,
}

/// `--optimizer`: every [`OptimizerKind`] by its name.
fn optimizer_parser() -> impl clap::builder::TypedValueParser<Value = OptimizerKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(OptimizerKind::ALL.map(|k| k.name()))
        .map(|s| OptimizerKind::from_name(&s).expect("one of the possible values"))
}

/// `--optimizer-impl`: every [`Implementation`] by its name.
fn implementation_parser() -> impl clap::builder::TypedValueParser<Value = Implementation> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Implementation::ALL.map(|i| i.name()))
        .map(|s| Implementation::from_name(&s).expect("one of the possible values"))
}

/// `--gpu`'s long help: every GPU of [`vramscope_engine::GPUS`] (a unit
/// test holds the list to the table).
pub const GPU_HELP: &str = "\
The GPU to simulate: its memory less the CUDA context, its cuBLAS workspace
sizes and SDPA backends (PyTorch 2.11's rules for its compute capability), ...
Measured here: h100 (NVIDIA H100 80GB HBM3), h200 (NVIDIA H200).
Estimated (capability and SMs from NVIDIA, total memory from public reports,
the driver's shares the H100's; the report says which): a100-40gb, a100-80gb,
l40s, l4, a10g, rtx4090, rtx3090, t4, v100 (16 GB), b200.
custom: any other GPU, with --memory SIZE (and --capability X.Y, default 9.0).";

/// A `--gpu` value: a key of [`vramscope_engine::GPUS`] or `custom`.
pub fn parse_gpu(s: &str) -> Result<String, String> {
    if s.eq_ignore_ascii_case("custom") {
        return Ok("custom".into());
    }
    vramscope_engine::gpu(s)
        .map(|g| g.key.to_owned())
        .ok_or_else(|| {
            format!(
                "unknown GPU {s:?}; expected one of {}",
                vramscope_engine::gpus::gpu_keys()
            )
        })
}

/// A size option (`24GiB`, `24GB`, `24G`, bytes).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    vramscope_alloc::parse_size(s)
}

/// The model: a config.json or a preset.
#[derive(Debug, Args, Clone)]
#[group(required = true, multiple = false)]
pub struct ModelArgs {
    /// A Hugging Face config.json (any supported model_type), or the
    /// model's directory holding it (as from_pretrained takes one).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// An embedded preset (llama-3.1-8b, llama-3.1-70b, qwen3-8b, mistral-7b,
    /// gpt2, bert-base-uncased, vit-base-patch16-224, ...; `--model list` lists them).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

impl ModelArgs {
    /// Read the config.
    pub fn config(&self) -> anyhow::Result<HfConfig> {
        if let Some(p) = &self.config {
            // a model's directory: its config.json, as AutoConfig.from_pretrained(dir) reads it
            let p = if p.is_dir() {
                let file = p.join("config.json");
                if !file.is_file() {
                    bail!(
                        "--config {}: a directory without a config.json; expected a Hugging Face config.json or the model's directory holding one",
                        p.display()
                    );
                }
                file
            } else {
                p.clone()
            };
            let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            let pickle = bytes.first() == Some(&0x80);
            let Ok(text) = String::from_utf8(bytes) else {
                bail!(
                    "--config {}: not a text file; expected a Hugging Face config.json (JSON text){}",
                    p.display(),
                    if pickle {
                        " (it starts as a pickle does: a memory snapshot is read by `vramscope inspect`)"
                    } else {
                        ""
                    }
                );
            };
            return HfConfig::parse(&text).with_context(|| format!("in {}", p.display()));
        }
        let name = self.model.as_deref().unwrap_or_default();
        if self.is_list() {
            bail!(
                "`list` names no preset; the presets: {}",
                presets::names().join(", ")
            );
        }
        Ok(presets::get(name)?)
    }

    /// `--model list`: the presets are asked for, not a model.
    pub fn is_list(&self) -> bool {
        self.model.as_deref() == Some("list")
    }
}

/// Whether a command line clap refused for a missing argument is
/// `estimate`/`plan` with `--model list`: then the presets are listed, and
/// `--mode` and `--batch` are not needed. Arguments after `--` are values,
/// not options.
pub fn asks_for_presets(args: &[std::ffi::OsString]) -> bool {
    let args: Vec<&str> = args
        .iter()
        .filter_map(|a| a.to_str())
        .take_while(|a| *a != "--")
        .collect();
    let subcommand = args.iter().skip(1).find(|a| !a.starts_with('-'));
    matches!(subcommand, Some(&"estimate" | &"plan"))
        && (args.windows(2).any(|w| w == ["--model", "list"]) || args.contains(&"--model=list"))
}

/// The presets, one line each: name, family, layers, width.
pub fn presets_table() -> anyhow::Result<String> {
    use std::fmt::Write;
    let mut out = String::from("preset                  model_type  layers  hidden\n");
    for name in presets::names() {
        let c = presets::get(name)?;
        let field = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| c.get(k).and_then(|v| v.as_i64()))
                .map_or_else(|| "-".to_string(), |v| v.to_string())
        };
        writeln!(
            out,
            "{name:<23} {:<11} {:>6}  {:>6}",
            c.model_type,
            field(&["num_hidden_layers", "n_layer"]),
            field(&["hidden_size", "n_embd"]),
        )?;
    }
    Ok(out)
}

/// What is run, as in the Python the user would write (see `estimate --help`).
#[derive(Debug, Args, Clone)]
pub struct WorkloadArgs {
    /// The head: causal (default for decoder models), mlm (default for
    /// bert/roberta) or image (vit).
    #[arg(long, value_enum)]
    pub task: Option<TaskArg>,
    /// Train (forward with loss, backward, optimizer step, zero_grad) or
    /// infer (forward passes under torch.no_grad()).
    #[arg(long, value_enum)]
    pub mode: ModeArg,
    /// Sequence length of input_ids (text models; default 512). `plan`
    /// takes a list (512,1024,2048) for a sweep.
    #[arg(long, value_parser = parse_list, allow_hyphen_values = true)]
    pub seq: Option<IntList>,
    /// The weights' dtype: from_config(config, dtype=...). Default: the
    /// config's `torch_dtype` (or `dtype`), as transformers 5.x's
    /// from_config takes it, else fp32.
    #[arg(long, value_enum)]
    pub weights: Option<DTypeArg>,
    /// Run the forward under torch.autocast("cuda", dtype=...).
    #[arg(long, value_enum)]
    pub autocast: Option<AutocastArg>,
    /// The optimizer (train): torch.optim.AdamW (two states like each
    /// parameter), Adam (the same), SGD (a momentum buffer per parameter
    /// when --momentum > 0), Adagrad (one state, made by the constructor),
    /// RMSprop (one state, two with --momentum > 0), Adafactor (PyTorch's
    /// torch.optim.Adafactor, not transformers': a row and a column factor
    /// per matrix, a full variance per vector).
    #[arg(long, default_value = "adamw", value_parser = optimizer_parser())]
    pub optimizer: OptimizerKind,
    /// How the optimizer's step runs: foreach (foreach=True: the step's
    /// temporaries are a list as large as the parameters), for-loop
    /// (foreach=False: one parameter's temporaries at a time) or fused
    /// (fused=True: none; AdamW, Adam and SGD only). Absent: what PyTorch
    /// runs without the argument, foreach on CUDA, but for-loop for
    /// Adafactor.
    #[arg(long, value_parser = implementation_parser())]
    pub optimizer_impl: Option<Implementation>,
    /// SGD and RMSprop momentum (a momentum buffer per parameter when > 0).
    #[arg(long, default_value_t = 0.0)]
    pub momentum: f64,
    /// Learning rate (does not change memory).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,
    /// model.gradient_checkpointing_enable(use_reentrant=False): every layer
    /// recomputes its activations in backward.
    #[arg(long)]
    pub checkpointing: bool,
    /// With --checkpointing: checkpoint every k-th layer only
    /// (transformers' every_n_layers).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 1,
        requires = "checkpointing",
        allow_negative_numbers = true,
        value_parser = parse_count
    )]
    pub checkpoint_every: usize,
    /// Gradient accumulation: micro-batches of --batch per optimizer step.
    #[arg(long, value_name = "M", default_value_t = 1, allow_negative_numbers = true,
          value_parser = parse_count)]
    pub accumulation: usize,
    /// Training steps (default 3) or inference passes (default 2), at most
    /// 1000.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_count)]
    pub steps: Option<usize>,
    /// PYTORCH_CUDA_ALLOC_CONF, e.g. "expandable_segments:True" or
    /// "max_split_size_mb:128". Its per_process_memory_fraction:F is the
    /// limit (F x the GPU's total memory) unless --memory-fraction or
    /// --memory-limit gives one.
    #[arg(long, value_name = "CONF", default_value = "")]
    pub alloc_conf: String,
    /// Inference: the passes' autograd context. no-grad: `with
    /// torch.no_grad():`; inference-mode: `with torch.inference_mode():`;
    /// enabled: none, so the forward records the graph and keeps what
    /// backward would need until the logits are deleted.
    #[arg(long, value_enum, default_value = "no-grad")]
    pub grad: GradArg,
    /// Generate: the tokens generated after the --seq prompt
    /// (max_new_tokens = min_new_tokens).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub new_tokens: i64,
    /// Generate: the KV cache.
    #[arg(long, value_enum, default_value = "dynamic")]
    pub cache: CacheArg,
    /// LoRA of rank R: peft's get_peft_model(model, LoraConfig(r=R, ...))
    /// after .cuda(): the base frozen (no gradients, no optimizer state),
    /// float32 adapters on the targets; with --checkpointing also
    /// model.enable_input_require_grads().
    #[arg(long, value_name = "R")]
    pub lora: Option<i64>,
    /// LoRA: lora_alpha (changes no memory).
    #[arg(long, value_name = "A", default_value_t = 8.0, requires = "lora")]
    pub lora_alpha: f64,
    /// LoRA: target_modules, comma-separated (default: peft's for the
    /// family, q_proj,v_proj; all-linear: every linear layer but the
    /// output head, as peft's target_modules="all-linear").
    #[arg(long, value_name = "NAMES", requires = "lora", value_delimiter = ',')]
    pub lora_targets: Vec<String>,
    /// LoRA: lora_dropout (> 0: nn.Dropout on the adapters' input).
    #[arg(long, value_name = "P", default_value_t = 0.0, requires = "lora")]
    pub lora_dropout: f64,
}

/// `--grad`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GradArg {
    /// with torch.no_grad()
    NoGrad,
    /// with torch.inference_mode()
    InferenceMode,
    /// no context: the graph is recorded
    Enabled,
}

/// Where the weights' dtype came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightsFrom {
    /// `--weights`
    Option,
    /// the config's `torch_dtype` / `dtype` (from_config's default)
    Config,
    /// neither: torch's default dtype, fp32
    Default,
}

impl WeightsFrom {
    /// As `--json` writes it.
    pub fn name(self) -> &'static str {
        match self {
            WeightsFrom::Option => "--weights",
            WeightsFrom::Config => "config",
            WeightsFrom::Default => "default",
        }
    }
}

impl WorkloadArgs {
    /// The sequence lengths given (default: 512).
    pub fn seqs(&self) -> Vec<i64> {
        self.seq.as_ref().map_or_else(|| vec![512], |l| l.0.clone())
    }

    /// The weights' dtype and where it came from: `--weights`, else the
    /// config's `torch_dtype` (`dtype` in configs transformers 5 saves),
    /// which `PreTrainedModel._from_config` passes to `_set_default_dtype`
    /// when no `dtype` is given, else fp32.
    pub fn weights(&self, config: &HfConfig) -> (DType, WeightsFrom) {
        if let Some(w) = self.weights {
            return (w.dtype(), WeightsFrom::Option);
        }
        let named = ["dtype", "torch_dtype"]
            .iter()
            .find_map(|k| config.get(k).and_then(|v| v.as_str()));
        match named {
            Some("float32" | "float") => (DType::F32, WeightsFrom::Config),
            Some("bfloat16") => (DType::BF16, WeightsFrom::Config),
            Some("float16" | "half") => (DType::F16, WeightsFrom::Config),
            _ => (DType::F32, WeightsFrom::Default),
        }
    }

    /// What the command line asks that the model cannot take: `--seq` for
    /// an image model (its input is the image, `image_size` square).
    pub fn check(&self, config: &HfConfig) -> anyhow::Result<()> {
        if self.workload(config, 1).task == Task::Image {
            if let Some(s) = &self.seq {
                let size = config
                    .get("image_size")
                    .and_then(|v| v.as_i64())
                    .unwrap_or(224);
                bail!(
                    "--seq {} does not apply to {}: an image model's input is (batch, 3, {size}, {size}) (image_size in its config); leave --seq out",
                    s.0.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","),
                    config.model_type
                );
            }
        }
        Ok(())
    }

    /// The workload at `batch`.
    pub fn workload(&self, config: &HfConfig, batch: i64) -> Workload {
        let task = match self.task {
            Some(TaskArg::Causal) => Task::Causal,
            Some(TaskArg::Mlm) => Task::Mlm,
            Some(TaskArg::Image) => Task::Image,
            None => match config.model_type.as_str() {
                "bert" | "roberta" => Task::Mlm,
                "vit" => Task::Image,
                _ => Task::Causal,
            },
        };
        let mode = match self.mode {
            ModeArg::Train => Mode::Train,
            ModeArg::Infer => Mode::Infer,
            ModeArg::Generate => Mode::Generate,
        };
        Workload {
            task,
            mode,
            batch,
            seq: self.seqs()[0],
            weights: self.weights(config).0,
            autocast: self.autocast.map(|a| match a {
                AutocastArg::Bf16 => DType::BF16,
                AutocastArg::Fp16 => DType::F16,
            }),
            optimizer: self.optimizer,
            optimizer_impl: self
                .optimizer_impl
                .unwrap_or_else(|| self.optimizer.default_implementation()),
            momentum: self.momentum,
            lr: self.lr,
            checkpointing: self
                .checkpointing
                .then_some(Checkpointing::Every(self.checkpoint_every.max(1))),
            steps: self.steps.unwrap_or(match mode {
                Mode::Train => 3,
                Mode::Infer => 2,
                Mode::Generate => 1,
            }),
            accumulation: self.accumulation.max(1),
            new_tokens: self.new_tokens,
            lora: self.lora.map(|r| LoraSpec {
                r,
                alpha: self.lora_alpha,
                targets: self.lora_targets.clone(),
                dropout: self.lora_dropout,
            }),
            cache: match self.cache {
                CacheArg::Dynamic => CacheKind::Dynamic,
                CacheArg::Static => CacheKind::Static,
            },
            grad: match self.grad {
                GradArg::NoGrad => GradMode::NoGrad,
                GradArg::InferenceMode => GradMode::InferenceMode,
                GradArg::Enabled => GradMode::Enabled,
            },
            parallel: None,
        }
    }

    /// The allocator settings.
    pub fn allocator(&self) -> anyhow::Result<AllocatorConfig> {
        allocator_of(&self.alloc_conf)
    }
}

/// `--alloc-conf`'s settings; `backend:cudaMallocAsync` refused: the
/// workload's figures are the native allocator's replayed, and that
/// backend's reserved memory is the driver's pool (`vramscope run` runs a
/// script under it, its reserved memory named unmeasured).
fn allocator_of(conf: &str) -> anyhow::Result<AllocatorConfig> {
    let cfg =
        AllocatorConfig::parse(conf).map_err(|e| anyhow::anyhow!("--alloc-conf {conf:?}: {e}"))?;
    if cfg.backend_malloc_async {
        anyhow::bail!(
            "--alloc-conf {conf:?}: backend:cudaMallocAsync is not modelled here (its reserved \
             memory is the driver's pool); `vramscope run` runs a script under it"
        );
    }
    Ok(cfg)
}

/// A positive integer option (`--batch`): at least 1.
pub fn parse_positive(s: &str) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(n) => Err(format!(
            "{n} is not a batch size: expected an integer of at least 1"
        )),
        Err(_) => Err(format!(
            "{s:?} is not a number: expected an integer of at least 1"
        )),
    }
}

/// A count option (`--steps`, `--accumulation`, `--checkpoint-every`): at
/// least 1.
pub fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as usize),
        Ok(n) => Err(format!("{n}: expected an integer of at least 1")),
        Err(_) => Err(format!(
            "{s:?} is not a number: expected an integer of at least 1"
        )),
    }
}

/// A list of positive integers given as one argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntList(pub Vec<i64>);

/// A comma-separated list of positive integers (`512,1024`), or a range
/// (`1..64`, inclusive).
pub fn parse_list(s: &str) -> Result<IntList, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once("..") {
            let a: i64 = a
                .trim()
                .parse()
                .map_err(|_| format!("not a number: {a:?}"))?;
            let b: i64 = b
                .trim()
                .trim_start_matches('=')
                .parse()
                .map_err(|_| format!("not a number: {b:?}"))?;
            if a < 1 || b < a || b - a > 100_000 {
                return Err(format!("bad range {part:?} (expected 1 <= a <= b)"));
            }
            v.extend(a..=b);
        } else {
            let n: i64 = part
                .parse()
                .map_err(|_| format!("not a number: {part:?}"))?;
            if n < 1 {
                return Err(format!("{n}: expected integers of at least 1"));
            }
            v.push(n);
        }
    }
    if v.is_empty() {
        return Err("empty list".into());
    }
    Ok(IntList(v))
}

/// The GPU and its limit.
#[derive(Debug, Args, Clone)]
pub struct GpuArgs {
    /// The GPU (h100, h200, a100-80gb, l4, t4, ..., custom; --help lists them).
    #[arg(long, default_value = "h100", value_parser = parse_gpu, long_help = GPU_HELP)]
    pub gpu: String,
    /// With --gpu custom: the GPU's memory as cudaMemGetInfo reports it
    /// (24GiB, 24GB, 24G or bytes).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub memory: Option<u64>,
    /// With --gpu custom: its compute capability (default 9.0), which picks
    /// PyTorch's cuBLAS workspace size and SDPA backends.
    #[arg(long, value_name = "X.Y")]
    pub capability: Option<String>,
    /// torch.cuda.set_per_process_memory_fraction(F) on that GPU, 0 < F <= 1.
    /// It replaces a per_process_memory_fraction given in --alloc-conf, as
    /// in PyTorch: the allocator starts with the settings' fraction, and
    /// set_per_process_memory_fraction, called later, sets the limit again
    /// (1 removes it).
    #[arg(long, value_name = "F", conflicts_with = "memory_limit")]
    pub memory_fraction: Option<f64>,
    /// A limit (24GiB, 24GB, 24G or bytes), applied as
    /// set_per_process_memory_fraction(LIMIT / total) (replacing
    /// --alloc-conf's per_process_memory_fraction, as --memory-fraction does).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub memory_limit: Option<u64>,
}

impl GpuArgs {
    /// The device profile; the error names a bad --memory / --capability.
    pub fn profile(&self) -> anyhow::Result<DeviceProfile> {
        if self.gpu != "custom" {
            if self.memory.is_some() || self.capability.is_some() {
                bail!(
                    "--memory and --capability describe a GPU of your own: give them with --gpu custom (--gpu {} has its own)",
                    self.gpu
                );
            }
            return vramscope_engine::gpu(&self.gpu)
                .map(|g| g.profile())
                .with_context(|| format!("unknown GPU {:?}", self.gpu));
        }
        let Some(total) = self.memory else {
            bail!("--gpu custom needs --memory SIZE (e.g. --memory 24GiB): the GPU's total memory");
        };
        let capability = match &self.capability {
            None => (9, 0),
            Some(c) => c
                .split_once('.')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                .filter(|&(a, _): &(u32, u32)| (5..=12).contains(&a))
                .with_context(|| {
                    format!("--capability {c:?}: expected a compute capability such as 8.9 (5.0 to 12.x)")
                })?,
        };
        let spec = vramscope_engine::GpuSpec::custom(total, capability);
        let context = spec.context_bytes.value;
        if total <= context {
            bail!(
                "--memory {}: a GPU must have more than the CUDA context the twin assumes ({})",
                format_size(total),
                format_size(context)
            );
        }
        Ok(spec.profile())
    }

    /// The memory fraction to set, if any.
    pub fn fraction(&self) -> anyhow::Result<Option<f64>> {
        let total = self.profile()?.total_memory as f64;
        let f = match (self.memory_fraction, self.memory_limit) {
            (Some(f), _) => Some(f),
            (None, Some(0)) => bail!("--memory-limit 0: the limit must be more than 0 bytes"),
            (None, Some(b)) => Some(b as f64 / total),
            (None, None) => None,
        };
        if let Some(f) = f {
            if !(f > 0.0 && f <= 1.0) {
                if let Some(b) = self.memory_limit {
                    bail!(
                        "--memory-limit {}: more than the GPU's {}",
                        format_size(b),
                        format_size(total as u64)
                    );
                }
                bail!("--memory-fraction {f}: expected a fraction within (0, 1]");
            }
        }
        Ok(f)
    }

    /// What the allocator may hold once the driver has taken `driver` bytes
    /// outside it (its cuBLAS handles), under these options and the
    /// allocator settings `allocator` (`--alloc-conf`, whose
    /// `per_process_memory_fraction` limits it as --memory-fraction does):
    /// [`EstimateOptions::capacity`].
    pub fn capacity(&self, driver: u64, allocator: &AllocatorConfig) -> anyhow::Result<u64> {
        let options = EstimateOptions {
            profile: self.profile()?,
            allocator: allocator.clone(),
            memory_fraction: self.fraction()?,
            unlimited: false,
            record_trace: false,
        };
        Ok(options.capacity(driver))
    }
}

/// Data parallelism over several GPUs of one host (one process per GPU;
/// `--batch` is per rank).
#[derive(Debug, Args, Clone, Default)]
pub struct ParallelArgs {
    /// FSDP2 over N GPUs: `fully_shard(layer)` on every decoder layer, then
    /// `fully_shard(model)` (torch.distributed.fsdp, as the FSDP2 tutorial
    /// and torchtitan apply it), AdamW over the shards. The figures are every
    /// rank's (the fullest first). With --accumulation M the first M - 1
    /// micro-batches run after model.set_requires_gradient_sync(False).
    #[arg(long, value_name = "N")]
    pub fsdp: Option<i64>,
    /// With --fsdp: MixedPrecisionPolicy(param_dtype=..., reduce_dtype=torch.float32):
    /// parameters all-gathered in this dtype, gradients reduced in fp32.
    #[arg(long, value_enum, requires = "fsdp")]
    pub fsdp_param_dtype: Option<DTypeArg>,
    /// With --fsdp: reshard_after_forward=False on every module (the layers
    /// keep their all-gathered parameters from forward to backward).
    #[arg(long, requires = "fsdp")]
    pub fsdp_no_reshard: bool,
    /// With --fsdp: offload_policy=CPUOffloadPolicy() (the shards, their
    /// gradients and the optimizer's states in pinned CPU memory; the
    /// optimizer steps on the CPU).
    #[arg(long, requires = "fsdp")]
    pub fsdp_cpu_offload: bool,
    /// With --fsdp: only this rank (0..N), e.g. for its --snapshot.
    #[arg(long, value_name = "R", requires = "fsdp")]
    pub fsdp_rank: Option<i64>,
    /// DistributedDataParallel over N GPUs (every rank holds the whole
    /// model, its gradients and the reducer's buckets; every rank the same).
    /// With --accumulation M the first M - 1 micro-batches run under
    /// ddp.no_sync().
    #[arg(long, value_name = "N", conflicts_with = "fsdp")]
    pub ddp: Option<i64>,
    /// With --ddp: bucket_cap_mb (DDP's default: 25 MiB buckets, the first
    /// one 1 MiB once they are rebuilt after the first iteration).
    #[arg(long, value_name = "MIB", requires = "ddp")]
    pub ddp_bucket_mb: Option<f64>,
    /// With --ddp: gradient_as_bucket_view=True (the .grads are views of the
    /// buckets: one copy of the gradients less).
    #[arg(long, requires = "ddp")]
    pub ddp_grad_as_bucket_view: bool,
    /// With --ddp: find_unused_parameters=True (buckets cut at the caps from
    /// the start and never rebuilt, one int32 per parameter on the GPU, and
    /// the outputs that have a grad_fn cloned by _DDPSink each forward).
    #[arg(long, requires = "ddp")]
    pub ddp_find_unused_parameters: bool,
}

impl ParallelArgs {
    /// The parallelism for `rank`, if any.
    pub fn parallel(&self, rank: i64) -> anyhow::Result<Option<Parallel>> {
        if let Some(world) = self.ddp {
            if !(2..=4096).contains(&world) {
                bail!("--ddp {world}: expected a number of GPUs from 2 to 4096");
            }
            if let Some(mb) = self.ddp_bucket_mb {
                if !(mb.is_finite() && mb > 0.0) {
                    bail!("--ddp-bucket-mb {mb}: expected a positive number of MiB");
                }
            }
            return Ok(Some(Parallel::Ddp(DdpConfig {
                world,
                bucket_cap_mb: self.ddp_bucket_mb,
                gradient_as_bucket_view: self.ddp_grad_as_bucket_view,
                first_buckets_held: false,
                find_unused_parameters: self.ddp_find_unused_parameters,
            })));
        }
        let Some(world) = self.fsdp else {
            return Ok(None);
        };
        if !(2..=4096).contains(&world) {
            bail!("--fsdp {world}: expected a number of GPUs from 2 to 4096");
        }
        Ok(Some(Parallel::Fsdp(FsdpConfig {
            world,
            rank,
            param_dtype: self.fsdp_param_dtype.map(DTypeArg::dtype),
            reshard_after_forward: !self.fsdp_no_reshard,
            cpu_offload: self.fsdp_cpu_offload,
        })))
    }
}

/// Arguments of `vramscope estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub model: ModelArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub parallel: ParallelArgs,
    /// Batch size (at least 1).
    #[arg(long, allow_negative_numbers = true, value_parser = parse_positive)]
    pub batch: i64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub gpu: GpuArgs,
    /// Print one JSON object (schema in docs/json.md, `vramscope.estimate/1`).
    #[arg(long)]
    pub json: bool,
    /// Write the predicted run as a PyTorch memory snapshot pickle, as
    /// `torch.cuda.memory._dump_snapshot()` would at the end of the workload
    /// (or from an out-of-memory observer when it does not fit). Open it in
    /// pytorch.org/memory_viz or with `vramscope inspect`.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Write the `vramscope inspect` HTML report of the predicted run (one
    /// self-contained file).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Run an estimate under the GPU's limit; when it runs out of memory, run it
/// again without a limit so the figures of the whole workload are known too.
pub fn run_estimate(
    config: &HfConfig,
    workload: &Workload,
    wargs: &WorkloadArgs,
    gpu: &GpuArgs,
    record_trace: bool,
) -> anyhow::Result<(Estimate, Option<Estimate>)> {
    let opts = EstimateOptions {
        profile: gpu.profile()?,
        allocator: wargs.allocator()?,
        memory_fraction: gpu.fraction()?,
        unlimited: false,
        record_trace,
    };
    let what = || {
        format!(
            "the workload cannot be simulated: {} {}",
            config.model_type,
            shape_label(workload, " x seq")
        )
    };
    let limited = estimate(config, workload, &opts).with_context(what)?;
    if limited.oom.is_some() {
        let free = opts.without_limit();
        let unlimited = estimate(config, workload, &free).with_context(what)?;
        Ok((limited, Some(unlimited)))
    } else {
        Ok((limited, None))
    }
}

#[derive(Serialize)]
struct PhaseJson<'a> {
    name: &'a str,
    allocated_bytes: i64,
    peak_allocated_bytes: i64,
    reserved_bytes: i64,
    peak_reserved_bytes: i64,
    requested_bytes: i64,
}

/// One decode step's figures (`--mode generate`).
#[derive(Serialize)]
struct StepJson {
    step: usize,
    allocated_bytes: i64,
    peak_allocated_bytes: i64,
    reserved_bytes: i64,
    peak_reserved_bytes: i64,
    requested_bytes: i64,
}

#[derive(Serialize)]
struct ModuleJson {
    name: String,
    bytes: u64,
    children: Vec<ModuleJson>,
}

#[derive(Serialize)]
struct FitsJson {
    fits: bool,
    capacity_bytes: u64,
    headroom_bytes: i64,
}

#[derive(Serialize)]
struct OomJson<'a> {
    phase: &'a str,
    op: &'a str,
    module: &'a str,
    tried_to_allocate_bytes: u64,
    message: &'a str,
}

#[derive(Serialize)]
struct WorkloadJson<'a> {
    task: &'a str,
    mode: &'a str,
    batch: i64,
    /// `None` (null) for an image model, whose inputs have no sequence
    seq: Option<i64>,
    weights: String,
    weights_from: &'static str,
    autocast: Option<String>,
    optimizer: &'a str,
    optimizer_impl: &'a str,
    momentum: f64,
    checkpointing: Option<String>,
    steps: usize,
    alloc_conf: &'a str,
    grad: &'static str,
    /// generate: the new tokens (null otherwise)
    new_tokens: Option<i64>,
    /// generate: the KV cache, `dynamic` or `static` (null otherwise)
    cache: Option<&'static str>,
    /// LoRA's rank (null without LoRA)
    lora_r: Option<i64>,
    /// LoRA's target modules (null without LoRA; empty: the default)
    lora_targets: Option<Vec<String>>,
    /// `None` (null) on one GPU
    parallel: Option<ParallelJson>,
}

#[derive(Serialize)]
struct ParallelJson {
    kind: &'static str,
    world: i64,
    param_dtype: Option<String>,
    /// (false under DDP: nothing is sharded)
    reshard_after_forward: bool,
    /// the rank the top-level figures are of (the fullest)
    rank: i64,
    /// DDP's `bucket_cap_mb` (null: its default; null under FSDP)
    bucket_cap_mb: Option<f64>,
    /// DDP's `gradient_as_bucket_view` (null under FSDP)
    gradient_as_bucket_view: Option<bool>,
    /// FSDP's `CPUOffloadPolicy()` (false under DDP)
    cpu_offload: bool,
    /// DDP's `find_unused_parameters` (null under FSDP)
    find_unused_parameters: Option<bool>,
    /// DDP: the figures if ProcessGroupNCCL frees the first iteration's
    /// buckets late, held to the end (the upper bound; null under FSDP)
    #[serde(skip_serializing_if = "Option::is_none")]
    first_buckets_held: Option<PeaksJson>,
}

#[derive(Serialize)]
struct PeaksJson {
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
}

#[derive(Serialize)]
struct RanksJson<'a> {
    ranks: Vec<i64>,
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
    peak_phase: &'a str,
    phases: Vec<PhaseJson<'a>>,
}

#[derive(Serialize)]
struct EstimateJson<'a> {
    schema: &'static str,
    model_type: &'a str,
    parameters: u64,
    parameter_bytes: u64,
    workload: WorkloadJson<'a>,
    gpu: &'a str,
    gpu_key: &'a str,
    gpu_total_memory_bytes: u64,
    gpu_constants: BTreeMap<&'static str, GradeJson>,
    config_defaults: BTreeMap<String, i64>,
    peak_allocated_bytes: i64,
    peak_reserved_bytes: i64,
    peak_phase: &'a str,
    phases: Vec<PhaseJson<'a>>,
    breakdown_at_peak: BTreeMap<String, u64>,
    by_module: ModuleJson,
    fits: FitsJson,
    oom: Option<OomJson<'a>>,
    unmeasured: &'a [String],
    /// with several ranks: each group of ranks with the same figures
    #[serde(skip_serializing_if = "Option::is_none")]
    ranks: Option<Vec<RanksJson<'a>>>,
    /// generate: each decode step's figures
    #[serde(skip_serializing_if = "Option::is_none")]
    decode_steps: Option<Vec<StepJson>>,
}

fn phase_json(p: &vramscope_models::PhaseFigures) -> PhaseJson<'_> {
    PhaseJson {
        name: &p.name,
        allocated_bytes: p.allocated_bytes,
        peak_allocated_bytes: p.peak_allocated_bytes,
        reserved_bytes: p.reserved_bytes,
        peak_reserved_bytes: p.peak_reserved_bytes,
        requested_bytes: p.requested_bytes,
    }
}

/// The module tree at the peak: each node's bytes include its children.
fn module_tree(flat: &[(String, u64)]) -> ModuleJson {
    let mut root = ModuleJson {
        name: String::new(),
        bytes: 0,
        children: Vec::new(),
    };
    // each path prefix's place among its parent's children (a search of
    // the children would be quadratic in the number of layers)
    let mut place: HashMap<&str, usize> = HashMap::new();
    for (path, bytes) in flat {
        root.bytes += bytes;
        let mut node = &mut root;
        if path.is_empty() {
            continue;
        }
        let mut end = 0;
        for part in path.split('.') {
            if end > 0 {
                end += 1;
            }
            end += part.len();
            let prefix = &path[..end];
            let i = *place.entry(prefix).or_insert_with(|| {
                node.children.push(ModuleJson {
                    name: prefix.to_owned(),
                    bytes: 0,
                    children: Vec::new(),
                });
                node.children.len() - 1
            });
            node = &mut node.children[i];
            node.bytes += bytes;
        }
    }
    fn sort(n: &mut ModuleJson) {
        n.children
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        n.children.iter_mut().for_each(sort);
    }
    sort(&mut root);
    root
}

/// `every layer`, `every 2 layers`, `layers 0,3,5`.
pub fn checkpointing_name(c: &Checkpointing) -> String {
    match c {
        Checkpointing::Every(1) => "every layer".into(),
        Checkpointing::Every(k) => format!("every {k} layers"),
        Checkpointing::Layers(v) => format!(
            "layers {}",
            v.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// Layer indices as runs for a person to read: `0-29, 31` (sorted input).
pub fn layer_runs(layers: &[usize]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        runs.push(match j - i {
            0 => layers[i].to_string(),
            1 => format!("{}, {}", layers[i], layers[j]),
            _ => format!("{}-{}", layers[i], layers[j]),
        });
        i = j + 1;
    }
    runs.join(", ")
}

fn task_name(t: Task) -> &'static str {
    match t {
        Task::Causal => "causal",
        Task::Mlm => "mlm",
        Task::Image => "image",
    }
}

fn dtype_name(d: DType) -> String {
    match d {
        DType::F32 => "fp32".into(),
        DType::BF16 => "bf16".into(),
        DType::F16 => "fp16".into(),
        o => format!("{o:?}"),
    }
}

/// The line a report prints when some of the GPU's constants were not
/// measured on it ("context size estimated for this GPU"); `None` on a
/// measured GPU.
pub fn grades_note(profile: &DeviceProfile) -> Option<String> {
    let est = profile.grades.estimated();
    (!est.is_empty()).then(|| {
        let list = match est.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => est.join(""),
        };
        format!(
            "note: {} was not measured here: its {list} are estimated (`vramscope estimate --help` on --gpu says from what)",
            profile.name
        )
    })
}

/// The lines a report prints about what the command line left to the
/// config: the weights' dtype taken from it, the class defaults filled in
/// for sizes it leaves out.
pub fn config_notes(wargs: &WorkloadArgs, config: &HfConfig) -> Vec<String> {
    let mut notes = Vec::new();
    let (dtype, from) = wargs.weights(config);
    if from == WeightsFrom::Config {
        notes.push(format!(
            "note: weights {}: the config's torch_dtype, which from_config(config) uses when no dtype is given (--weights to choose)",
            dtype_name(dtype)
        ));
    }
    let d = config.defaulted();
    if !d.is_empty() {
        let fields: Vec<String> = d.iter().map(|(k, v)| format!("{k}={v}")).collect();
        notes.push(format!(
            "note: the config leaves out {} field(s); transformers' {} class defaults were used: {}",
            d.len(),
            config.model_type,
            fields.join(", ")
        ));
    }
    notes
}

/// The grade of each of the GPU's constants, for `--json`.
pub fn grades_json(profile: &DeviceProfile) -> BTreeMap<&'static str, GradeJson> {
    profile
        .grades
        .named()
        .into_iter()
        .map(|(key, _, p)| {
            (
                key,
                GradeJson {
                    grade: p.grade.label(),
                    source: p.source,
                },
            )
        })
        .collect()
}

/// One constant's grade in `--json` (`gpu_constants`).
#[derive(Debug, Serialize)]
pub struct GradeJson {
    /// `measured`, `from PyTorch's source`, `from NVIDIA's specifications`
    /// or `estimated`
    pub grade: &'static str,
    /// where it comes from
    pub source: &'static str,
}

/// Run `vramscope estimate`.
pub fn run(args: &EstimateArgs) -> anyhow::Result<ExitCode> {
    let config = args.model.config()?;
    if args.workload.seqs().len() > 1 {
        bail!("estimate takes one --seq; `vramscope plan` sweeps several");
    }
    args.workload.check(&config)?;
    let mut w = args.workload.workload(&config, args.batch);
    let record = args.snapshot.is_some() || args.html.is_some();
    // every group of ranks with the same shards, the fullest first
    let mut per_rank: Vec<(Vec<i64>, Workload, Estimate, Option<Estimate>)> = Vec::new();
    let classes = match args.parallel.fsdp {
        Some(world) => {
            args.parallel.parallel(0)?;
            match args.parallel.fsdp_rank {
                Some(r) if (0..world).contains(&r) => vec![vec![r]],
                Some(r) => bail!("--fsdp-rank {r}: expected a rank from 0 to {}", world - 1),
                None => vramscope_models::parallel::fsdp::rank_classes(
                    &config,
                    w.task,
                    world,
                    w.lora.as_ref(),
                )?,
            }
        }
        // DDP: every rank the same
        None => match args.parallel.ddp {
            Some(world) => {
                args.parallel.parallel(0)?;
                vec![(0..world).collect()]
            }
            None => vec![vec![0]],
        },
    };
    for ranks in classes {
        let mut wr = w.clone();
        wr.parallel = args.parallel.parallel(ranks[0])?;
        let (l, u) = run_estimate(&config, &wr, &args.workload, &args.gpu, record)?;
        per_rank.push((ranks, wr, l, u));
    }
    let key = |e: &(Vec<i64>, Workload, Estimate, Option<Estimate>)| {
        let est = e.3.as_ref().unwrap_or(&e.2);
        (est.peak_reserved_bytes, est.peak_allocated_bytes)
    };
    let fullest = (0..per_rank.len())
        .max_by(|&a, &b| key(&per_rank[a]).cmp(&key(&per_rank[b])).then(b.cmp(&a)))
        .unwrap_or(0);
    let (rank, wf, limited, unlimited) = &per_rank[fullest];
    w = wf.clone();
    let (limited, unlimited) = (limited, unlimited);
    if record {
        write_predicted(args, &config, &w, limited)?;
    }
    // the figures: the whole workload (without a limit when it ran out)
    let est = unlimited.as_ref().unwrap_or(limited);
    let fullest_rank = rank[0];
    // less what the driver takes over the whole workload
    let capacity = args.gpu.capacity(
        est.events.driver.iter().map(|d| d.what).sum(),
        &args.workload.allocator()?,
    )?;
    let oom = limited.oom.as_ref();
    let fits = oom.is_none();
    let profile = args.gpu.profile()?;
    // DDP: the same workload with the first iteration's buckets never freed
    // (ProcessGroupNCCL's late free, pytorch/pytorch#150079, at its longest;
    // buckets are rebuilt in training only, and never when finding unused
    // parameters)
    let held = match &w.parallel {
        Some(Parallel::Ddp(c)) if w.mode == Mode::Train && !c.find_unused_parameters => {
            let mut wh = w.clone();
            wh.parallel = Some(Parallel::Ddp(DdpConfig {
                first_buckets_held: true,
                ..c.clone()
            }));
            let (l, u) = run_estimate(&config, &wh, &args.workload, &args.gpu, false)?;
            Some(u.unwrap_or(l))
        }
        _ => None,
    };
    // written whole at the end ([`emit`]): stdout is line-buffered, and the
    // module tree of a large model is thousands of lines
    let mut out: Vec<u8> = Vec::with_capacity(64 << 10);
    let code = ExitCode::from(if fits { EXIT_OK } else { EXIT_DIFFERENT });
    if args.json {
        let j = EstimateJson {
            schema: "vramscope.estimate/1",
            model_type: &config.model_type,
            parameters: est.parameter_count,
            parameter_bytes: est.parameter_bytes,
            workload: WorkloadJson {
                task: task_name(w.task),
                mode: w.mode.name(),
                batch: w.batch,
                seq: (w.task != Task::Image).then_some(w.seq),
                weights: dtype_name(w.weights),
                weights_from: args.workload.weights(&config).1.name(),
                autocast: w.autocast.map(dtype_name),
                optimizer: w.optimizer.name(),
                optimizer_impl: w.optimizer_impl.name(),
                momentum: w.momentum,
                checkpointing: w.checkpointing.as_ref().map(checkpointing_name),
                steps: w.steps,
                alloc_conf: &args.workload.alloc_conf,
                grad: w.grad.name(),
                new_tokens: (w.mode == Mode::Generate).then_some(w.new_tokens),
                cache: (w.mode == Mode::Generate).then_some(w.cache.name()),
                lora_r: w.lora.as_ref().map(|l| l.r),
                lora_targets: w.lora.as_ref().map(|l| l.targets.clone()),
                parallel: w.parallel.as_ref().map(|p| match p {
                    Parallel::Fsdp(c) => ParallelJson {
                        kind: "fsdp",
                        world: c.world,
                        param_dtype: c.param_dtype.map(dtype_name),
                        reshard_after_forward: c.reshard_after_forward,
                        rank: fullest_rank,
                        bucket_cap_mb: None,
                        gradient_as_bucket_view: None,
                        cpu_offload: c.cpu_offload,
                        find_unused_parameters: None,
                        first_buckets_held: None,
                    },
                    Parallel::Ddp(c) => ParallelJson {
                        kind: "ddp",
                        world: c.world,
                        param_dtype: None,
                        reshard_after_forward: false,
                        rank: fullest_rank,
                        bucket_cap_mb: c.bucket_cap_mb,
                        gradient_as_bucket_view: Some(c.gradient_as_bucket_view),
                        cpu_offload: false,
                        find_unused_parameters: Some(c.find_unused_parameters),
                        first_buckets_held: held.as_ref().map(|h| PeaksJson {
                            peak_allocated_bytes: h.peak_allocated_bytes,
                            peak_reserved_bytes: h.peak_reserved_bytes,
                        }),
                    },
                }),
            },
            gpu: profile.name,
            gpu_key: profile.key,
            gpu_total_memory_bytes: profile.total_memory,
            gpu_constants: grades_json(&profile),
            config_defaults: config.defaulted(),
            peak_allocated_bytes: est.peak_allocated_bytes,
            peak_reserved_bytes: est.peak_reserved_bytes,
            peak_phase: &est.peak_phase,
            phases: est.phases.iter().map(phase_json).collect(),
            breakdown_at_peak: est
                .breakdown_at_peak
                .iter()
                .map(|(c, b)| (c.to_string(), *b))
                .collect(),
            by_module: module_tree(&est.by_module_at_peak),
            fits: FitsJson {
                fits,
                capacity_bytes: capacity,
                headroom_bytes: capacity as i64 - est.peak_reserved_bytes,
            },
            unmeasured: &est.unmeasured,
            oom: oom.map(|o| OomJson {
                phase: &o.phase,
                op: &o.op,
                module: &o.module,
                tried_to_allocate_bytes: o.bytes,
                message: &o.message,
            }),
            decode_steps: (w.mode == Mode::Generate).then(|| {
                est.decode_steps
                    .iter()
                    .enumerate()
                    .map(|(step, f)| StepJson {
                        step,
                        allocated_bytes: f.allocated_bytes,
                        peak_allocated_bytes: f.peak_allocated_bytes,
                        reserved_bytes: f.reserved_bytes,
                        peak_reserved_bytes: f.peak_reserved_bytes,
                        requested_bytes: f.requested_bytes,
                    })
                    .collect()
            }),
            ranks: w.parallel.is_some().then(|| {
                per_rank
                    .iter()
                    .map(|(ranks, _, l, u)| {
                        let e = u.as_ref().unwrap_or(l);
                        RanksJson {
                            ranks: ranks.clone(),
                            peak_allocated_bytes: e.peak_allocated_bytes,
                            peak_reserved_bytes: e.peak_reserved_bytes,
                            peak_phase: &e.peak_phase,
                            phases: e.phases.iter().map(phase_json).collect(),
                        }
                    })
                    .collect()
            }),
        };
        return emit_json(&j, code);
    } else {
        let what = format!(
            "{} ({:.2} B parameters, {}), {}, weights {}{}{}{}",
            config.model_type,
            est.parameter_count as f64 / 1e9,
            format_size(est.parameter_bytes),
            shape_label(&w, " x seq"),
            dtype_name(w.weights),
            w.autocast
                .map(|a| format!(", autocast {}", dtype_name(a)))
                .unwrap_or_default(),
            w.checkpointing
                .as_ref()
                .map(|c| format!(", checkpointing {}", checkpointing_name(c)))
                .unwrap_or_default(),
            if w.mode == Mode::Infer && w.grad != GradMode::NoGrad {
                format!(", {}", w.grad.name())
            } else {
                String::new()
            },
        );
        writeln!(out, "{what}")?;
        for n in config_notes(&args.workload, &config) {
            writeln!(out, "{n}")?;
        }
        if let Some(Parallel::Ddp(c)) = &w.parallel {
            writeln!(
                out,
                "DDP over {} GPUs, buckets of {} MiB{}, batch per rank; every rank the same",
                c.world,
                c.bucket_cap_mb.unwrap_or(25.0),
                if c.gradient_as_bucket_view {
                    ", gradients as bucket views"
                } else {
                    ""
                },
            )?;
            if let Some(h) = &held {
                writeln!(
                    out,
                    "note: if NCCL's watchdog frees the first iteration's buckets late (pytorch/pytorch#150079, a race; the figures below free them at the rebuild), up to peak allocated {}, peak reserved {}{}",
                    format_size(h.peak_allocated_bytes.max(0) as u64),
                    format_size(h.peak_reserved_bytes.max(0) as u64),
                    if fits && h.peak_reserved_bytes > capacity as i64 {
                        ": over the limit, so such a run would run out of memory"
                    } else {
                        ""
                    },
                )?;
            }
        }
        if let Some(Parallel::Fsdp(c)) = &w.parallel {
            writeln!(
                out,
                "FSDP2 over {} GPUs{}{}{}, batch per rank; the figures are rank {}'s (the fullest){}",
                c.world,
                c.param_dtype
                    .map(|d| format!(", param_dtype {} (reduce fp32)", dtype_name(d)))
                    .unwrap_or_default(),
                if c.reshard_after_forward {
                    ""
                } else {
                    ", no reshard after forward"
                },
                if c.cpu_offload { ", CPU offload" } else { "" },
                fullest_rank,
                if per_rank.len() > 1 {
                    "; ranks differ, see below"
                } else {
                    "; every rank the same"
                },
            )?;
        }
        if fits {
            writeln!(
                out,
                "FITS on {}: peak reserved {} of {} ({} headroom)",
                profile.name,
                signed_size(est.peak_reserved_bytes),
                format_size(capacity),
                signed_size(capacity as i64 - est.peak_reserved_bytes)
            )?;
        } else if let Some(o) = oom {
            writeln!(
                out,
                "DOES NOT FIT on {}: out of memory in {} ({}{}), tried to allocate {}; the whole workload needs {} reserved, the limit is {}",
                profile.name,
                o.phase,
                o.op,
                if o.module.is_empty() { String::new() } else { format!(" in {}", o.module) },
                format_size(o.bytes),
                signed_size(est.peak_reserved_bytes),
                format_size(capacity)
            )?;
        }
        if let Some(note) = grades_note(&profile) {
            writeln!(out, "{note}")?;
        }
        writeln!(
            out,
            "peak allocated {} in {}, peak reserved {}",
            signed_size(est.peak_allocated_bytes),
            est.peak_phase,
            signed_size(est.peak_reserved_bytes)
        )?;
        for u in &est.unmeasured {
            writeln!(out, "warning: {u}")?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:<12} {:>12} {:>12} {:>12}",
            "phase", "allocated", "peak alloc", "peak resv"
        )?;
        for p in &est.phases {
            writeln!(
                out,
                "{:<12} {:>12} {:>12} {:>12}",
                p.name,
                signed_size(p.allocated_bytes),
                signed_size(p.peak_allocated_bytes),
                signed_size(p.peak_reserved_bytes)
            )?;
        }
        if per_rank.len() > 1 {
            writeln!(out)?;
            writeln!(
                out,
                "{:<12} {:>12} {:>12}",
                "ranks", "peak alloc", "peak resv"
            )?;
            for (ranks, _, l, u) in &per_rank {
                let e = u.as_ref().unwrap_or(l);
                let names: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
                writeln!(
                    out,
                    "{:<12} {:>12} {:>12}",
                    names.join(","),
                    signed_size(e.peak_allocated_bytes),
                    signed_size(e.peak_reserved_bytes)
                )?;
            }
        }
        writeln!(out)?;
        writeln!(out, "live at the peak, by category:")?;
        for (c, b) in &est.breakdown_at_peak {
            let pct = 100.0 * *b as f64 / est.peak_allocated_bytes.max(1) as f64;
            writeln!(
                out,
                "  {:<20} {:>12} {:>5.1}%",
                c.to_string(),
                format_size(*b),
                pct
            )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "heaviest modules at the peak (a number in a path written *, those modules summed; xN: how many):"
        )?;
        let groups: Vec<_> = est.module_groups_at_peak().into_iter().take(10).collect();
        // the path column as wide as the longest path shown (at least the
        // top level's label)
        let width = groups
            .iter()
            .map(|g| g.path.len())
            .max()
            .unwrap_or(0)
            .max("(top level)".len());
        for g in &groups {
            let (path, note) = if g.path.is_empty() {
                // what no submodule holds: name its categories, the part of
                // the total that is otherwise one opaque line
                let cats = est.top_level_at_peak();
                let mut parts: Vec<String> = cats
                    .iter()
                    .take(3)
                    .map(|(c, b)| format!("{c} {}", format_size(*b)))
                    .collect();
                if cats.len() > 3 {
                    parts.push("...".into());
                }
                ("(top level)", parts.join(", "))
            } else if g.count > 1 {
                (g.path.as_str(), format!("x{}", g.count))
            } else {
                (g.path.as_str(), String::new())
            };
            let line = format!("  {path:<width$} {:>12}  {note}", format_size(g.bytes));
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    emit(&out, code)
}

/// [`emit`] of `j` as pretty JSON and a newline, written as it is
/// serialized, 64 KiB at a time: a long generation's decode steps are a
/// megabyte of it (about 240 bytes each), whose pages a whole buffer would
/// fault in (`perf record -e page-faults`: 310 of 2,880 at 4,096 new tokens).
fn emit_json<T: Serialize>(j: &T, code: ExitCode) -> anyhow::Result<ExitCode> {
    let mut w = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    // (serde_json's error gives back the io error it wraps)
    let r = serde_json::to_writer_pretty(&mut w, j)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(w))
        .and_then(|()| w.flush());
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code),
        r => r.map(|()| code).map_err(Into::into),
    }
}

/// Write a command's whole output to stdout and end with `code`, which a
/// closed pipe (`vramscope ... | head`) does not change: the verdict is
/// known before the output is written.
pub fn emit(out: &[u8], code: ExitCode) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(code),
        r => r.map(|()| code).map_err(Into::into),
    }
}

/// `--snapshot` and `--html`: the run as the allocator twin recorded it
/// (the run under the limit: on an out-of-memory, up to the `oom`).
fn write_predicted(
    args: &EstimateArgs,
    config: &HfConfig,
    w: &Workload,
    est: &Estimate,
) -> anyhow::Result<()> {
    let cfg = args.workload.allocator()?;
    let snap = predicted_snapshot(est, w, &args.workload.alloc_conf, &cfg)
        .context("the estimate recorded no allocator trace")?;
    if let Some(path) = &args.snapshot {
        vramscope_snapshot::write::write_snapshot_file(&snap, path, &WriteOptions::default())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        let mut report =
            vramscope_report::analyze(&snap, &cfg, &vramscope_report::Options::default());
        report.snapshot = format!(
            "predicted: {} {}",
            config.model_type,
            shape_label(w, " seq")
        );
        let page = vramscope_report::html::render_snapshot(&snap, &cfg, &report);
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// "train batch B{seq}" / "infer batch B{seq}": `seq` is how the sequence
/// length is introduced (none for images).
fn shape_label(w: &Workload, seq: &str) -> String {
    let mode = w.mode.name();
    if w.task == Task::Image {
        format!("{mode} batch {}", w.batch)
    } else {
        format!("{mode} batch {}{seq} {}", w.batch, w.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_malloc_async_backend_is_refused() {
        assert!(allocator_of("expandable_segments:True").is_ok());
        assert!(allocator_of("backend:native").is_ok());
        let e = allocator_of("backend:cudaMallocAsync")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("backend:cudaMallocAsync is not modelled here"),
            "{e}"
        );
        assert!(allocator_of("max_split_size_mb:x").is_err());
    }

    #[test]
    fn layer_runs_read_as_ranges() {
        assert_eq!(layer_runs(&[]), "");
        assert_eq!(layer_runs(&[3]), "3");
        assert_eq!(layer_runs(&[0, 1]), "0, 1");
        assert_eq!(layer_runs(&[0, 1, 2, 3, 5, 7, 8, 9]), "0-3, 5, 7-9");
    }

    #[test]
    fn the_preset_list_is_asked_for_only_by_estimate_and_plan() {
        let args = |s: &str| -> Vec<std::ffi::OsString> { s.split(' ').map(Into::into).collect() };
        assert!(asks_for_presets(&args("vramscope estimate --model list")));
        assert!(asks_for_presets(&args(
            "vramscope plan --mode train --model=list"
        )));
        assert!(!asks_for_presets(&args(
            "vramscope estimate --model gpt2 --mode train"
        )));
        assert!(!asks_for_presets(&args("vramscope demo --model list")));
        // a config file named `list` is a config file
        assert!(!asks_for_presets(&args("vramscope estimate --config list")));
        assert!(!asks_for_presets(&args(
            "vramscope estimate -- --model list"
        )));
    }

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse_list("512,1024").unwrap().0, vec![512, 1024]);
        assert_eq!(parse_list("1..4").unwrap().0, vec![1, 2, 3, 4]);
        assert_eq!(parse_list("1..=2,8").unwrap().0, vec![1, 2, 8]);
        assert!(parse_list("0").is_err());
        assert!(parse_list("4..1").is_err());
        assert!(parse_list("x").is_err());
        assert!(parse_list("").is_err());
    }

    #[test]
    fn module_tree_sums_children() {
        let t = module_tree(&[
            ("model.layers.0.mlp".into(), 10),
            ("model.layers.0.self_attn".into(), 5),
            ("model.layers.1.mlp".into(), 7),
            ("".into(), 3),
        ]);
        assert_eq!(t.bytes, 25);
        let model = &t.children[0];
        assert_eq!((model.name.as_str(), model.bytes), ("model", 22));
        let layers = &model.children[0];
        assert_eq!(layers.children[0].name, "model.layers.0");
        assert_eq!(layers.children[0].bytes, 15);
        assert_eq!(layers.children[1].bytes, 7);
    }
}
