//! The largest batch: the same search as `validation/plan_bisect.py` runs on
//! the GPU, so that the two agree even where memory is not monotone in the
//! batch: batch 1, 2, 4, ... doubling until a try runs out of memory (at most
//! [`MAX_BATCH_CAP`]), then bisection between the last success and the
//! first failure.

use vramscope_engine::EngineError;
use vramscope_models::{
    estimate, Estimate, EstimateOptions, HfConfig, ModelError, Oom, Result, Workload,
};

/// The doubling stops here (`plan_bisect.py`'s bound too). It was 4096, and a
/// small ViT in bf16 fits more than that on an H100 (42.78 GiB reserved at
/// 4096; its largest batch is 7467). Above 32,768 the next try would be
/// 65,536, where some kernels' launch grids pass CUDA's 65,535 limit in a
/// dimension (SDPA has failed or been re-dispatched there: pytorch#146704,
/// #142228), which the twin models for cuDNN attention only; so a search
/// that reaches this bound says the answer is a lower bound.
pub const MAX_BATCH_CAP: i64 = 1 << 15;

/// One try of the search.
#[derive(Debug, Clone)]
pub struct Try {
    /// the batch tried
    pub batch: i64,
    /// every step completed under the limit
    pub fits: bool,
    /// the run's peak reserved bytes (up to the out-of-memory, if any)
    pub peak_reserved_bytes: i64,
    /// the out-of-memory that stopped it
    pub oom: Option<Oom>,
    /// sizes the run took without a measurement (`Estimate::unmeasured`)
    pub unmeasured: Vec<String>,
}

/// The answer of the search.
#[derive(Debug, Clone)]
pub struct MaxBatch {
    /// the largest batch that fits (0: not even batch 1)
    pub max_batch: i64,
    /// every try, in order
    pub tries: Vec<Try>,
    /// the estimate at `max_batch`
    pub at_max: Option<Estimate>,
    /// the out-of-memory of the smallest failing batch (`max_batch + 1`
    /// unless the cap was reached)
    pub first_failure: Option<Try>,
    /// why the search stopped with no batch running out, when it did:
    /// the next batch is past [`MAX_BATCH_CAP`] or takes something the twin
    /// does not model; `max_batch` is then a lower bound, not the boundary
    pub capped: Option<String>,
}

impl MaxBatch {
    /// The sizes taken without a measurement by the two runs that decide
    /// the answer, the one at `max_batch` and the smallest that fails, once
    /// each, in the order met: what could move the boundary.
    pub fn unmeasured(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let at = self.at_max.iter().flat_map(|e| &e.unmeasured);
        let next = self.first_failure.iter().flat_map(|t| &t.unmeasured);
        for u in at.chain(next) {
            if !out.contains(u) {
                out.push(u.clone());
            }
        }
        out
    }
}

/// Run `workload` at `batch` under `options`' limit.
pub fn try_batch(
    config: &HfConfig,
    workload: &Workload,
    batch: i64,
    options: &EstimateOptions,
) -> Result<(Try, Estimate)> {
    let w = Workload {
        batch,
        ..workload.clone()
    };
    let est = estimate(config, &w, options)?;
    let t = Try {
        batch,
        fits: est.oom.is_none(),
        peak_reserved_bytes: est.peak_reserved_bytes,
        oom: est.oom.clone(),
        unmeasured: est.unmeasured.clone(),
    };
    Ok((t, est))
}

/// An error that says the workload takes something the twin does not model
/// (rather than a bad config or option).
pub fn not_modelled(e: &ModelError) -> bool {
    matches!(
        e,
        ModelError::Unsupported(_) | ModelError::Engine(EngineError::Unsupported { .. })
    )
}

/// Find the largest batch for which every step of `workload` completes
/// under `options`' limit. `progress` sees each try as it finishes.
pub fn max_batch(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
    progress: &mut dyn FnMut(&Try),
) -> Result<MaxBatch> {
    search_by(
        &mut |b| {
            let w = Workload {
                batch: b,
                ..workload.clone()
            };
            estimate(config, &w, options)
        },
        "batch",
        MAX_BATCH_CAP,
        progress,
    )
}

/// The search of [`max_batch`] over any size `run` takes (1, 2, 4, ...,
/// `cap`, then bisection): the largest up to `cap` for which its run
/// completes.
pub(crate) fn search_by(
    run_at: &mut dyn FnMut(i64) -> Result<Estimate>,
    what: &str,
    cap: i64,
    progress: &mut dyn FnMut(&Try),
) -> Result<MaxBatch> {
    let mut tries: Vec<Try> = Vec::new();
    let mut run = |b: i64, tries: &mut Vec<Try>| -> Result<bool> {
        let est = run_at(b)?;
        let t = Try {
            batch: b,
            fits: est.oom.is_none(),
            peak_reserved_bytes: est.peak_reserved_bytes,
            oom: est.oom.clone(),
            unmeasured: est.unmeasured.clone(),
        };
        progress(&t);
        let fits = t.fits;
        tries.push(t);
        Ok(fits)
    };
    let (mut lo, mut hi) = (0i64, None);
    let mut capped = None;
    let mut b = 1;
    loop {
        if b > cap && lo < cap {
            // (the bound itself is tried before the search stops at it)
            b = cap;
        } else if b > cap {
            capped = Some(format!("{what} {b} is past the search's bound ({cap})"));
            break;
        }
        match run(b, &mut tries) {
            Ok(true) => {
                lo = b;
                b *= 2;
            }
            Ok(false) => {
                hi = Some(b);
                break;
            }
            // a batch past what the twin models (e.g. a convolution over
            // more than 2^31 elements, which PyTorch splits): the answer
            // is the last batch that fitted, said to be a lower bound
            Err(e) if b > 1 && not_modelled(&e) => {
                capped = Some(format!("batch {b}: {e}"));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(mut h) = hi {
        while h - lo > 1 {
            let mid = (lo + h) / 2;
            if run(mid, &mut tries)? {
                lo = mid;
            } else {
                h = mid;
            }
        }
    }
    let first_failure = tries
        .iter()
        .filter(|t| !t.fits && t.batch > lo)
        .min_by_key(|t| t.batch)
        .cloned();
    let at_max = if lo > 0 { Some(run_at(lo)?) } else { None };
    Ok(MaxBatch {
        max_batch: lo,
        tries,
        at_max,
        first_failure,
        capped,
    })
}
