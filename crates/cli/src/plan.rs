//! `vramscope plan`: the largest batch that fits, what each lever buys, and
//! sweeps over batch and sequence length.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use vramscope_alloc::format_size;
use vramscope_models::{estimate, workload_requests, EstimateOptions, Mode, Oom, Task, Workload};
use vramscope_planner::{
    boundary, checkpoint_for_batch, levers, max_batch, sweep, try_batch, Boundary, LeverOutcome,
    MinimalCheckpointing, SweepCell, Try,
};
use vramscope_report::sweep::{render_sweep, SweepPoint};

use crate::estimate::{
    emit, grades_json, grades_note, layer_runs, parse_list, GpuArgs, GradeJson, IntList, ModelArgs,
    WorkloadArgs,
};
use crate::{EXIT_DIFFERENT, EXIT_OK};

/// Arguments of `vramscope plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub model: ModelArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub parallel: crate::estimate::ParallelArgs,
    /// Sweep these batch sizes (`1..64`, `1,2,4,8`) over every --seq and
    /// print a grid of each cell's peak allocated / peak reserved, `*`
    /// marking those that do not fit, instead of searching the largest batch.
    #[arg(long, value_parser = parse_list, allow_hyphen_values = true)]
    pub batch: Option<IntList>,
    /// The batch you want: levers are compared at it, and plan finds the
    /// fewest checkpointed layers and the gradient accumulation that reach it.
    #[arg(long, value_name = "B", allow_negative_numbers = true,
          value_parser = crate::estimate::parse_positive)]
    pub target_batch: Option<i64>,
    /// With --mode generate: instead of the largest batch, the longest
    /// generation at --target-batch (default 1): `new-tokens`, the most new
    /// tokens for the --seq prompt, up to --new-tokens; `prompt`, the
    /// longest prompt that still generates --new-tokens tokens.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub longest: Option<crate::plan_context::LongestArg>,
    /// Skip the table of levers (only the largest batch).
    #[arg(long)]
    pub no_levers: bool,
    /// Print one JSON object (schema in docs/json.md, `vramscope.plan/1`).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Sweeps: print CSV (batch,seq,peak_reserved_bytes,peak_allocated_bytes,fits,model_ran).
    #[arg(long)]
    pub csv: bool,
    /// Sweeps: also write a plot of the grid (peak reserved against batch,
    /// one line per sequence length, the limit) as one self-contained HTML
    /// file.
    #[arg(long, value_name = "FILE", requires = "batch")]
    pub html: Option<std::path::PathBuf>,
    /// The command line's arguments from `plan` on (set by
    /// [`crate::main_with`]): the commands the answer suggests repeat them.
    #[arg(skip)]
    pub argv: Vec<String>,
}

#[derive(Serialize)]
struct OomJson {
    batch: i64,
    phase: String,
    op: String,
    module: String,
    tried_to_allocate_bytes: u64,
    message: String,
}

fn oom_json(batch: i64, o: &Oom) -> OomJson {
    OomJson {
        batch,
        phase: o.phase.clone(),
        op: o.op.clone(),
        module: o.module.clone(),
        tried_to_allocate_bytes: o.bytes,
        message: o.message.clone(),
    }
}

/// The memory a recommended batch leaves free: it fits under 90% of the
/// limit, as every batch below it does.
const SPARE: f64 = 0.1;

#[derive(Serialize)]
struct FailingJson {
    batch: i64,
    phase: Option<String>,
    op: Option<String>,
    module: Option<String>,
    tried_to_allocate_bytes: Option<u64>,
}

fn failing_json(t: &Try) -> FailingJson {
    FailingJson {
        batch: t.batch,
        phase: t.oom.as_ref().map(|o| o.phase.clone()),
        op: t.oom.as_ref().map(|o| o.op.clone()),
        module: t.oom.as_ref().map(|o| o.module.clone()),
        tried_to_allocate_bytes: t.oom.as_ref().map(|o| o.bytes),
    }
}

/// The text lines about the boundary: the batches below the largest that
/// fail, and the recommendation.
fn boundary_lines(out: &mut Vec<u8>, bd: &Boundary, capacity: u64) -> std::io::Result<()> {
    if bd.largest == 0 {
        return Ok(());
    }
    if !bd.failing_below.is_empty() {
        let list: Vec<String> = bd
            .failing_below
            .iter()
            .map(|t| t.batch.to_string())
            .collect();
        writeln!(
            out,
            "Not monotone: every batch up to {} fits, but {} {} not:",
            bd.all_smaller_fit,
            list.join(", "),
            if list.len() == 1 { "does" } else { "do" }
        )?;
        for t in &bd.failing_below {
            match &t.oom {
                Some(o) => writeln!(
                    out,
                    "  batch {}: out of memory in {} ({}{}), tried to allocate {}",
                    t.batch,
                    o.phase,
                    o.op,
                    if o.module.is_empty() {
                        String::new()
                    } else {
                        format!(" in {}", o.module)
                    },
                    format_size(o.bytes)
                )?,
                None => writeln!(out, "  batch {}: out of memory", t.batch)?,
            }
        }
    } else if bd.checked_up_to >= bd.largest {
        writeln!(out, "Every batch up to {} fits.", bd.largest)?;
    }
    if bd.checked_up_to < bd.largest {
        writeln!(
            out,
            "(every batch up to {} was run; between {} and {} only the search's tries)",
            bd.checked_up_to,
            bd.checked_up_to + 1,
            bd.largest
        )?;
    }
    if bd.recommended > 0 {
        // where the scan stopped short of the largest batch, the
        // recommendation is a lower bound too
        let bound = bd.recommended == bd.checked_up_to && bd.checked_up_to < bd.largest;
        writeln!(
            out,
            "Recommended: {}batch {} (it and every smaller batch fit with {:.0}% of the limit to spare, under {})",
            if bound { "at least " } else { "" },
            bd.recommended,
            SPARE * 100.0,
            format_size((capacity as f64 * (1.0 - SPARE)) as u64)
        )?;
    } else {
        writeln!(
            out,
            "No batch fits with {:.0}% of the limit to spare.",
            SPARE * 100.0
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct TryJson {
    batch: i64,
    fits: bool,
    peak_reserved_bytes: i64,
}

#[derive(Serialize)]
struct LeverJson {
    name: String,
    peak_reserved_bytes: i64,
    fits_at_batch: bool,
    max_batch: i64,
    capped: bool,
}

#[derive(Serialize)]
struct CheckpointJson {
    layers: Vec<usize>,
    of: usize,
    peak_reserved_bytes: i64,
    extra_step_fraction: f64,
}

#[derive(Serialize)]
struct AccumulationJson {
    micro_batch: i64,
    accumulation: usize,
    effective_batch: i64,
    peak_reserved_bytes: i64,
    fits: bool,
}

#[derive(Serialize)]
struct PlanJson {
    schema: &'static str,
    model_type: String,
    mode: &'static str,
    seq: Option<i64>,
    gpu: &'static str,
    gpu_key: &'static str,
    gpu_constants: BTreeMap<&'static str, GradeJson>,
    capacity_bytes: u64,
    max_batch: i64,
    max_batch_all_smaller_fit: i64,
    failing_below_max_batch: Vec<FailingJson>,
    checked_up_to: i64,
    recommended_batch: i64,
    recommended_limit_bytes: u64,
    capped: bool,
    capped_by: Option<String>,
    peak_reserved_bytes: Option<i64>,
    peak_allocated_bytes: Option<i64>,
    next_batch_oom: Option<OomJson>,
    tries: Vec<TryJson>,
    reference_batch: i64,
    levers: Vec<LeverJson>,
    checkpointing_for_target: Option<CheckpointJson>,
    accumulation_for_target: Option<AccumulationJson>,
    sharding: Option<crate::plan_sharding::ShardingJson>,
    unmeasured: Vec<String>,
}

#[derive(Serialize)]
struct SweepJson<'a> {
    schema: &'static str,
    model_type: String,
    gpu: &'static str,
    gpu_key: &'static str,
    gpu_constants: BTreeMap<&'static str, GradeJson>,
    capacity_bytes: u64,
    cells: Vec<CellJson<'a>>,
    unmeasured: Vec<String>,
}

#[derive(Serialize)]
struct CellJson<'a> {
    batch: i64,
    seq: i64,
    peak_reserved_bytes: i64,
    peak_allocated_bytes: i64,
    fits: bool,
    model_ran: bool,
    #[serde(skip)]
    _p: std::marker::PhantomData<&'a ()>,
}

fn bar(len: Option<u64>, msg: &str) -> ProgressBar {
    let pb = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}

/// Run `vramscope plan`.
pub fn run(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let config = args.model.config()?;
    args.workload.check(&config)?;
    if args.parallel.fsdp.is_some() || args.parallel.ddp.is_some() {
        // the largest batch per rank, the fewest GPUs, the levers
        return crate::plan_parallel::run(args, &config);
    }
    let base = args.workload.workload(&config, 1);
    let options = EstimateOptions {
        profile: args.gpu.profile()?,
        allocator: args.workload.allocator()?,
        memory_fraction: args.gpu.fraction()?,
        unlimited: false,
        record_trace: false,
    };
    // the driver's share (cuBLAS handles, kernels: `DeviceProfile::
    // blas_handle_bytes`, `blas_16bit_bytes`) as the run at batch 1 (`base`)
    // takes it: per thread and dtype, so the same at every batch, and all
    // of it in the first step (`Requests::driver`), so one step is run
    let one_step = Workload {
        steps: 1,
        // (a generation's driver is all in its prefill: one new token, not
        // a run of every step of a long generation)
        new_tokens: base.new_tokens.min(1),
        ..base.clone()
    };
    let driver: u64 = workload_requests(&config, &one_step, &options.without_limit())?
        .map_or(0, |r| r.driver_bytes_before(usize::MAX));
    // the limit: --memory-fraction/--memory-limit, else --alloc-conf's
    // per_process_memory_fraction (`EstimateOptions::limit_fraction`)
    let capacity = options.capacity(driver);
    if let Some(longest) = args.longest {
        if base.mode != Mode::Generate {
            bail!("--longest searches a generation: it needs --mode generate");
        }
        if args.batch.is_some() || args.workload.seqs().len() > 1 {
            bail!("--longest searches one batch (--target-batch) and one --seq, not a sweep");
        }
        let w = Workload {
            batch: args.target_batch.unwrap_or(1),
            ..base.clone()
        };
        return crate::plan_context::run(&config, &w, &options, capacity, longest, args.json);
    }
    if let Some(batches) = &args.batch {
        return run_sweep(args, &config, &base, &batches.0, &options, capacity);
    }
    if args.workload.seqs().len() > 1 {
        bail!("several --seq values need --batch (a sweep); without it plan searches one sequence length");
    }
    let pb = bar(None, "largest batch");
    let mb = max_batch(&config, &base, &options, &mut |t| {
        pb.inc(1);
        pb.set_message(format!(
            "largest batch: batch {} {}",
            t.batch,
            if t.fits { "fits" } else { "out of memory" }
        ));
    })?;
    pb.set_message("every batch below the boundary");
    // memory is not monotone in the batch: every batch below the
    // doubling's first failure is run too, and under 90% of the limit
    let limit_fraction = capacity as f64 / options.profile.total_memory as f64;
    let bd = boundary(&config, &base, &options, &mb, limit_fraction, SPARE)?;
    pb.finish_and_clear();
    // the largest batch of the search and the scan, and the run there
    let mut mb = mb;
    if bd.largest > mb.max_batch {
        mb.at_max = Some(try_batch(&config, &base, bd.largest, &options)?.1);
        mb.max_batch = bd.largest;
        mb.first_failure = mb
            .tries
            .iter()
            .filter(|t| !t.fits && t.batch > bd.largest)
            .min_by_key(|t| t.batch)
            .cloned();
    }
    let reference = args.target_batch.unwrap_or(mb.max_batch.max(1));
    let lever_rows: Vec<LeverOutcome> = if args.no_levers {
        Vec::new()
    } else {
        let pb = bar(None, "levers");
        let rows = levers(&config, &base, &options, reference, &mut |name, t| {
            pb.inc(1);
            pb.set_message(format!("lever {name}: batch {}", t.batch));
        })?;
        pb.finish_and_clear();
        rows
    };
    let mut ckpt: Option<MinimalCheckpointing> = None;
    let mut accum: Option<AccumulationJson> = None;
    if let Some(target) = args.target_batch {
        if target > mb.max_batch && base.mode == Mode::Train {
            if base.checkpointing.is_none() {
                ckpt = checkpoint_for_batch(&config, &base, target, &options)?;
            }
            if mb.max_batch > 0 {
                let micro = mb.max_batch;
                let steps = ((target + micro - 1) / micro) as usize;
                let w = Workload {
                    batch: micro,
                    accumulation: steps,
                    ..base.clone()
                };
                let est = estimate(&config, &w, &options)?;
                accum = Some(AccumulationJson {
                    micro_batch: micro,
                    accumulation: steps,
                    effective_batch: micro * steps as i64,
                    peak_reserved_bytes: est.peak_reserved_bytes,
                    fits: est.oom.is_none(),
                });
            }
        }
    }
    // past one GPU: where not even batch 1 fits, or the target does not,
    // the fewest GPUs under FSDP2 and DDP (a lower bound by the search's
    // own bound is no failure)
    let sharding = if mb.capped.is_some() {
        None
    } else if mb.max_batch == 0 {
        Some(crate::plan_sharding::sharding(
            &config,
            &base,
            &options,
            args.target_batch,
            &args.argv,
        )?)
    } else {
        match args.target_batch {
            Some(t) if t > mb.max_batch => Some(crate::plan_sharding::sharding(
                &config,
                &base,
                &options,
                Some(t),
                &args.argv,
            )?),
            _ => None,
        }
    };
    let mut out: Vec<u8> = Vec::new();
    let at = mb.at_max.as_ref();
    if args.json {
        let j = PlanJson {
            schema: "vramscope.plan/1",
            model_type: config.model_type.clone(),
            mode: base.mode.name(),
            seq: (base.task != Task::Image).then_some(base.seq),
            gpu: options.profile.name,
            gpu_key: options.profile.key,
            gpu_constants: grades_json(&options.profile),
            capacity_bytes: capacity,
            max_batch: mb.max_batch,
            max_batch_all_smaller_fit: bd.all_smaller_fit,
            failing_below_max_batch: bd.failing_below.iter().map(failing_json).collect(),
            checked_up_to: bd.checked_up_to,
            recommended_batch: bd.recommended,
            recommended_limit_bytes: (capacity as f64 * (1.0 - SPARE)) as u64,
            capped: mb.capped.is_some(),
            capped_by: mb.capped.clone(),
            peak_reserved_bytes: at.map(|e| e.peak_reserved_bytes),
            peak_allocated_bytes: at.map(|e| e.peak_allocated_bytes),
            next_batch_oom: mb
                .first_failure
                .as_ref()
                .and_then(|t| t.oom.as_ref().map(|o| oom_json(t.batch, o))),
            tries: mb
                .tries
                .iter()
                .map(|t| TryJson {
                    batch: t.batch,
                    fits: t.fits,
                    peak_reserved_bytes: t.peak_reserved_bytes,
                })
                .collect(),
            reference_batch: reference,
            levers: lever_rows
                .iter()
                .map(|l| LeverJson {
                    name: l.lever.name.clone(),
                    peak_reserved_bytes: l.peak_reserved_bytes,
                    fits_at_batch: l.fits,
                    max_batch: l.max_batch,
                    capped: l.capped,
                })
                .collect(),
            checkpointing_for_target: ckpt.as_ref().map(|c| CheckpointJson {
                layers: c.layers.clone(),
                of: c.of,
                peak_reserved_bytes: c.peak_reserved_bytes,
                extra_step_fraction: c.extra_step_fraction,
            }),
            accumulation_for_target: accum,
            sharding,
            unmeasured: mb.unmeasured(),
        };
        serde_json::to_writer_pretty(&mut out, &j)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{} {}{}, {}, limit {}",
            config.model_type,
            base.mode.name(),
            // (an image model's inputs have no sequence length)
            if base.task == Task::Image {
                String::new()
            } else {
                format!(", seq {}", base.seq)
            },
            options.profile.name,
            format_size(capacity)
        )?;
        if let Some(note) = grades_note(&options.profile) {
            writeln!(out, "{note}")?;
        }
        if mb.max_batch == 0 {
            writeln!(out, "Not even batch 1 fits.")?;
        } else {
            writeln!(
                out,
                "Largest batch: {}{} (peak reserved {}, peak allocated {}){}",
                if mb.capped.is_some() { "at least " } else { "" },
                mb.max_batch,
                at.map(|e| format_size(e.peak_reserved_bytes.max(0) as u64))
                    .unwrap_or_default(),
                at.map(|e| format_size(e.peak_allocated_bytes.max(0) as u64))
                    .unwrap_or_default(),
                mb.capped
                    .as_ref()
                    .map(|c| format!("; the search stopped: {c}"))
                    .unwrap_or_default()
            )?;
        }
        boundary_lines(&mut out, &bd, capacity)?;
        for u in mb.unmeasured() {
            writeln!(out, "warning: {u}")?;
        }
        if let Some(t) = &mb.first_failure {
            if let Some(o) = &t.oom {
                writeln!(
                    out,
                    "Batch {} runs out of memory in {} ({}{}): tried to allocate {}",
                    t.batch,
                    o.phase,
                    o.op,
                    if o.module.is_empty() {
                        String::new()
                    } else {
                        format!(" in {}", o.module)
                    },
                    format_size(o.bytes)
                )?;
            }
        }
        if !lever_rows.is_empty() {
            writeln!(out)?;
            writeln!(
                out,
                "{:<34} {:>16} {:>6} {:>10}",
                format!("lever (at batch {reference})"),
                "peak reserved",
                "fits",
                "max batch"
            )?;
            for l in &lever_rows {
                writeln!(
                    out,
                    "{:<34} {:>16} {:>6} {:>10}",
                    l.lever.name,
                    format_size(l.peak_reserved_bytes.max(0) as u64),
                    if l.fits { "yes" } else { "no" },
                    // a lower bound where the lever's search stopped first
                    format!("{}{}", if l.capped { ">=" } else { "" }, l.max_batch)
                )?;
            }
        }
        if let Some(c) = &ckpt {
            writeln!(
                out,
                "\nTo fit batch {}: checkpoint {} of {} layers (layers {}), peak reserved {}, about +{:.0}% compute per step",
                reference,
                c.layers.len(),
                c.of,
                layer_runs(&c.layers),
                format_size(c.peak_reserved_bytes.max(0) as u64),
                c.extra_step_fraction * 100.0
            )?;
        }
        if let Some(a) = &accum {
            writeln!(
                out,
                "Or accumulate: {} micro-batches of {} (effective batch {}), peak reserved {}{}",
                a.accumulation,
                a.micro_batch,
                a.effective_batch,
                format_size(a.peak_reserved_bytes.max(0) as u64),
                if a.fits {
                    ""
                } else {
                    " — still does not fit"
                }
            )?;
        }
        if let Some(s) = &sharding {
            crate::plan_sharding::lines(&mut out, s)?;
        }
    }
    emit(
        &out,
        ExitCode::from(if mb.max_batch > 0 {
            EXIT_OK
        } else {
            EXIT_DIFFERENT
        }),
    )
}

fn run_sweep(
    args: &PlanArgs,
    config: &vramscope_models::HfConfig,
    base: &Workload,
    batches: &[i64],
    options: &EstimateOptions,
    capacity: u64,
) -> anyhow::Result<ExitCode> {
    let seqs = &args.workload.seqs();
    let pb = bar(Some((batches.len() * seqs.len()) as u64), "sweep");
    let cells: Vec<SweepCell> = sweep(config, base, batches, seqs, options, &mut |_| pb.inc(1))?;
    pb.finish_and_clear();
    // the cells that took a size without a measurement, and the first note
    let unmeasured: Vec<&SweepCell> = cells.iter().filter(|c| !c.unmeasured.is_empty()).collect();
    let warning = unmeasured.first().map(|c| {
        format!(
            "warning: {} of {} cells took sizes without a measurement, as at batch {} seq {}: {}",
            unmeasured.len(),
            cells.len(),
            c.batch,
            c.seq,
            c.unmeasured[0]
        )
    });
    if let Some(path) = &args.html {
        let points: Vec<SweepPoint> = cells
            .iter()
            .map(|c| SweepPoint {
                batch: c.batch,
                seq: c.seq,
                peak_reserved_bytes: c.peak_reserved_bytes,
                fits: c.fits,
            })
            .collect();
        let title = format!(
            "{} {}: peak reserved by batch and sequence length",
            config.model_type,
            if base.mode == Mode::Train {
                "training"
            } else {
                "inference"
            }
        );
        std::fs::write(path, render_sweep(&title, capacity, &points))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let mut out: Vec<u8> = Vec::new();
    if args.json {
        let j = SweepJson {
            schema: "vramscope.sweep/1",
            model_type: config.model_type.clone(),
            gpu: options.profile.name,
            gpu_key: options.profile.key,
            gpu_constants: grades_json(&options.profile),
            capacity_bytes: capacity,
            cells: cells
                .iter()
                .map(|c| CellJson {
                    batch: c.batch,
                    seq: c.seq,
                    peak_reserved_bytes: c.peak_reserved_bytes,
                    peak_allocated_bytes: c.peak_allocated_bytes,
                    fits: c.fits,
                    model_ran: c.model_ran,
                    _p: std::marker::PhantomData,
                })
                .collect(),
            unmeasured: {
                let mut all: Vec<String> = Vec::new();
                for u in unmeasured.iter().flat_map(|c| &c.unmeasured) {
                    if !all.contains(u) {
                        all.push(u.clone());
                    }
                }
                all
            },
        };
        serde_json::to_writer_pretty(&mut out, &j)?;
        writeln!(out)?;
    } else if args.csv {
        if let Some(w) = &warning {
            // (stderr: the CSV stays machine-readable)
            eprintln!("{w}");
        }
        writeln!(
            out,
            "batch,seq,peak_reserved_bytes,peak_allocated_bytes,fits,model_ran"
        )?;
        for c in &cells {
            writeln!(
                out,
                "{},{},{},{},{},{}",
                c.batch, c.seq, c.peak_reserved_bytes, c.peak_allocated_bytes, c.fits, c.model_ran
            )?;
        }
    } else {
        // allocated next to reserved: under a limit the cache grows to it,
        // so the reserved peaks of the cells that fit read alike
        writeln!(
            out,
            "peak allocated / peak reserved on {} ({} limit; * = does not fit)",
            options.profile.name,
            format_size(capacity)
        )?;
        if let Some(note) = grades_note(&options.profile) {
            writeln!(out, "{note}")?;
        }
        const W: usize = 25;
        write!(out, "{:>8}", "batch")?;
        for s in seqs {
            write!(out, " {:>W$}", format!("seq {s} "))?;
        }
        writeln!(out)?;
        for &b in batches {
            write!(out, "{b:>8}")?;
            for &s in seqs {
                let c = cells.iter().find(|c| c.batch == b && c.seq == s);
                let txt = c
                    .map(|c| {
                        format!(
                            "{} / {}{}",
                            format_size(c.peak_allocated_bytes.max(0) as u64),
                            format_size(c.peak_reserved_bytes.max(0) as u64),
                            if c.fits { " " } else { "*" }
                        )
                    })
                    .unwrap_or_default();
                write!(out, " {txt:>W$}")?;
            }
            writeln!(out)?;
        }
        if let Some(w) = &warning {
            writeln!(out, "{w}")?;
        }
    }
    emit(&out, ExitCode::from(EXIT_OK))
}
