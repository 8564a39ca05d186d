//! What each lever does to a workload, computed by the twin: the peak
//! reserved memory at a reference batch and the largest batch under the
//! limit, for the workload changed in one respect.

use vramscope_alloc::AllocatorConfig;
use vramscope_engine::DType;
use vramscope_models::{
    estimate, peft_lora_targets, Checkpointing, EstimateOptions, GradMode, HfConfig, LoraSpec,
    Mode, OptimizerKind, Result, Workload,
};

use crate::search::{max_batch, try_batch, Try};

/// One lever: the workload and allocator settings with one change.
#[derive(Debug, Clone)]
pub struct Lever {
    /// short name (`weights bf16`, `checkpointing every layer`, ...)
    pub name: String,
    /// the changed workload
    pub workload: Workload,
    /// the changed `PYTORCH_CUDA_ALLOC_CONF`
    pub allocator: AllocatorConfig,
}

/// What a lever does.
#[derive(Debug, Clone)]
pub struct LeverOutcome {
    /// the lever
    pub lever: Lever,
    /// the peak reserved bytes at the reference batch: under the limit when
    /// it fits, else of the whole workload without a limit
    pub peak_reserved_bytes: i64,
    /// whether the reference batch completes under the limit
    pub fits: bool,
    /// the largest batch under the limit
    pub max_batch: i64,
    /// its search stopped with no batch running out (`MaxBatch::capped`):
    /// `max_batch` is a lower bound
    pub capped: bool,
}

fn alloc_with(base: &AllocatorConfig, conf: &str) -> Option<AllocatorConfig> {
    // the base settings plus one option (`PYTORCH_CUDA_ALLOC_CONF` keeps the
    // last value of a repeated key)
    let text = match base.settings.as_str() {
        "" => conf.to_string(),
        s => format!("{s},{conf}"),
    };
    AllocatorConfig::parse(&text).ok()
}

/// The levers that apply to `base` (the baseline first).
pub fn lever_list(config: &HfConfig, base: &Workload, alloc: &AllocatorConfig) -> Vec<Lever> {
    let mut v = vec![Lever {
        name: "baseline".into(),
        workload: base.clone(),
        allocator: alloc.clone(),
    }];
    let mut push = |name: &str, w: Workload, a: Option<AllocatorConfig>| {
        v.push(Lever {
            name: name.into(),
            workload: w,
            allocator: a.unwrap_or_else(|| alloc.clone()),
        })
    };
    if base.weights == DType::F32 {
        push(
            "weights fp32 -> bf16",
            Workload {
                weights: DType::BF16,
                ..base.clone()
            },
            None,
        );
        if base.autocast.is_none() {
            push(
                "bf16 autocast",
                Workload {
                    autocast: Some(DType::BF16),
                    ..base.clone()
                },
                None,
            );
        }
    }
    if base.mode == Mode::Train {
        // the optimizer's other implementations (fused AdamW: no step
        // temporaries; for-loop: one parameter's at a time)
        for &i in base.optimizer.implementations() {
            if i != base.optimizer_impl {
                push(
                    &format!("optimizer step -> {i}"),
                    Workload {
                        optimizer_impl: i,
                        ..base.clone()
                    },
                    None,
                );
            }
        }
        // a lever for the optimizers that keep two moments per parameter
        // (each new optimizer decides here)
        let two_moments = match base.optimizer {
            OptimizerKind::AdamW | OptimizerKind::Adam => true,
            OptimizerKind::Sgd
            | OptimizerKind::Adagrad
            | OptimizerKind::RmsProp
            | OptimizerKind::Adafactor => false,
        };
        if two_moments {
            // factored second moments: a row and a column per matrix
            push(
                "optimizer -> Adafactor",
                Workload {
                    optimizer: OptimizerKind::Adafactor,
                    optimizer_impl: OptimizerKind::Adafactor.default_implementation(),
                    ..base.clone()
                },
                None,
            );
            push(
                "optimizer -> SGD momentum 0.9",
                Workload {
                    optimizer: OptimizerKind::Sgd,
                    momentum: 0.9,
                    ..base.clone()
                },
                None,
            );
        }
        if !(base.optimizer == OptimizerKind::Sgd && base.momentum == 0.0) {
            push(
                "optimizer -> SGD (no momentum)",
                Workload {
                    optimizer: OptimizerKind::Sgd,
                    momentum: 0.0,
                    ..base.clone()
                },
                None,
            );
        }
        // LoRA (peft): on a full fine-tune, peft's default adapters; on a
        // LoRA run, half the rank and the other target set
        match &base.lora {
            None => {
                if peft_lora_targets(&config.model_type).is_some() {
                    push(
                        "LoRA r=8 (peft's default targets)",
                        Workload {
                            lora: Some(LoraSpec {
                                r: 8,
                                alpha: 8.0,
                                targets: Vec::new(),
                                dropout: 0.0,
                            }),
                            ..base.clone()
                        },
                        None,
                    );
                }
            }
            Some(l) => {
                if l.r >= 2 {
                    push(
                        &format!("LoRA rank {} -> {}", l.r, l.r / 2),
                        Workload {
                            lora: Some(LoraSpec {
                                r: l.r / 2,
                                ..l.clone()
                            }),
                            ..base.clone()
                        },
                        None,
                    );
                }
                let (name, targets) = if l.targets == ["all-linear"] {
                    match peft_lora_targets(&config.model_type) {
                        Some(_) => ("LoRA targets -> peft's default", Vec::new()),
                        None => (
                            "LoRA targets -> q_proj,v_proj",
                            vec!["q_proj".into(), "v_proj".into()],
                        ),
                    }
                } else {
                    ("LoRA targets -> all-linear", vec!["all-linear".to_string()])
                };
                push(
                    name,
                    Workload {
                        lora: Some(LoraSpec {
                            targets,
                            ..l.clone()
                        }),
                        ..base.clone()
                    },
                    None,
                );
            }
        }
        if base.checkpointing.is_none() {
            let layers = num_layers(config);
            push(
                "checkpointing every layer",
                Workload {
                    checkpointing: Some(Checkpointing::Every(1)),
                    ..base.clone()
                },
                None,
            );
            for k in [2usize, 4] {
                if layers.is_some_and(|l| l > k) {
                    push(
                        &format!("checkpointing every {k} layers"),
                        Workload {
                            checkpointing: Some(Checkpointing::Every(k)),
                            ..base.clone()
                        },
                        None,
                    );
                }
            }
        }
    }
    if base.mode == Mode::Infer {
        // the passes' autograd context: what `torch.no_grad()` buys over a
        // forward that records the graph, and `inference_mode` beside it
        for (name, grad) in [
            ("torch.no_grad()", GradMode::NoGrad),
            ("torch.inference_mode()", GradMode::InferenceMode),
            ("grad enabled (no no_grad)", GradMode::Enabled),
        ] {
            if base.grad != grad {
                push(
                    name,
                    Workload {
                        grad,
                        ..base.clone()
                    },
                    None,
                );
            }
        }
    }
    if !alloc.expandable_segments {
        push(
            "expandable_segments:True",
            base.clone(),
            alloc_with(alloc, "expandable_segments:True"),
        );
    }
    if alloc.max_split_size == u64::MAX {
        push(
            "max_split_size_mb:128",
            base.clone(),
            alloc_with(alloc, "max_split_size_mb:128"),
        );
    }
    v
}

/// The number of decoder/encoder layers a config declares.
pub fn num_layers(config: &HfConfig) -> Option<usize> {
    ["num_hidden_layers", "n_layer", "num_layers"]
        .iter()
        .find_map(|k| config.opt_int(k).ok().flatten())
        .map(|n| n.max(0) as usize)
}

/// Run every lever: its peak reserved at `batch` and its largest batch.
/// `progress` sees each lever's name as it starts.
pub fn levers(
    config: &HfConfig,
    base: &Workload,
    options: &EstimateOptions,
    batch: i64,
    progress: &mut dyn FnMut(&str, &Try),
) -> Result<Vec<LeverOutcome>> {
    let mut out = Vec::new();
    for lever in lever_list(config, base, &options.allocator) {
        let opts = EstimateOptions {
            allocator: lever.allocator.clone(),
            ..options.clone()
        };
        let free = EstimateOptions {
            unlimited: true,
            memory_fraction: None,
            ..opts.clone()
        };
        let w = Workload {
            batch,
            ..lever.workload.clone()
        };
        // the run under the limit when it fits (releasing cached blocks at
        // the limit can keep it below the unlimited peak), else the whole
        // workload without a limit
        let (t, _) = try_batch(config, &lever.workload, batch, &opts)?;
        let peak = if t.fits {
            t.peak_reserved_bytes
        } else {
            estimate(config, &w, &free)?.peak_reserved_bytes
        };
        let name = lever.name.clone();
        let mb = max_batch(config, &lever.workload, &opts, &mut |t| progress(&name, t))?;
        out.push(LeverOutcome {
            lever,
            peak_reserved_bytes: peak,
            fits: t.fits,
            max_batch: mb.max_batch,
            capped: mb.capped.is_some(),
        });
    }
    Ok(out)
}

/// The fewest layers to checkpoint for `batch` to fit.
#[derive(Debug, Clone)]
pub struct MinimalCheckpointing {
    /// the layers (the first `n`: in backward they are recomputed last,
    /// when the fewest other activations are still held)
    pub layers: Vec<usize>,
    /// of how many
    pub of: usize,
    /// the peak reserved bytes with them
    pub peak_reserved_bytes: i64,
    /// the extra compute, as a fraction of a training step: one more
    /// forward of `n` of `of` layers, with a step taken as three forwards
    /// (forward + a backward of twice its cost) — a FLOP-count
    /// approximation, not a memory figure
    pub extra_step_fraction: f64,
}

/// The cheapest checkpointing that makes `batch` fit: the fewest layers,
/// found by bisection on their number (each candidate run by the twin).
/// `None` when even checkpointing every layer does not fit.
pub fn checkpoint_for_batch(
    config: &HfConfig,
    base: &Workload,
    batch: i64,
    options: &EstimateOptions,
) -> Result<Option<MinimalCheckpointing>> {
    let Some(l) = num_layers(config).filter(|&l| l > 0) else {
        return Ok(None);
    };
    let with = |n: usize| Workload {
        batch,
        checkpointing: (n > 0).then(|| Checkpointing::Layers((0..n).collect())),
        ..base.clone()
    };
    let fits = |n: usize| -> Result<(bool, i64)> {
        let est = estimate(config, &with(n), options)?;
        Ok((est.oom.is_none(), est.peak_reserved_bytes))
    };
    let (ok_all, _) = fits(l)?;
    if !ok_all {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0usize, l); // lo fails (or 0 untested), hi fits
    if fits(0)?.0 {
        hi = 0;
    }
    while hi > lo + 1 {
        let mid = (lo + hi) / 2;
        if fits(mid)?.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // it fits: its peak under the limit
    let peak = estimate(config, &with(hi), options)?.peak_reserved_bytes;
    Ok(Some(MinimalCheckpointing {
        layers: (0..hi).collect(),
        of: l,
        peak_reserved_bytes: peak,
        extra_step_fraction: hi as f64 / (3.0 * l as f64),
    }))
}
