//! Sweeps: the peak reserved memory and the verdict over a grid of batch
//! sizes and sequence lengths.

use vramscope_models::{estimate, EstimateOptions, HfConfig, Result, Workload};

/// One cell of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepCell {
    /// batch size
    pub batch: i64,
    /// sequence length
    pub seq: i64,
    /// the peak reserved bytes of the whole workload (without a limit)
    pub peak_reserved_bytes: i64,
    /// the peak allocated bytes of the whole workload (without a limit)
    pub peak_allocated_bytes: i64,
    /// whether every step completes under the limit
    pub fits: bool,
}

/// Estimate every (batch, seq) of the grid. A cell that fits is one run; one
/// that does not is run again without a limit for its figures. `progress`
/// sees each cell.
pub fn sweep(
    config: &HfConfig,
    base: &Workload,
    batches: &[i64],
    seqs: &[i64],
    options: &EstimateOptions,
    progress: &mut dyn FnMut(&SweepCell),
) -> Result<Vec<SweepCell>> {
    let free = EstimateOptions {
        unlimited: true,
        memory_fraction: None,
        ..options.clone()
    };
    let mut out = Vec::with_capacity(batches.len() * seqs.len());
    for &seq in seqs {
        for &batch in batches {
            let w = Workload {
                batch,
                seq,
                ..base.clone()
            };
            let est = estimate(config, &w, options)?;
            let fits = est.oom.is_none();
            let est = if fits {
                est
            } else {
                estimate(config, &w, &free)?
            };
            let cell = SweepCell {
                batch,
                seq,
                peak_reserved_bytes: est.peak_reserved_bytes,
                peak_allocated_bytes: est.peak_allocated_bytes,
                fits,
            };
            progress(&cell);
            out.push(cell);
        }
    }
    Ok(out)
}
