//! Sweeps: the peak reserved memory and the verdict over a grid of batch
//! sizes and sequence lengths.
//!
//! Every cell is the allocator twin replaying that batch's requests, under
//! the limit for the verdict and, when it runs out, without one for the
//! figures. A column runs the model (two steps, the rest repeated) only at
//! the batch sizes [`batch_column`] needs and fills the rest from batch
//! templates; where it ran, the model's own allocator already gave the
//! figures without a limit ([`workload_run`]). Where the sweep's first run
//! shows that the model's second training step is its first less the state
//! the first creates, its other runs are of one step
//! ([`workload_run_deriving_step1`]). The cells equal full estimates (the
//! tests of `vramscope_models::requests` check it on every fixture,
//! training and inference).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use vramscope_models::requests::{
    batch_column, fresh_allocator, renew_allocator, replay_planned, verdict_from_planned,
    SizesBuffer, Source,
};
use vramscope_models::{
    workload_run, workload_run_deriving_step1, EstimateOptions, HfConfig, Mode, ModelError, Result,
    Workload,
};

/// One cell of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepCell {
    /// batch size
    pub batch: i64,
    /// sequence length
    pub seq: i64,
    /// the peak reserved bytes: of the run under the limit when it fits
    /// (releasing cached blocks at the limit can keep it lower than without
    /// one), else of the whole workload without a limit, as `estimate`
    pub peak_reserved_bytes: i64,
    /// the peak allocated bytes, likewise
    pub peak_allocated_bytes: i64,
    /// whether every step completes under the limit
    pub fits: bool,
    /// the model ran at this batch size (else its requests came from a
    /// template fitted on three batch sizes around it)
    pub model_ran: bool,
    /// sizes the cell's run took without a measurement
    /// (`Estimate::unmeasured`; a cell whose runs take any has no template,
    /// so the model ran at its batch)
    pub unmeasured: Vec<String>,
}

/// Estimate every (batch, seq) of the grid. `progress` sees each cell.
pub fn sweep(
    config: &HfConfig,
    base: &Workload,
    batches: &[i64],
    seqs: &[i64],
    options: &EstimateOptions,
    progress: &mut dyn FnMut(&SweepCell),
) -> Result<Vec<SweepCell>> {
    let free = options.without_limit();
    let mut out = Vec::with_capacity(batches.len() * seqs.len());
    // one allocator renewed for every replay without a limit (its buffers
    // kept)
    let mut scratch = fresh_allocator(&options.profile, &options.allocator, None, true);
    // whether the model's step 1 is its step 0 less the state step 0
    // creates, as the sweep's first run (of two steps) shows: then the
    // others run the model for one step and derive the second
    // (`workload_run_deriving_step1`; what the first step creates once does
    // not depend on the batch or the sequence length)
    let derives = Cell::new(None);
    // the requests of the template cell being replayed
    let mut sizes = SizesBuffer::default();
    for &seq in seqs {
        let at = |batch: i64| Workload {
            batch,
            seq,
            ..base.clone()
        };
        // where the model runs, its own allocator's figures of the whole
        // run (what a replay of its requests gives)
        let wholes = RefCell::new(HashMap::new());
        let run = |b: i64| {
            let w = at(b);
            let derived = match derives.get() {
                Some(true) => workload_run_deriving_step1(config, &w, &free)?,
                _ => None,
            };
            let (reqs, whole) = match derived {
                Some(r) => r,
                None => {
                    let r = workload_run(config, &w, &free)?.ok_or_else(|| {
                        ModelError::Unsupported("a run without a limit ran out of memory".into())
                    })?;
                    if derives.get().is_none() {
                        derives.set(Some(w.mode == Mode::Train && r.0.second_step_derives()));
                    }
                    r
                }
            };
            wholes.borrow_mut().insert(b, whole);
            Ok::<_, ModelError>(reqs)
        };
        let sources: Vec<Source> = batch_column(batches, &options.profile, run)?.0;
        for (&batch, source) in batches.iter().zip(&sources) {
            let ran;
            // (a template's replays share the plan of its steps; the
            // model's own requests are planned by the replay)
            let (reqs, plan) = match source.sizes_in(batch, &mut sizes) {
                Some(r) => (r, source.step_plan()),
                // a scratch rule that does not apply at this batch
                None => {
                    ran = run(batch)?;
                    (&ran, None)
                }
            };
            let whole = wholes.borrow_mut().remove(&batch).unwrap_or_else(|| {
                renew_allocator(&mut scratch, &options.profile, None, true);
                replay_planned(reqs, plan, &mut scratch)
            });
            let v = verdict_from_planned(whole, reqs, plan, options);
            let cell = SweepCell {
                batch,
                seq,
                peak_reserved_bytes: v.figures.peak_reserved_bytes,
                peak_allocated_bytes: v.figures.peak_allocated_bytes,
                fits: v.fits,
                model_ran: matches!(source, Source::Model(_)),
                unmeasured: reqs.unmeasured.clone(),
            };
            progress(&cell);
            out.push(cell);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_engine::DType;
    use vramscope_models::{estimate, presets, Mode, Task};

    /// Every cell equals the estimate the model itself gives (the verdict
    /// under the limit, the figures without one).
    #[test]
    fn cells_equal_full_estimates() {
        let config = presets::get("qwen3-0.6b").unwrap();
        for mode in [Mode::Train, Mode::Infer] {
            let base = Workload {
                weights: DType::BF16,
                steps: 2,
                mode,
                ..Workload::train(Task::Causal, 1, 256)
            };
            let options = EstimateOptions {
                memory_fraction: Some(if mode == Mode::Train { 0.12 } else { 0.03 }),
                ..EstimateOptions::default()
            };
            let batches: Vec<i64> = (1..=14).collect();
            let cells =
                sweep(&config, &base, &batches, &[256, 384], &options, &mut |_| {}).unwrap();
            assert!(cells.iter().any(|c| c.fits) && cells.iter().any(|c| !c.fits));
            assert!(cells.iter().any(|c| !c.model_ran), "{mode:?}");
            for c in &cells {
                let w = Workload {
                    batch: c.batch,
                    seq: c.seq,
                    ..base.clone()
                };
                let limited = estimate(&config, &w, &options).unwrap();
                assert_eq!(limited.oom.is_none(), c.fits, "{c:?}");
                let whole = if c.fits {
                    limited
                } else {
                    let free = EstimateOptions {
                        unlimited: true,
                        memory_fraction: None,
                        ..options.clone()
                    };
                    estimate(&config, &w, &free).unwrap()
                };
                assert_eq!(whole.peak_reserved_bytes, c.peak_reserved_bytes, "{c:?}");
                assert_eq!(whole.peak_allocated_bytes, c.peak_allocated_bytes, "{c:?}");
            }
        }
    }

    /// A cell whose run takes a size without a measurement names its own
    /// shapes: such runs get no template, so the model runs at every batch
    /// (a template's cells quoted the batch it was fitted on).
    #[test]
    fn cells_with_unmeasured_sizes_name_their_own_batch() {
        let config = HfConfig::parse(
            r#"{"model_type": "vit", "hidden_size": 320, "intermediate_size": 1280,
                "num_hidden_layers": 2, "num_attention_heads": 5, "image_size": 384,
                "patch_size": 32}"#,
        )
        .unwrap();
        let base = Workload {
            steps: 2,
            ..Workload::train(Task::Image, 1, 0)
        };
        let batches: Vec<i64> = (1..=9).collect();
        let options = EstimateOptions::default();
        let cells = sweep(&config, &base, &batches, &[0], &options, &mut |_| {}).unwrap();
        assert_eq!(cells.len(), 9);
        for c in &cells {
            assert!(c.model_ran, "{c:?}");
            let own = format!("input [{}, 3, 384, 384]", c.batch);
            assert!(
                !c.unmeasured.is_empty() && c.unmeasured.iter().all(|n| n.contains(&own)),
                "{c:?}"
            );
        }
    }
}
