//! Where the batch stops fitting, when memory is not monotone in the batch.
//!
//! Whether a batch fits is not monotone in the batch: an 8B Llama's bf16
//! AdamW step at seq 512 on an H100 trains at batches 4, 5 and 8 and runs
//! out of memory at 6, 7 and 9. The search ([`crate::max_batch`]) finds one boundary;
//! [`boundary`] runs every batch below the first failure of the doubling, so
//! that the report can say the largest batch that fits, the largest below
//! which every batch fits, the failing batches in between and where they
//! run out, and a batch that fits with memory to spare.

use vramscope_models::{EstimateOptions, HfConfig, Result, Workload};

use crate::search::{try_batch, MaxBatch, Try};
use crate::sweep::sweep;

/// Every batch up to this many is run; above it the boundary is the
/// search's and [`Boundary::checked_up_to`] says so.
pub const SCAN_LIMIT: i64 = 256;

/// Failing batches below the largest whose out-of-memory is looked up (a
/// full run each); the rest are listed without it.
const DETAILED_FAILURES: usize = 16;

/// The batches around the boundary.
#[derive(Debug, Clone)]
pub struct Boundary {
    /// the largest batch that fits (0: none), of the search and the scan
    pub largest: i64,
    /// the largest batch below which every batch fits too
    pub all_smaller_fit: i64,
    /// the batches below `largest` that do not fit, smallest first; the
    /// first `DETAILED_FAILURES` with the out-of-memory that stops them
    pub failing_below: Vec<Try>,
    /// every batch from 1 to this one was run ([`SCAN_LIMIT`] at most)
    pub checked_up_to: i64,
    /// the largest batch below which every batch fits under
    /// `recommended_limit_fraction` of the limit: memory to spare
    pub recommended: i64,
    /// the fraction of the limit the recommendation fits under
    pub recommended_limit_fraction: f64,
}

/// Run every batch of `workload` from 1 to just below the doubling's first
/// failure (at most [`SCAN_LIMIT`]) under `options`' limit, and again under
/// `spare` less of it (`0.1`: 10% left free), given the search's answer.
/// `limit_fraction` is the fraction of the GPU's total the limit is (the
/// `memory_fraction` the run sets, else what the device leaves the
/// allocator).
pub fn boundary(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
    searched: &MaxBatch,
    limit_fraction: f64,
    spare: f64,
) -> Result<Boundary> {
    // the doubling's first failure (a power of two), or the search's answer
    // where nothing failed
    let doubling_fail = searched
        .tries
        .iter()
        .find(|t| !t.fits)
        .map(|t| t.batch - 1)
        .unwrap_or(searched.max_batch);
    let upper = doubling_fail.clamp(0, SCAN_LIMIT);
    let batches: Vec<i64> = (1..=upper).collect();
    let mut cells = if batches.is_empty() {
        Vec::new()
    } else {
        sweep(
            config,
            workload,
            &batches,
            &[workload.seq],
            options,
            &mut |_| {},
        )?
    };
    cells.sort_by_key(|c| c.batch);
    let largest = cells
        .iter()
        .filter(|c| c.fits)
        .map(|c| c.batch)
        .chain(std::iter::once(searched.max_batch))
        .max()
        .unwrap_or(0);
    // over the batches run: a lower bound where the scan stopped short
    let all_smaller_fit = cells
        .iter()
        .take_while(|c| c.fits)
        .map(|c| c.batch)
        .last()
        .unwrap_or(0);
    let mut failing_below = Vec::new();
    for c in cells.iter().filter(|c| !c.fits && c.batch < largest) {
        if failing_below.len() < DETAILED_FAILURES {
            failing_below.push(try_batch(config, workload, c.batch, options)?.0);
        } else {
            failing_below.push(Try {
                batch: c.batch,
                fits: false,
                peak_reserved_bytes: c.peak_reserved_bytes,
                oom: None,
                unmeasured: c.unmeasured.clone(),
            });
        }
    }
    // the same scan under less of the limit: the largest batch below
    // which every batch keeps `spare` of it free
    let tighter = EstimateOptions {
        memory_fraction: Some(limit_fraction * (1.0 - spare)),
        ..options.clone()
    };
    let spare_upper = all_smaller_fit.min(upper);
    let recommended = if spare_upper == 0 {
        0
    } else {
        let batches: Vec<i64> = (1..=spare_upper).collect();
        let mut cells = sweep(
            config,
            workload,
            &batches,
            &[workload.seq],
            &tighter,
            &mut |_| {},
        )?;
        cells.sort_by_key(|c| c.batch);
        cells
            .iter()
            .take_while(|c| c.fits)
            .map(|c| c.batch)
            .last()
            .unwrap_or(0)
    };
    Ok(Boundary {
        largest,
        all_smaller_fit,
        failing_below,
        checked_up_to: upper,
        recommended,
        recommended_limit_fraction: limit_fraction * (1.0 - spare),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::max_batch;
    use vramscope_models::{presets, Task};

    /// Issue 34: `plan --model llama-3.1-8b --mode train --seq 512 --weights
    /// bf16` said "Largest batch: 8" while 6 and 7 do not fit.
    #[test]
    fn issue_34_llama_8b_boundary_is_not_monotone() {
        let config = presets::get("llama-3.1-8b").unwrap();
        let w = Workload {
            weights: vramscope_engine::DType::BF16,
            ..Workload::train(Task::Causal, 1, 512)
        };
        let options = EstimateOptions::default();
        let mb = max_batch(&config, &w, &options, &mut |_| {}).unwrap();
        assert_eq!(mb.max_batch, 8);
        let frac = options.profile.usable_memory as f64 / options.profile.total_memory as f64;
        let b = boundary(&config, &w, &options, &mb, frac, 0.1).unwrap();
        assert_eq!((b.largest, b.all_smaller_fit, b.checked_up_to), (8, 5, 15));
        let failing: Vec<(i64, &str, &str, u64)> = b
            .failing_below
            .iter()
            .map(|t| {
                let o = t.oom.as_ref().unwrap();
                (t.batch, o.phase.as_str(), o.op.as_str(), o.bytes)
            })
            .collect();
        assert_eq!(failing.len(), 2);
        assert_eq!(
            (failing[0].0, failing[0].1, failing[0].2),
            (6, "step1", "_foreach_sqrt")
        );
        assert_eq!(
            (failing[1].0, failing[1].1, failing[1].2),
            (7, "forward1", "_log_softmax")
        );
        assert!(b.recommended <= b.all_smaller_fit);
    }
}
