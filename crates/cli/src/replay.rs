//! `vramscope replay`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use vramscope_alloc::memory_summary;
use vramscope_replay::{from_snapshot, replay, ReplayOptions};

use crate::{signed_size, EXIT_DIFFERENT, EXIT_OK};

/// The built-in snapshot: 3 AdamW steps of TransformerEncoderLayer(512, 8)
/// plus a linear head, recorded on an H100 with PyTorch 2.11
/// (validation/alloc_cases.py, case `training`).
const BUILTIN: &[u8] = include_bytes!("../../../fixtures/alloc/training.pickle");

/// An NVIDIA H100 80GB HBM3's memory as `cudaMemGetInfo` reports it
/// (its GPU profile, `vramscope_engine::gpus::H100`; the built-in snapshot's
/// GPU).
pub const H100_TOTAL_MEMORY: u64 = vramscope_engine::gpus::H100.total_memory.value;

/// Arguments of `vramscope replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A `torch.cuda.memory._dump_snapshot` pickle (default: a built-in one).
    pub snapshot: Option<PathBuf>,
    /// Print one JSON object (schema: docs/json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Which device's trace to replay (default: each device that has one).
    #[arg(long)]
    pub device: Option<usize>,
    /// The run called `torch.cuda.set_per_process_memory_fraction(F)` (the
    /// snapshot does not record it; it decides garbage collection and the
    /// out-of-memory path).
    #[arg(long, value_name = "F")]
    pub memory_fraction: Option<f64>,
    /// The GPU's total memory, as `torch.cuda.mem_get_info()[1]` reports it
    /// (24GiB, 24GB, 24G or bytes; default: an H100 80GB, 85017493504).
    #[arg(long, value_name = "SIZE", default_value_t = H100_TOTAL_MEMORY,
          value_parser = crate::estimate::parse_size_arg)]
    pub total_memory: u64,
    /// Also print the twin's `torch.cuda.memory_summary()` at the end.
    #[arg(long)]
    pub summary: bool,
}

/// The JSON output: one object per replayed device.
#[derive(Debug, Serialize)]
pub struct ReplayJson {
    /// The file replayed (`"<built-in>"` for the default).
    pub snapshot: String,
    /// The snapshot was predicted by `vramscope estimate --snapshot` or
    /// `vramscope run --snapshot` (its frames are the twin's), not recorded
    /// on a GPU.
    pub predicted: bool,
    /// The device.
    pub device: usize,
    /// The settings string the run used.
    pub allocator_conf: String,
    /// Trace entries replayed.
    pub trace_entries: usize,
    /// Segment actions the twin reproduced, in order.
    pub segment_events_matched: usize,
    /// Segment actions in the trace.
    pub segment_events_total: usize,
    /// Whether everything matched.
    pub exact: bool,
    /// The first divergence, or null.
    pub first_divergence: Option<DivergenceJson>,
    /// `allocated_bytes.all.peak` of the twin.
    pub peak_allocated_bytes: i64,
    /// `reserved_bytes.all.peak` of the twin.
    pub peak_reserved_bytes: i64,
    /// `allocated_bytes.all.current` at the end.
    pub final_allocated_bytes: i64,
    /// `reserved_bytes.all.current` at the end.
    pub final_reserved_bytes: i64,
    /// `num_alloc_retries`.
    pub num_alloc_retries: i64,
    /// `num_ooms`.
    pub num_ooms: i64,
    /// `empty_cache()` calls inferred from the trace.
    pub inferred_empty_cache_calls: usize,
    /// Every `torch.cuda.memory_stats()` key of the twin at the end.
    pub memory_stats: std::collections::BTreeMap<String, i64>,
}

/// Where the replay first disagreed.
#[derive(Debug, Serialize)]
pub struct DivergenceJson {
    /// Trace index.
    pub trace_index: usize,
    /// What the GPU did.
    pub expected: String,
    /// What the twin did.
    pub got: String,
}

/// Run `vramscope replay`.
pub fn run(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    // a file is read as `inspect` reads it: a truncated one is named so from its frame headers
    let (name, snap) = match &args.snapshot {
        Some(p) => (p.display().to_string(), crate::inspect::read(p)?),
        None => (
            "<built-in>".to_string(),
            vramscope_snapshot::read_snapshot(BUILTIN)
                .context("<built-in> is not a readable PyTorch memory snapshot")?,
        ),
    };
    if let Some(f) = args.memory_fraction {
        if !(0.0..=1.0).contains(&f) {
            bail!("--memory-fraction must be within [0, 1], got {f}");
        }
    }
    let (config, warning) = from_snapshot::config(&snap);
    if let Some(w) = warning {
        eprintln!(
            "warning: the snapshot's settings string did not parse ({w}); using its typed fields"
        );
    }
    let devices = match args.device {
        Some(d) => vec![d],
        None => from_snapshot::devices(&snap),
    };
    if devices.is_empty() {
        bail!("{name} has no trace: record it with torch.cuda.memory._record_memory_history() before the first allocation");
    }
    let mut out = std::io::stdout().lock();
    let mut all_exact = true;
    for device in devices {
        let rec = from_snapshot::recording(&snap, device);
        let opts = ReplayOptions {
            config: config.clone(),
            memory_fraction: args.memory_fraction,
            total_memory: args.total_memory,
            device_capacity: None,
        };
        let r = replay(&rec, &opts)
            .with_context(|| format!("{name}, device {device}: cannot replay"))?;
        all_exact &= r.is_exact();
        let s = &r.stats;
        let json = ReplayJson {
            snapshot: name.clone(),
            predicted: snap.stacks.written_by_vramscope(),
            device,
            allocator_conf: config.settings.clone(),
            trace_entries: r.trace_entries,
            segment_events_matched: r.segment_events_matched,
            segment_events_total: r.segment_events_total,
            exact: r.is_exact(),
            first_divergence: r.first_divergence.as_ref().map(|d| DivergenceJson {
                trace_index: d.trace_index,
                expected: d.expected.clone(),
                got: d.got.clone(),
            }),
            peak_allocated_bytes: s.allocated_bytes.all().peak,
            peak_reserved_bytes: s.reserved_bytes.all().peak,
            final_allocated_bytes: s.allocated_bytes.all().current,
            final_reserved_bytes: s.reserved_bytes.all().current,
            num_alloc_retries: s.num_alloc_retries,
            num_ooms: s.num_ooms,
            inferred_empty_cache_calls: r.inferred_empty_cache,
            memory_stats: s.memory_stats(),
        };
        if args.json {
            serde_json::to_writer_pretty(&mut out, &json)?;
            writeln!(out)?;
        } else {
            write_text(&mut out, &json)?;
            if args.summary {
                write!(out, "{}", memory_summary(s, device as u32, false))?;
            }
        }
    }
    Ok(ExitCode::from(if all_exact {
        EXIT_OK
    } else {
        EXIT_DIFFERENT
    }))
}

fn write_text(out: &mut impl Write, j: &ReplayJson) -> std::io::Result<()> {
    let predicted = j.predicted;
    let conf = if j.allocator_conf.is_empty() {
        "(defaults)"
    } else {
        j.allocator_conf.as_str()
    };
    writeln!(
        out,
        "Replayed {} trace entries of {} (device {}) through the allocator twin",
        j.trace_entries, j.snapshot, j.device
    )?;
    writeln!(out, "  settings           PYTORCH_CUDA_ALLOC_CONF={conf}")?;
    writeln!(
        out,
        "  segment actions    {}/{} reproduced",
        j.segment_events_matched, j.segment_events_total
    )?;
    writeln!(
        out,
        "  peak allocated     {}",
        signed_size(j.peak_allocated_bytes)
    )?;
    writeln!(
        out,
        "  peak reserved      {}",
        signed_size(j.peak_reserved_bytes)
    )?;
    writeln!(
        out,
        "  final allocated    {}  reserved {}",
        signed_size(j.final_allocated_bytes),
        signed_size(j.final_reserved_bytes)
    )?;
    writeln!(
        out,
        "  cudaMalloc retries {}  OOMs {}",
        j.num_alloc_retries, j.num_ooms
    )?;
    if j.inferred_empty_cache_calls > 0 {
        writeln!(
            out,
            "  empty_cache()      {} call(s) inferred from the trace",
            j.inferred_empty_cache_calls
        )?;
    }
    // a snapshot the twin wrote (`estimate --snapshot`, `run --snapshot`)
    // was recorded by the twin, not by a GPU
    let (recorded, by) = if predicted {
        (
            "the recorded trace (vramscope's own prediction, from estimate --snapshot or run --snapshot; not measured on a GPU)",
            "the trace",
        )
    } else {
        ("the GPU", "the GPU")
    };
    match &j.first_divergence {
        None => writeln!(out, "EXACT: every segment action, every address and the final segments and blocks match {recorded}.")?,
        Some(d) => {
            writeln!(out, "DIVERGED at trace entry {}:", d.trace_index)?;
            writeln!(out, "  {by} did: {}", d.expected)?;
            writeln!(out, "  the twin:    {}", d.got)?;
        }
    }
    Ok(())
}
