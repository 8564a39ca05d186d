//! Run a [`Workload`] on the eager twin, phase by phase, and gather what
//! `vramscope estimate` reports: each phase's figures as
//! `torch.cuda.reset_peak_memory_stats()` at its start would show them, the
//! overall peaks, what is live at the peak (by category and module), and
//! an out-of-memory as PyTorch would raise it.

use std::collections::HashMap;

use vramscope_alloc::{AllocatorConfig, CachingAllocator};
use vramscope_engine::optim::Optimizer;
use vramscope_engine::{
    AllocRecord, At, Category, DType, Device, DeviceProfile, EngineError, EventLog, Runtime,
    RuntimeConfig, Tensor,
};

use crate::config::HfConfig;
use crate::error::{ModelError, Result};
use crate::families::{self, HfModel, Inputs};
use crate::parallel::Parallel;
use crate::workload::{GradMode, Mode, Task, Workload};

/// How to run an estimate.
#[derive(Debug, Clone)]
pub struct EstimateOptions {
    /// the GPU and library constants
    pub profile: DeviceProfile,
    /// `PYTORCH_CUDA_ALLOC_CONF`
    pub allocator: AllocatorConfig,
    /// `torch.cuda.set_per_process_memory_fraction(F)`
    pub memory_fraction: Option<f64>,
    /// simulate a GPU without a capacity limit (the figures of a run that
    /// would not fit, instead of its out-of-memory)
    pub unlimited: bool,
    /// record the allocator trace (`torch.cuda.memory._record_memory_history()`)
    /// for [`Estimate::recorded`]: what `--snapshot` and `--html` draw
    pub record_trace: bool,
}

impl EstimateOptions {
    /// The same options on a GPU without a capacity limit (and no fraction,
    /// no trace): what a run for its requests and whole-run figures uses.
    pub fn without_limit(&self) -> EstimateOptions {
        EstimateOptions {
            unlimited: true,
            memory_fraction: None,
            record_trace: false,
            ..self.clone()
        }
    }

    /// The fraction of the GPU's total memory the allocator may hold, if it
    /// is limited: the one place that decides it from both sources.
    /// `DeviceCachingAllocator`'s constructor sets the limit from the
    /// settings' `per_process_memory_fraction`
    /// (`setMemoryFraction(CUDAAllocatorConfig::per_process_memory_fraction())`,
    /// c10/cuda/CUDACachingAllocator.cpp), and
    /// `torch.cuda.set_per_process_memory_fraction(F)` initializes CUDA
    /// first (`_lazy_init`) then calls `setMemoryFraction(F)` again: the
    /// run's call (`memory_fraction`) replaces the settings' limit, and a
    /// fraction of 1.0 (either's, the last one applied) leaves none
    /// (`set_fraction = fraction < 1.0`).
    pub fn limit_fraction(&self) -> Option<f64> {
        let f = self
            .memory_fraction
            .unwrap_or(self.allocator.per_process_memory_fraction);
        (f < 1.0).then_some(f)
    }

    /// What the allocator may hold once the driver has taken `driver` bytes
    /// outside it (its cuBLAS handles): the limit
    /// ([`Self::limit_fraction`] x the total, `allowed_memory_maximum` as
    /// `setMemoryFraction` truncates it) and still no more than the device
    /// has, or without a limit the GPU's memory less the CUDA context and
    /// those bytes.
    pub fn capacity(&self, driver: u64) -> u64 {
        let device = self.profile.usable_memory.saturating_sub(driver);
        match self.limit_fraction() {
            Some(f) => ((f * self.profile.total_memory as f64) as u64).min(device),
            None => device,
        }
    }
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions {
            profile: DeviceProfile::h100_torch_2_11(),
            allocator: AllocatorConfig::default(),
            memory_fraction: None,
            unlimited: false,
            record_trace: false,
        }
    }
}

/// One phase's figures (bytes), as `torch.cuda.memory_stats()` shows them at
/// its end after `reset_peak_memory_stats()` at its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseFigures {
    /// `load`, `forward0`, `backward0`, `step0`, `zero_grad0`, ...
    pub name: String,
    /// `memory_allocated()` at the end
    pub allocated_bytes: i64,
    /// `max_memory_allocated()` within the phase
    pub peak_allocated_bytes: i64,
    /// `memory_reserved()` at the end
    pub reserved_bytes: i64,
    /// `max_memory_reserved()` within the phase
    pub peak_reserved_bytes: i64,
    /// `requested_bytes.all.current` at the end
    pub requested_bytes: i64,
}

/// One decode step's figures (bytes) in `--mode generate`: the step's
/// span as `reset_peak_memory_stats()` at its start and `memory_stats()` at
/// its end would show it, the spans cut where the model's forwards return
/// (a forward hook's view). Step `k` runs from the return of forward `k`
/// (forward 0 is the prefill's) to the return of forward `k + 1`: token
/// `k`'s logits processing, argmax and stopping check, and the next
/// forward; the last step runs to the end of `generate()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepFigures {
    /// `memory_allocated()` at the end
    pub allocated_bytes: i64,
    /// `max_memory_allocated()` within the step
    pub peak_allocated_bytes: i64,
    /// `memory_reserved()` at the end
    pub reserved_bytes: i64,
    /// `max_memory_reserved()` within the step
    pub peak_reserved_bytes: i64,
    /// `requested_bytes.all.current` at the end
    pub requested_bytes: i64,
}

impl StepFigures {
    pub(crate) fn of(s: &vramscope_alloc::DeviceStats) -> StepFigures {
        StepFigures {
            allocated_bytes: s.allocated_bytes.all().current,
            peak_allocated_bytes: s.allocated_bytes.all().peak,
            reserved_bytes: s.reserved_bytes.all().current,
            peak_reserved_bytes: s.reserved_bytes.all().peak,
            requested_bytes: s.requested_bytes.all().current,
        }
    }
}

/// An out-of-memory, as PyTorch would raise it.
#[derive(Debug, Clone, PartialEq)]
pub struct Oom {
    /// the phase it happened in
    pub phase: String,
    /// the ATen op that asked
    pub op: String,
    /// the module path that was running
    pub module: String,
    /// the bytes it asked for
    pub bytes: u64,
    /// the allocator's message (`CUDA out of memory. Tried to allocate ...`)
    pub message: String,
}

/// What an estimate found.
#[derive(Debug, Clone)]
pub struct Estimate {
    /// every phase that ran (up to the out-of-memory, if any)
    pub phases: Vec<PhaseFigures>,
    /// the highest `memory_allocated()` of the run
    pub peak_allocated_bytes: i64,
    /// the highest `memory_reserved()` of the run
    pub peak_reserved_bytes: i64,
    /// the phase in which `memory_allocated()` peaked
    pub peak_phase: String,
    /// what is live at that peak, by category (bytes requested)
    pub breakdown_at_peak: Vec<(Category, u64)>,
    /// what is live at that peak, by module path (`""`: top level)
    pub by_module_at_peak: Vec<(String, u64)>,
    /// the allocations live at the peak, oldest first
    pub live_at_peak: Vec<AllocRecord>,
    /// number of parameters (a tied weight once)
    pub parameter_count: u64,
    /// bytes of parameters on the device
    pub parameter_bytes: u64,
    /// the out-of-memory that stopped the run
    pub oom: Option<Oom>,
    /// simulated ops (for speed figures)
    pub ops_simulated: u64,
    /// every allocation, free and change of role, in order (the predicted
    /// trace behind the timeline, the HTML report and `--snapshot`)
    pub events: EventLog,
    /// the allocator trace, with [`EstimateOptions::record_trace`]
    pub recorded: Option<RecordedRun>,
    /// each phase's span of allocator requests (mallocs and frees, counted
    /// from the start): `phases[i]` ran requests `phase_requests[i]`
    pub phase_requests: Vec<std::ops::Range<usize>>,
    /// sizes the twin took without a measurement behind them
    /// ([`vramscope_engine::EventLog::unmeasured`]): the figures may be off
    /// by them
    pub unmeasured: Vec<String>,
    /// `--mode generate`: each decode step's figures, step 0 first (empty
    /// otherwise, and up to the out-of-memory)
    pub decode_steps: Vec<StepFigures>,
}

/// A phase's span of a sequence (allocator trace entries or requests): it
/// ran the items `start..end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseSpan {
    /// the phase's name (`load`, `forward1`, ...)
    pub name: String,
    /// the index of its first item
    pub start: usize,
    /// one past the index of its last item
    pub end: usize,
}

impl PhaseSpan {
    /// The phase `name` over `start..end`.
    pub fn new(name: impl Into<String>, start: usize, end: usize) -> PhaseSpan {
        PhaseSpan {
            name: name.into(),
            start,
            end,
        }
    }
    /// How many items it ran.
    pub fn len(&self) -> usize {
        self.end - self.start
    }
    /// It ran none.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    /// The same phase over a span moved `by` items down.
    pub fn shifted_down(&self, by: usize) -> PhaseSpan {
        PhaseSpan::new(self.name.clone(), self.start - by, self.end - by)
    }
}

/// The allocator's view of an estimate recorded with
/// [`EstimateOptions::record_trace`]: what `_record_memory_history()` and a
/// `_dump_snapshot()` at the end of the workload (or, on an out-of-memory,
/// in an out-of-memory observer) would hold.
#[derive(Debug, Clone)]
pub struct RecordedRun {
    /// the allocator trace up to the end of the last phase (or the `oom`
    /// entry); the teardown after it is left out
    pub trace: Vec<vramscope_alloc::TraceEntry>,
    /// each phase's span of `trace`
    pub phases: Vec<PhaseSpan>,
    /// the segments and blocks at the end of the trace
    pub segments: Vec<vramscope_alloc::SegmentInfo>,
}

/// Run `workload` for `config` on the twin.
///
/// An out-of-memory is not an error: the estimate stops there and says so
/// in [`Estimate::oom`]. Errors are for configs and workloads that cannot be
/// modelled.
pub fn estimate(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Estimate> {
    check(config, workload)?;
    // (the repetition's replay serves one stream; a wrapper's collectives use others)
    if workload.parallel.is_some() {
        let est = estimate_every_step(config, workload, options)?;
        beyond_unlimited(&est, options)?;
        return Ok(est);
    }
    let est = match by_repetition(config, workload, options)? {
        Some(e) => e,
        None => match by_decode_template(config, workload, options)? {
            Some(e) => e,
            None => estimate_every_step(config, workload, options)?,
        },
    };
    beyond_unlimited(&est, options)?;
    Ok(est)
}

/// A run without a limit that ran out of memory: the workload needs more
/// than the twin's unlimited device ([`vramscope_alloc::UNLIMITED_BYTES`]),
/// and its figures would be those of a run cut short.
fn beyond_unlimited(est: &Estimate, options: &EstimateOptions) -> Result<()> {
    match &est.oom {
        Some(o) if options.unlimited => Err(ModelError::Unsupported(format!(
            "a workload that needs more than the {} the twin simulates without a limit \
             ({} ran out trying to allocate {})",
            vramscope_alloc::format_size(vramscope_alloc::UNLIMITED_BYTES),
            o.phase,
            vramscope_alloc::format_size(o.bytes)
        ))),
        _ => Ok(()),
    }
}

/// The allocator requests of `workload` (the model runs two steps when the
/// rest repeat the second, as in [`estimate`]); `None` if it ran out of
/// memory.
pub fn workload_requests(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Option<crate::requests::Requests>> {
    check(config, workload)?;
    if workload.steps >= 3 {
        let short = Workload {
            steps: 2,
            ..workload.clone()
        };
        let (est, _) = run_model(config, &short, options, Keep::FIGURES)?;
        if let Some(r) =
            crate::requests::Requests::of(&est).and_then(|r| r.repeat_steps(workload.steps))
        {
            return Ok(Some(r));
        }
    }
    let (est, _) = run_model(config, workload, options, Keep::FIGURES)?;
    Ok(crate::requests::Requests::of(&est))
}

/// Steps after the second, without running the model again.
///
/// The eager twin is deterministic, and when the second step frees
/// everything it allocates and frees nothing older (checked on its
/// requests), the third step starts from the same tensors as the second and
/// asks the allocator for the same sizes in the same order: only the
/// allocator's state differs. So the model runs two steps, and the
/// allocator twin serves the later steps' requests (the second step's,
/// repeated: `requests::Requests::repeat_steps`) from the state the model
/// left it in. That is the state a replay of the first two steps' requests
/// on a fresh allocator reaches: the model's allocator served exactly those
/// requests, on one stream, in phases with nothing between them (checked
/// here), and tests/requests.rs replays every fixture's whole sequence to
/// the run's figures. The figures are the full run's (tests/requests.rs
/// checks every fixture); the event log, the breakdown at the peak and
/// `ops_simulated` are those of the two steps (the peak allocated, the same
/// in every later step, is first reached in them; if it were not, the model
/// runs every step).
fn by_repetition(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Option<Estimate>> {
    if options.record_trace || workload.steps < 3 {
        return Ok(None);
    }
    let short = Workload {
        steps: 2,
        ..workload.clone()
    };
    let (mut est, kept) = run_model(
        config,
        &short,
        options,
        Keep {
            allocator: true,
            at_peak: true,
        },
    )?;
    if est.oom.is_some() {
        // the full run stops at the same place
        return Ok(Some(est));
    }
    let Some(reqs) =
        crate::requests::Requests::of(&est).and_then(|r| r.repeat_steps(workload.steps))
    else {
        return Ok(None);
    };
    let Some(r) = kept.and_then(|kept| later_steps(&est, &reqs, kept)) else {
        return Ok(None);
    };
    if r.peak_allocated_bytes > est.peak_allocated_bytes {
        return Ok(None);
    }
    if let Some(o) = &r.oom {
        // the request that failed is the same one of the second step
        let request = o.request;
        let first = reqs.phases.iter().position(|p| p.name.ends_with('1'));
        let per_step = reqs.repeated_step_len();
        let (op, module) = match (first, per_step) {
            (Some(f), Some(len)) if len > 0 => {
                let start = reqs.phases[f].start;
                let i = start + (request - start) % len;
                let malloc = reqs.requests[..i]
                    .iter()
                    .filter(|q| q.malloc_bytes().is_some())
                    .count();
                let rec = est
                    .events
                    .events
                    .iter()
                    .filter_map(|e| match e {
                        vramscope_engine::MemEvent::Alloc(r) => Some(r),
                        _ => None,
                    })
                    .nth(malloc);
                rec.map_or((String::new(), String::new()), |r| {
                    (r.op.to_string(), r.module.to_string())
                })
            }
            _ => (String::new(), String::new()),
        };
        est.oom = Some(Oom {
            phase: o.phase.clone(),
            op,
            module,
            bytes: o.bytes,
            message: o.message.clone(),
        });
    }
    est.phases.extend(r.phases);
    est.peak_reserved_bytes = est.peak_reserved_bytes.max(r.peak_reserved_bytes);
    Ok(Some(est))
}

/// The figures of the phases of `reqs` after the `est`'s (its model ran
/// two steps; the later ones repeat the second), served by the allocator
/// the model left (`kept`); an out-of-memory names its request's index in
/// `reqs`. When step 1's fits show that step 2 takes the same blocks and
/// creates no segment ([`CachingAllocator::repeats_with_its_segments`]),
/// every later step has step 1's figures at the reserved memory now, and
/// nothing is replayed. `None` where [`later_phases`] is.
fn later_steps(
    est: &Estimate,
    reqs: &crate::requests::Requests,
    kept: Continuation,
) -> Option<crate::requests::Replayed> {
    let n = est.phases.len();
    let (later, offset) = later_phases(reqs, n)?;
    let mut alloc = kept.alloc;
    let step1 = reqs.step_phases(1)?;
    if kept
        .fits_from
        .is_some_and(|f| alloc.repeats_with_its_segments(f))
        && step1.end == n
    {
        let reserved = alloc.stats().reserved_bytes.all().current;
        let phases: Vec<PhaseFigures> = later
            .phases
            .iter()
            .enumerate()
            .map(|(j, PhaseSpan { name, .. })| PhaseFigures {
                name: name.clone(),
                reserved_bytes: reserved,
                peak_reserved_bytes: reserved,
                ..est.phases[step1.start + j % step1.len()].clone()
            })
            .collect();
        let steps = later.phases.len() / step1.len().max(1);
        return Some(crate::requests::Replayed::of(
            phases,
            kept.peak_requested_step1,
            None,
            steps,
        ));
    }
    let mut r = crate::requests::replay(&later, &mut alloc);
    if let Some(o) = &mut r.oom {
        o.request += offset;
    }
    Some(r)
}

/// The allocator requests of `workload`, as [`workload_requests`] gives
/// them, and the figures of the whole run without a limit, as a replay of
/// them on a fresh allocator gives them ([`crate::requests::replay`]); but
/// where the model ran two steps and the rest repeat, the figures of those
/// two come from the model's own allocator, which served the same requests,
/// and the later ones from `later_steps`. `None` if it ran out of memory.
/// The figures are without a limit whatever `options` say.
pub fn workload_run(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Option<(crate::requests::Requests, crate::requests::Replayed)>> {
    check(config, workload)?;
    let free = options.without_limit();
    if workload.steps >= 3 {
        let short = Workload {
            steps: 2,
            ..workload.clone()
        };
        let (est, kept) = run_model(config, &short, &free, Keep::ALLOCATOR)?;
        let reqs = crate::requests::Requests::of(&est).and_then(|r| r.repeat_steps(workload.steps));
        if let (Some(reqs), Some(kept)) = (reqs, kept) {
            let peak_requested = kept.peak_requested;
            if let Some(later) = later_steps(&est, &reqs, kept) {
                let mut phases = est.phases;
                phases.extend(later.phases);
                let whole = crate::requests::Replayed::of(
                    phases,
                    peak_requested.max(later.peak_requested_bytes),
                    later.oom,
                    later.repeated_steps,
                );
                return Ok(Some((reqs, whole)));
            }
        }
    }
    let Some(reqs) = workload_requests(config, workload, &free)? else {
        return Ok(None);
    };
    let whole = crate::requests::replay(
        &reqs,
        &mut crate::requests::fresh_allocator(&free.profile, &free.allocator, None, true),
    );
    Ok(Some((reqs, whole)))
}

/// [`workload_run`] of a training workload of two steps or more, running
/// the model for one step only: step 1's requests are step 0's without the
/// state it creates once ([`crate::requests::Requests::with_derived_second_step`]),
/// served from where the model's allocator left step 0, and the later
/// steps repeat step 1. Only for a workload whose step 1 the caller has
/// seen derive so ([`crate::requests::Requests::second_step_derives`] on a
/// run of it at another batch size); `None` where the derivation does not
/// apply (then [`workload_run`] gives the figures).
pub fn workload_run_deriving_step1(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Option<(crate::requests::Requests, crate::requests::Replayed)>> {
    check(config, workload)?;
    if workload.mode != Mode::Train || workload.steps < 2 || workload.accumulation > 1 {
        return Ok(None);
    }
    let free = options.without_limit();
    let short = Workload {
        steps: 1,
        ..workload.clone()
    };
    let (est, kept) = run_model(config, &short, &free, Keep::ALLOCATOR)?;
    let reqs = crate::requests::Requests::of(&est)
        .and_then(|r| r.with_derived_second_step())
        .and_then(|r| r.repeat_steps(workload.steps));
    let (Some(reqs), Some(kept)) = (reqs, kept) else {
        return Ok(None);
    };
    let Some((later, offset)) = later_phases(&reqs, est.phases.len()) else {
        return Ok(None);
    };
    let mut alloc = kept.alloc;
    let mut r = crate::requests::replay(&later, &mut alloc);
    if let Some(o) = &mut r.oom {
        o.request += offset;
    }
    let mut phases = est.phases;
    phases.extend(r.phases);
    let whole = crate::requests::Replayed::of(
        phases,
        kept.peak_requested.max(r.peak_requested_bytes),
        r.oom,
        r.repeated_steps,
    );
    Ok(Some((reqs, whole)))
}

/// The requests of `reqs`' phases from the `n`-th on, as a sequence of their
/// own (frees renumbered from its first malloc), and where it starts in
/// `reqs`: what an allocator that served the phases before runs next.
/// `None` unless the phases run back to back from the first request and
/// the later ones free only what they allocate.
fn later_phases(
    reqs: &crate::requests::Requests,
    n: usize,
) -> Option<(crate::requests::Requests, usize)> {
    use crate::requests::Request;
    let mut at = 0;
    for p in &reqs.phases {
        if p.start != at {
            return None;
        }
        at = p.end;
    }
    let start = reqs.phases.get(n)?.start;
    let before = reqs.requests[..start]
        .iter()
        .filter(|q| q.malloc_bytes().is_some())
        .count() as u32;
    // (a collect into `Option<Vec<_>>` cannot size its vector up front)
    let mut requests = Vec::with_capacity(reqs.requests.len() - start);
    for q in &reqs.requests[start..] {
        requests.push(match *q {
            Request::Free(k) => Request::Free(k.checked_sub(before)?),
            q => q,
        });
    }
    let later = crate::requests::Requests {
        requests,
        phases: reqs.phases[n..]
            .iter()
            .map(|p| p.shifted_down(start))
            .collect(),
        rules: reqs
            .rules
            .range(start..)
            .map(|(i, r)| (i - start, r.clone()))
            .collect(),
        measured_sizes: reqs.measured_sizes,
        unmeasured: reqs.unmeasured.clone(),
        switches: from_request(&reqs.switches, start),
        driver: from_request(&reqs.driver, start),
        // served on the allocator the model ran on: what the driver did
        // before `start` it did there (the first kernels and the first
        // cuBLAS handle come in `forward0`)
        first_kernels: reqs.first_kernels.filter(|&k| k > start).map(|k| k - start),
        first_cublas: reqs.first_cublas.filter(|&k| k > start).map(|k| k - start),
        // the CPU tensors were mapped and unmapped in `load`, before
        // `start`, on that allocator too; a library loaded after it is
        // loaded there
        host: from_request(&reqs.host, start)
            .into_iter()
            .filter(|h| h.at > 0)
            .collect(),
    };
    if later.host.iter().any(|h| !h.what.once_per_process()) {
        return None;
    }
    Some((later, start))
}

/// The entries of a list keyed by request index (`Requests::switches`,
/// `Requests::driver`) at or after `start`, counted from it.
fn from_request<T: Copy>(list: &[At<T>], start: usize) -> Vec<At<T>> {
    list.iter()
        .filter(|x| x.at >= start)
        .map(|x| At {
            at: x.at - start,
            ..*x
        })
        .collect()
}

/// [`estimate`], running the model at every step (no repetition).
pub fn estimate_every_step(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Estimate> {
    run_model(config, workload, options, Keep::AT_PEAK).map(|(est, _)| est)
}

/// [`estimate_every_step`], and with `keep.allocator` a copy of the
/// allocator twin as the last phase left it (`None` after an
/// out-of-memory, or if it served requests between phases).
///
/// Without `keep.at_peak`, the live tensors at the peak (`live_at_peak`,
/// `breakdown_at_peak`, `by_module_at_peak`) are left empty: a run for its
/// requests alone does not need them (about 4% of a model run).
fn run_model(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
    keep: Keep,
) -> Result<(Estimate, Option<Continuation>)> {
    run_model_with(config, workload, options, keep, None).map(|(est, kept, _)| (est, kept))
}

/// [`run_model`], and with `decode` (`--mode generate`) the allocator
/// and the live blocks at the start of its decode step
/// ([`crate::decode::DecodeStart`]), a static cache sized as it says.
fn run_model_with(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
    keep: Keep,
    decode: Option<crate::decode::DecodeRun>,
) -> Result<(
    Estimate,
    Option<Continuation>,
    Option<crate::decode::DecodeStart>,
)> {
    check(config, workload)?;
    // a run of every decode step keeps each step's requests and events
    // (some 400 KB a step for a 7B model, measured), so a long generation
    // the decode template cannot serve is refused rather than exhausting
    // the host's memory
    if workload.mode == Mode::Generate && workload.new_tokens > MAX_TOKENS_ONE_BY_ONE {
        return Err(ModelError::Unsupported(format!(
            "{} new tokens run one by one: the decode template cannot serve this \
             generation (a step crosses a sliding window, a trace is recorded for \
             --snapshot/--html, or a sweep replays its requests), and a run of every \
             step keeps each step's record, so it runs at most {MAX_TOKENS_ONE_BY_ONE}",
            workload.new_tokens
        )));
    }
    let mut profile = options.profile.clone();
    if options.unlimited {
        profile.total_memory = vramscope_alloc::UNLIMITED_BYTES;
        profile.usable_memory = vramscope_alloc::UNLIMITED_BYTES;
    }
    let rt = Runtime::new(RuntimeConfig {
        profile,
        allocator: options.allocator.clone(),
        // the workload starts in a fresh process: `load` copies the
        // parameters in before any kernel runs
        fresh_process: true,
    });
    if let Some(f) = options.memory_fraction {
        rt.set_memory_fraction(f)?;
    }
    rt.start_event_log();
    if options.record_trace {
        rt.record_memory_history(true);
    }
    let mut run = Run {
        rt: rt.clone(),
        phases: Vec::new(),
        current: String::new(),
        record: options.record_trace,
        marks: Vec::new(),
        end: None,
        requests: Vec::new(),
        keep_allocator: keep.allocator,
        allocator: None,
        fits_from: None,
        peak_requested: 0,
        peak_requested_step1: 0,
        steps: Vec::new(),
        step_starts: Vec::new(),
        forward_ends: Vec::new(),
        loop_done: None,
        earlier_peaks: crate::decode::Peaks::default(),
        decode_from: decode.map(|d| d.from),
        max_cache_len: decode.and_then(|d| d.max_cache_len),
        decode_start: None,
        windows: Vec::new(),
    };
    let mut params = ParamCount::default();
    let outcome = drive(config, workload, &mut run, &mut params);
    let oom = match outcome {
        Ok(()) => None,
        Err(ModelError::Engine(EngineError::OutOfMemory { op, bytes, detail })) => {
            // the figures at the out-of-memory, not after the unwinding freed
            // the model
            run.end_phase_with(rt.oom_figures());
            Some(Oom {
                phase: run.current.clone(),
                op: op.to_string(),
                module: rt.last_oom_module().unwrap_or_default(),
                bytes,
                message: detail,
            })
        }
        Err(e) => return Err(e),
    };
    let recorded = options.record_trace.then(|| {
        let mut trace = rt.trace();
        let (end, segments) = match (&oom, run.end.take()) {
            // the out-of-memory observer's view: up to the `oom` entry
            (Some(_), _) => {
                let end = trace
                    .iter()
                    .rposition(|e| e.action == vramscope_alloc::TraceAction::Oom)
                    .map_or(trace.len(), |i| i + 1);
                (end, rt.oom_segments().unwrap_or_default())
            }
            (None, Some(end)) => end,
            (None, None) => (trace.len(), rt.segments()),
        };
        trace.truncate(end);
        let phases = run
            .marks
            .iter()
            .map(|m| PhaseSpan::new(m.name.clone(), m.start.min(end), m.end.min(end)))
            .collect();
        RecordedRun {
            trace,
            phases,
            segments,
        }
    });
    let log = rt.take_event_log().unwrap_or_default();
    let live = if keep.at_peak {
        log.live_at_peak()
    } else {
        Vec::new()
    };
    let (breakdown, by_module) = summarize(&live);
    let peak_allocated = run
        .phases
        .iter()
        .map(|p| p.peak_allocated_bytes)
        .max()
        .unwrap_or(0);
    let peak_reserved = run
        .phases
        .iter()
        .map(|p| p.peak_reserved_bytes)
        .max()
        .unwrap_or(0);
    let peak_phase = run
        .phases
        .iter()
        .find(|p| p.peak_allocated_bytes == peak_allocated)
        .map(|p| p.name.clone())
        .unwrap_or_default();
    let allocator = if oom.is_none() {
        run.allocator.take()
    } else {
        None
    };
    let est = Estimate {
        phases: run.phases,
        peak_allocated_bytes: peak_allocated,
        peak_reserved_bytes: peak_reserved,
        peak_phase,
        breakdown_at_peak: breakdown,
        by_module_at_peak: by_module,
        live_at_peak: live,
        parameter_count: params.numel,
        parameter_bytes: params.bytes,
        oom,
        ops_simulated: rt.ops_simulated(),
        unmeasured: log.unmeasured.clone(),
        events: log,
        recorded,
        phase_requests: run.requests,
        decode_steps: std::mem::take(&mut run.steps),
    };
    let decode = run.decode_start.take().map(|mut d| {
        d.step_starts = std::mem::take(&mut run.step_starts);
        d.forward_ends = std::mem::take(&mut run.forward_ends);
        d.loop_done = run.loop_done;
        d
    });
    Ok((est, allocator, decode))
}

/// What is live, by category and by module path, the largest first.
#[allow(clippy::type_complexity)]
fn summarize(live: &[AllocRecord]) -> (Vec<(Category, u64)>, Vec<(String, u64)>) {
    // a few categories; modules keyed by the records' own names (copied
    // once each), the top level (an empty name, most records) summed apart
    // so that it never reaches the hash map: hashing and comparing empty
    // strings there was measurably slow (`docs/performance.md`)
    let mut breakdown: Vec<(Category, u64)> = Vec::new();
    let mut top: Option<u64> = None;
    let mut by_mod: HashMap<&str, u64> = HashMap::new();
    for r in live {
        match breakdown.iter_mut().find(|(c, _)| *c == r.category) {
            Some(b) => b.1 += r.bytes,
            None => breakdown.push((r.category, r.bytes)),
        }
        if r.module.is_empty() {
            *top.get_or_insert(0) += r.bytes;
        } else {
            *by_mod.entry(&*r.module).or_default() += r.bytes;
        }
    }
    // the largest first; equal sizes by category name
    breakdown.sort_by_cached_key(|(c, _)| c.to_string());
    breakdown.sort_by_key(|b| std::cmp::Reverse(b.1));
    let mut by_module: Vec<(String, u64)> = top
        .map(|b| (String::new(), b))
        .into_iter()
        .chain(by_mod.into_iter().map(|(m, b)| (m.to_owned(), b)))
        .collect();
    by_module.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    (breakdown, by_module)
}

/// `--mode generate` of more than [`crate::decode::MODEL_NEW_TOKENS`]
/// tokens: the model runs that many, and the allocator serves the later
/// decode steps from a template of its requests ([`crate::decode`]).
/// `None` where their requests do not repeat so (then the model runs every
/// step). The event log and `ops_simulated` are those of the model's run.
fn by_decode_template(
    config: &HfConfig,
    workload: &Workload,
    options: &EstimateOptions,
) -> Result<Option<Estimate>> {
    use crate::decode::{DecodeRun, LastStepRun, FROM, MODEL_NEW_TOKENS};
    if workload.mode != Mode::Generate
        || options.record_trace
        || workload.new_tokens <= MODEL_NEW_TOKENS
    {
        return Ok(None);
    }
    let short = Workload {
        new_tokens: MODEL_NEW_TOKENS,
        ..workload.clone()
    };
    // a static cache is sized for the whole generation (prompt + N - 1): the
    // short run's is sized so too
    let static_len = (workload.cache == crate::CacheKind::Static)
        .then(|| workload.seq + workload.new_tokens - 1);
    let decode = DecodeRun {
        from: FROM,
        max_cache_len: static_len,
    };
    let (mut est, _, start) = run_model_with(config, &short, options, Keep::FIGURES, Some(decode))?;
    if est.oom.is_some() {
        // the full run stops at the same place
        est.live_at_peak = est.events.live_at_peak();
        (est.breakdown_at_peak, est.by_module_at_peak) = summarize(&est.live_at_peak);
        return Ok(Some(est));
    }
    // (a step reaching a sliding window changes what later steps allocate)
    let start = start.filter(|s| s.one_regime(workload.seq, workload.new_tokens));
    // a static cache's last step pads no mask: it is the last step of a run
    // whose prompt ends where the long run's last step begins
    let last = match static_len {
        Some(len) => {
            let tail = Workload {
                seq: workload.seq + workload.new_tokens - MODEL_NEW_TOKENS,
                new_tokens: MODEL_NEW_TOKENS,
                ..workload.clone()
            };
            let decode = DecodeRun {
                from: FROM,
                max_cache_len: Some(len),
            };
            // (its longer prompt may need more memory than the long run:
            // run without a limit, its requests are the same)
            let unlimited = EstimateOptions {
                unlimited: true,
                memory_fraction: None,
                ..options.clone()
            };
            let (e, _, s) = run_model_with(config, &tail, &unlimited, Keep::FIGURES, Some(decode))?;
            match s {
                Some(s) => Some((e, s)),
                None => return Ok(None),
            }
        }
        None => None,
    };
    let Some(served) = start.and_then(|s| {
        let last = last.as_ref().map(|(est, start)| LastStepRun { est, start });
        crate::decode::serve(&est, s, workload.new_tokens, &options.profile, last)
    }) else {
        return Ok(None);
    };
    let d = served.decode;
    est.phases[2] = PhaseFigures {
        name: est.phases[2].name.clone(),
        allocated_bytes: d.allocated_bytes,
        peak_allocated_bytes: d.peak_allocated_bytes,
        reserved_bytes: d.reserved_bytes,
        peak_reserved_bytes: d.peak_reserved_bytes,
        requested_bytes: d.requested_bytes,
    };
    // (the steps that ended before the step `FROM` began)
    est.decode_steps.truncate(FROM as usize - 1);
    est.decode_steps.extend(served.steps);
    est.oom = served.oom;
    est.peak_allocated_bytes = est
        .phases
        .iter()
        .map(|p| p.peak_allocated_bytes)
        .max()
        .unwrap_or(0);
    est.peak_reserved_bytes = est
        .phases
        .iter()
        .map(|p| p.peak_reserved_bytes)
        .max()
        .unwrap_or(0);
    est.peak_phase = est
        .phases
        .iter()
        .find(|p| p.peak_allocated_bytes == est.peak_allocated_bytes)
        .map(|p| p.name.clone())
        .unwrap_or_default();
    (est.breakdown_at_peak, est.by_module_at_peak) = summarize(&served.live_at_peak);
    est.live_at_peak = served.live_at_peak;
    // (its requests are the model's run's, not the workload's)
    est.phase_requests = Vec::new();
    Ok(Some(est))
}

/// Workload options that no family can honour.
fn check(config: &HfConfig, w: &Workload) -> Result<()> {
    if w.batch <= 0 {
        return Err(ModelError::Unsupported(format!("batch {}", w.batch)));
    }
    if w.task != Task::Image && w.seq <= 0 {
        return Err(ModelError::Unsupported(format!(
            "sequence length {}",
            w.seq
        )));
    }
    if !matches!(w.weights, DType::F32 | DType::BF16 | DType::F16) {
        return Err(ModelError::Unsupported(format!("weights {:?}", w.weights)));
    }
    if let Some(a) = w.autocast {
        if !matches!(a, DType::BF16 | DType::F16) {
            return Err(ModelError::Unsupported(format!("autocast to {a:?}")));
        }
    }
    if w.mode == Mode::Train {
        w.optimizer_config().check()?;
    }
    if w.mode == Mode::Generate {
        if w.task != Task::Causal {
            return Err(ModelError::Unsupported(
                "generate() needs a causal LM (--task causal)".into(),
            ));
        }
        if w.new_tokens < 1 {
            return Err(ModelError::Unsupported(format!(
                "{} new tokens (expected at least 1)",
                w.new_tokens
            )));
        }
    }
    if w.steps == 0 {
        return Err(ModelError::Unsupported("0 steps".into()));
    }
    // the requests of every step are kept (a step of a 7B model is some
    // 8,000 of them), so an absurd count would exhaust memory rather than
    // fail cleanly; every step after the first two repeats the second's
    // requests, so a few are all an estimate needs
    if w.steps > MAX_STEPS {
        return Err(ModelError::Unsupported(format!(
            "{} steps; the twin runs at most {MAX_STEPS}",
            w.steps
        )));
    }
    // a bound that no published model comes near (the largest have a few
    // hundred layers) and that keeps a run without a limit finite: a model
    // of 10,000 layers takes seconds, one of 2^40 would never end
    for key in ["num_hidden_layers", "n_layer"] {
        if let Some(n) = config.opt_int(key)? {
            if n > MAX_LAYERS {
                return Err(ModelError::Field {
                    field: key.into(),
                    detail: format!("{n} layers; the twin runs models of at most {MAX_LAYERS}"),
                });
            }
        }
    }
    Ok(())
}

/// The most layers a config may ask for ([`check`]).
const MAX_LAYERS: i64 = 10_000;

/// The most steps (training) or passes (inference) a workload may ask for
/// ([`check`]).
const MAX_STEPS: usize = 1_000;

/// The most new tokens a generation runs step by step, keeping every
/// step's record ([`run_model_with`]).
const MAX_TOKENS_ONE_BY_ONE: i64 = 8_192;

/// The model's parameters as loaded: how many elements, and their bytes in
/// the weights' dtype.
#[derive(Debug, Clone, Copy, Default)]
struct ParamCount {
    numel: u64,
    bytes: u64,
}

/// What a model run keeps beyond its phases' figures ([`run_model`]).
#[derive(Debug, Clone, Copy)]
struct Keep {
    /// a copy of the allocator twin as the last phase left it
    allocator: bool,
    /// the live tensors at the peak (`live_at_peak`, `breakdown_at_peak`,
    /// `by_module_at_peak`)
    at_peak: bool,
}

impl Keep {
    /// the figures alone (a run for its requests)
    const FIGURES: Keep = Keep {
        allocator: false,
        at_peak: false,
    };
    /// and the allocator (a run whose later steps it serves)
    const ALLOCATOR: Keep = Keep {
        allocator: true,
        at_peak: false,
    };
    /// and the live tensors at the peak (a whole estimate)
    const AT_PEAK: Keep = Keep {
        allocator: false,
        at_peak: true,
    };
}

struct Run {
    rt: Runtime,
    phases: Vec<PhaseFigures>,
    current: String,
    /// recording the allocator trace
    record: bool,
    /// each phase's span of the allocator trace, while recording
    marks: Vec<PhaseSpan>,
    /// the trace length and the segments when the workload ended
    end: Option<(usize, Vec<vramscope_alloc::SegmentInfo>)>,
    /// each phase's span of allocator requests
    requests: Vec<std::ops::Range<usize>>,
    /// keep a copy of the allocator when the workload ends
    keep_allocator: bool,
    /// the allocator as the last phase left it
    allocator: Option<Continuation>,
    /// the allocator's device frees when it began recording step 1's fits
    fits_from: Option<i64>,
    /// the most bytes requested at once, over the phases that ended, and
    /// over those since `fits_from`
    peak_requested: i64,
    peak_requested_step1: i64,
    /// decode: each step's figures
    steps: Vec<StepFigures>,
    /// decode: the requests before each iteration `k >= 1` of the loop and
    /// before its end
    step_starts: Vec<usize>,
    /// decode: the requests before each decode forward's return
    forward_ends: Vec<usize>,
    loop_done: Option<usize>,
    /// the highest allocated and reserved peaks of the phase's spans before
    /// its last peak reset (a step's end)
    earlier_peaks: crate::decode::Peaks,
    /// take the allocator at the start of this decode step
    decode_from: Option<i64>,
    /// a static cache's `max_cache_len` ([`crate::decode::DecodeRun`])
    max_cache_len: Option<i64>,
    decode_start: Option<crate::decode::DecodeStart>,
    /// the cache's sliding windows ([`GenerateEvent::Window`])
    windows: Vec<i64>,
}

/// The allocator twin as a run's last phase left it, to serve the requests
/// of later steps ([`by_repetition`]).
struct Continuation {
    alloc: CachingAllocator,
    /// its device frees when it began recording the fits of step 1
    /// ([`CachingAllocator::record_fits`]), if it did
    fits_from: Option<i64>,
    /// the most bytes requested at once in the run, and in step 1
    peak_requested: i64,
    peak_requested_step1: i64,
}

/// Mallocs and frees served so far (an out-of-memory is not served).
fn requests_so_far(rt: &Runtime) -> usize {
    let a = rt.stats().allocation;
    (a.all().allocated + a.all().freed) as usize
}

impl Run {
    fn begin(&mut self, name: String) {
        self.rt.reset_peak_memory_stats();
        self.earlier_peaks = crate::decode::Peaks::default();
        let at = requests_so_far(&self.rt);
        self.requests.push(at..at);
        if self.record {
            let at = self.rt.trace_len();
            self.marks.push(PhaseSpan::new(name.clone(), at, at));
        }
        self.current = name;
    }
    /// The workload is done: what a `_dump_snapshot()` now would hold.
    fn finish(&mut self) {
        if self.record {
            self.end = Some((self.rt.trace_len(), self.rt.segments()));
        }
        // (only if nothing reached the allocator since the last phase ended)
        let at = requests_so_far(&self.rt);
        if self.keep_allocator && self.requests.last().is_some_and(|r| r.end == at) {
            self.allocator = Some(Continuation {
                alloc: self.rt.allocator(),
                fits_from: self.fits_from,
                peak_requested: self.peak_requested,
                peak_requested_step1: self.peak_requested_step1,
            });
        }
    }
    fn end_phase(&mut self) {
        self.end_phase_with(None);
    }
    fn end_phase_with(&mut self, figures: Option<vramscope_engine::MemoryFigures>) {
        if figures.is_none() {
            // (after an out-of-memory the unwinding has freed more: the span
            // ends at the failed request)
            let at = requests_so_far(&self.rt);
            if let Some(r) = self.requests.last_mut() {
                r.end = at;
            }
            if self.keep_allocator {
                let peak = self.rt.stats().requested_bytes.all().peak;
                self.peak_requested = self.peak_requested.max(peak);
                if self.fits_from.is_some() {
                    self.peak_requested_step1 = self.peak_requested_step1.max(peak);
                }
            }
        }
        if self.record {
            let at = self.rt.trace_len();
            if let Some(m) = self.marks.last_mut() {
                m.end = at;
            }
        }
        let f = figures.unwrap_or_else(|| self.rt.figures());
        self.phases.push(PhaseFigures {
            name: self.current.clone(),
            allocated_bytes: f.allocated,
            peak_allocated_bytes: f.peak.max(self.earlier_peaks.allocated),
            reserved_bytes: f.reserved,
            peak_reserved_bytes: f.peak_reserved.max(self.earlier_peaks.reserved),
            requested_bytes: f.requested,
        });
    }
    /// A decode step ends: its figures, and the peaks start again (the
    /// phase's keep the highest).
    fn end_step(&mut self) {
        let f = StepFigures::of(&self.rt.stats());
        self.earlier_peaks = self.earlier_peaks.with(&f);
        self.steps.push(f);
        self.rt.reset_peak_memory_stats();
    }
    /// What `generate()` says: the phases and the steps it marks.
    fn generate_event(&mut self, e: crate::families::generate::GenerateEvent) -> Result<()> {
        use crate::families::generate::GenerateEvent;
        match e {
            GenerateEvent::PrefillDone => {
                self.end_phase();
                self.begin("decode".into());
            }
            GenerateEvent::ForwardDone => {
                self.end_step();
                self.forward_ends.push(requests_so_far(&self.rt));
            }
            GenerateEvent::Step(k) => {
                self.step_starts.push(requests_so_far(&self.rt));
                if self.decode_from == Some(k) {
                    let copy = self.rt.allocator_with_live();
                    self.decode_start = Some(crate::decode::DecodeStart {
                        alloc: copy.allocator,
                        live: copy.live,
                        log_peak: self.rt.event_log_peak().unwrap_or_default(),
                        earlier_peaks: self.earlier_peaks,
                        step_starts: Vec::new(),
                        forward_ends: Vec::new(),
                        loop_done: None,
                        windows: self.windows.clone(),
                    });
                }
            }
            GenerateEvent::LoopDone => {
                self.loop_done = Some(requests_so_far(&self.rt));
            }
            GenerateEvent::Window(w) => self.windows.push(w),
        }
        Ok(())
    }
}

fn drive(config: &HfConfig, w: &Workload, run: &mut Run, params: &mut ParamCount) -> Result<()> {
    let rt = run.rt.clone();
    run.begin("load".into());
    let mut ddp = None;
    let (mut model, ps, fsdp) = match &w.parallel {
        None => {
            let mut model: Box<dyn HfModel> = families::build(&rt, config, w.task, w.weights)?;
            model.cuda()?;
            if let Some(lora) = &w.lora {
                // model = get_peft_model(model, LoraConfig(...))
                model.apply_lora(lora, w.mode == Mode::Train)?;
            }
            let ps = model.parameters();
            (model, ps, None)
        }
        Some(Parallel::Fsdp(c)) => fsdp_load(&rt, config, w, c)?,
        Some(Parallel::Ddp(c)) => {
            let (model, ps, d) = ddp_load(&rt, config, w, c)?;
            ddp = Some(d);
            (model, ps, None)
        }
    };
    *params = ParamCount {
        numel: ps.iter().map(|p| p.numel() as u64).sum(),
        bytes: ps.iter().map(|p| p.numel() as u64 * w.weights.size()).sum(),
    };
    let ps = match &fsdp {
        Some(f) => f.borrow().sharded_parameters(&ps),
        None => ps,
    };
    // the optimizer gets the parameters that require grad (all but the
    // frozen base of a LoRA model)
    let ps: Vec<Tensor> = ps.into_iter().filter(|p| p.requires_grad()).collect();
    // (`generate` builds no optimizer)
    let mut opt = match w.mode {
        Mode::Train | Mode::Infer => Some(Optimizer::new(w.optimizer_config(), ps)?),
        Mode::Generate => None,
    };
    let inputs = make_inputs(&rt, config, w)?;
    // the process's first kernels (`driver_va.rs`, rule 6): on the GPU the
    // context's range goes at the launch of `forward0`'s first op, after its
    // allocation, or at once where it becomes a hole
    // (`Runtime::first_kernels`)
    rt.first_kernels();
    run.end_phase();
    match w.mode {
        Mode::Train => {
            if let Some(which) = &w.checkpointing {
                model.enable_gradient_checkpointing(which)?;
                if w.lora.is_some() {
                    // as peft and the HF Trainer set it up
                    model.enable_input_require_grads();
                }
            }
            model.set_training(true);
            for i in 0..w.steps {
                let accumulation = w.accumulation.max(1);
                for m in 0..accumulation {
                    let sub = if accumulation > 1 {
                        format!(".{m}")
                    } else {
                        String::new()
                    };
                    run.begin(format!("forward{i}{sub}"));
                    if i == 1 && m == 0 && run.keep_allocator {
                        // what `by_repetition` needs to know whether step 2
                        // can repeat step 1 without a replay
                        run.fits_from = Some(rt.stats().num_device_free);
                        rt.record_fits();
                    }
                    // the last micro-batch syncs the gradients: the others
                    // run under `ddp.no_sync()` or after
                    // `model.set_requires_gradient_sync(False)`
                    let sync = m + 1 == accumulation;
                    if let Some(f) = &fsdp {
                        if accumulation > 1 && (m == 0 || sync) {
                            f.borrow_mut().set_requires_gradient_sync(sync);
                        }
                    }
                    if let Some(d) = &ddp {
                        // DistributedDataParallel.forward
                        d.borrow_mut().forward(sync)?;
                    }
                    let sink = ddp.as_ref().is_some_and(|d| d.borrow().sinks_outputs());
                    let loss = forward(&rt, model.as_ref(), &inputs, w.autocast, sink)?;
                    let Some(loss) = loss else {
                        return Err(ModelError::Unsupported("the model returned no loss".into()));
                    };
                    run.end_phase();
                    run.begin(format!("backward{i}{sub}"));
                    loss.backward()?;
                    drop(loss);
                    run.end_phase();
                }
                let opt = opt.as_mut().expect("built for training");
                run.begin(format!("step{i}"));
                opt.step()?;
                run.end_phase();
                run.begin(format!("zero_grad{i}"));
                opt.zero_grad();
                run.end_phase();
            }
        }
        Mode::Infer => {
            model.set_training(false);
            let no_labels = Inputs {
                labels: None,
                ..inputs.clone()
            };
            for i in 0..w.steps {
                run.begin(format!("forward{i}"));
                let pass = || -> Result<()> {
                    if let Some(d) = &ddp {
                        // DistributedDataParallel.forward, in the pass's context
                        d.borrow_mut().forward(true)?;
                    }
                    let sink = ddp.as_ref().is_some_and(|d| d.borrow().sinks_outputs());
                    let out = with_autocast(&rt, w.autocast, || {
                        ddp_sink(&rt, model.forward(&no_labels)?, sink)
                    })?;
                    let logits = out.logits;
                    drop(out.retained);
                    drop(out.loss);
                    drop(logits);
                    Ok(())
                };
                match w.grad {
                    GradMode::NoGrad => rt.no_grad(pass)?,
                    GradMode::InferenceMode => rt.inference_mode(pass)?,
                    GradMode::Enabled => pass()?,
                }
                run.end_phase();
            }
        }
        Mode::Generate => {
            model.set_training(false);
            let ids = inputs
                .input_ids
                .clone()
                .ok_or_else(|| ModelError::Unsupported("generate() needs input_ids".into()))?;
            let spec = crate::families::generate::GenerateSpec {
                new_tokens: w.new_tokens,
                cache: w.cache,
                max_cache_len: run.max_cache_len,
            };
            run.begin("prefill".into());
            let mut on = |e| run.generate_event(e);
            let out = model.generate(&ids, &spec, &mut on)?;
            // (the last step ends with `generate()`)
            run.end_step();
            run.end_phase();
            drop(out);
        }
    }
    run.finish();
    drop(opt);
    Ok(())
}

/// What FSDP2 and DDP are not modelled for, refused by name: `generate`
/// under FSDP (under DDP it is `ddp.module.generate(...)`, the wrapper's
/// forward not called), FSDP under `torch.inference_mode()` (its all-gather outputs would be
/// inference tensors), autocast to a dtype other than FSDP2's own
/// `param_dtype`, and FSDP2's `cast_forward_inputs` of pixel values to a
/// `param_dtype` other than theirs.
fn parallel_modelled(kind: &str, config: &HfConfig, w: &Workload) -> Result<()> {
    let fsdp_param_dtype = match &w.parallel {
        Some(Parallel::Fsdp(c)) => c.param_dtype,
        _ => None,
    };
    let what = if w.mode == Mode::Generate && kind == "FSDP" {
        format!("{kind} with --mode generate (generate() under {kind} is not modelled)")
    } else if kind == "FSDP" && w.mode == Mode::Infer && w.grad == GradMode::InferenceMode {
        "FSDP under torch.inference_mode() (not modelled; --grad no-grad and enabled are)".into()
    } else if let (Some(a), Some(p)) = (w.autocast, fsdp_param_dtype.filter(|_| kind == "FSDP")) {
        if a == p {
            return Ok(());
        }
        format!(
            "FSDP under torch.autocast to {a:?} with --fsdp-param-dtype {p:?} (the layers' \
             inputs cast by cast_forward_inputs are not modelled; the same dtype is)"
        )
    } else if let Some(p) = fsdp_param_dtype.filter(|&p| w.task == Task::Image && p != w.weights) {
        format!(
            "FSDP of {} with --fsdp-param-dtype {p:?} over {:?} weights (cast_forward_inputs \
             of pixel_values is not modelled)",
            config.model_type, w.weights
        )
    } else {
        return Ok(());
    };
    Err(ModelError::Unsupported(what))
}

/// The model under FSDP2 (`crate::parallel::fsdp`): built with its
/// parameters on the device and empty (the unsharded parameters), each
/// layer and then the model sharded, and the hooks registered. Returns the
/// model, its (unsharded) parameters and the FSDP state.
#[allow(clippy::type_complexity)]
fn fsdp_load(
    rt: &Runtime,
    config: &HfConfig,
    w: &Workload,
    c: &crate::parallel::FsdpConfig,
) -> Result<(
    Box<dyn HfModel>,
    Vec<Tensor>,
    Option<std::rc::Rc<std::cell::RefCell<crate::parallel::fsdp::Fsdp>>>,
)> {
    parallel_modelled("FSDP", config, w)?;
    // `torch.optim` over the sharded DTensors: DTensor is one of
    // `_foreach_supported_types` (`torch/distributed/tensor/__init__.py`), so
    // the defaults are those of plain tensors, and every op of the
    // element-wise optimizers (foreach, for-loop or fused) runs on the local
    // shards, all of one placement (`Shard(0)`), with no redistribution.
    // Adafactor's factored second moments do not stay local: `new_zeros` of
    // the row/column shapes gives replicated states (`new_factory_strategy`)
    // and the column norm reduces over the sharded dim; refused by name.
    use vramscope_engine::optim::OptimizerKind;
    match w.optimizer {
        OptimizerKind::AdamW
        | OptimizerKind::Adam
        | OptimizerKind::Sgd
        | OptimizerKind::Adagrad
        | OptimizerKind::RmsProp => {}
        OptimizerKind::Adafactor => {
            return Err(ModelError::Unsupported(
                "FSDP with Adafactor (its row and column states are replicated DTensors and its \
                 column norm reduces over the sharded dim: the redistributions are not \
                 modelled; adamw, adam, sgd, adagrad and rmsprop are)"
                    .into(),
            ));
        }
    }
    // the unsharded parameters, in the dtype they are all-gathered in
    let unsharded = c.param_dtype.unwrap_or(w.weights);
    rt.set_parameters_on_device_unallocated(Some(unsharded));
    let built = families::build(rt, config, w.task, w.weights).and_then(|mut m| {
        if let Some(lora) = &w.lora {
            // get_peft_model on the CPU model, then fully_shard: the
            // adapters gathered in `param_dtype`, else in their own dtype
            rt.set_parameters_on_device_unallocated(Some(
                c.param_dtype.unwrap_or(lora_adapter_dtype(w.weights)),
            ));
            let base = m.parameters();
            m.apply_lora(lora, w.mode == Mode::Train)?;
            return Ok((m, Some(base)));
        }
        Ok((m, None))
    });
    rt.set_parameters_on_device_unallocated(None);
    let (mut model, base) = built?;
    // each parameter's dtype before any cast: the weights', or an adapter's
    let orig = |t: &Tensor| match &base {
        Some(b) if !b.iter().any(|p| p.same(t)) => lora_adapter_dtype(w.weights),
        _ => w.weights,
    };
    let Some(layers) = model.layer_parameters() else {
        return Err(ModelError::Unsupported(format!(
            "FSDP of model_type `{}` (its layers are not listed for fully_shard)",
            config.model_type
        )));
    };
    let all = model.parameters();
    let root: Vec<Tensor> = all
        .iter()
        .filter(|p| !layers.iter().flatten().any(|q| q.same(p)))
        .cloned()
        .collect();
    let fsdp = {
        let m = &mut model;
        crate::parallel::fsdp::Fsdp::shard(rt, c, &orig, layers, root, &mut || m.cuda())?
    };
    model.set_module_hooks(std::rc::Rc::new(crate::parallel::fsdp::FsdpHooks(
        fsdp.clone(),
    )))?;
    Ok((model, all, Some(fsdp)))
}

/// A LoRA adapter's dtype over weights of `weights`: peft's
/// `cast_adapter_dtype` (`autocast_adapter_dtype=True`) upcasts bf16 and
/// fp16 adapters to float32.
fn lora_adapter_dtype(weights: DType) -> DType {
    match weights {
        DType::BF16 | DType::F16 => DType::F32,
        other => other,
    }
}

/// The model under DDP (`crate::parallel::ddp`): built, moved to the GPU,
/// then wrapped. Returns the model, its parameters and the reducer.
#[allow(clippy::type_complexity)]
fn ddp_load(
    rt: &Runtime,
    config: &HfConfig,
    w: &Workload,
    c: &crate::parallel::DdpConfig,
) -> Result<(
    Box<dyn HfModel>,
    Vec<Tensor>,
    std::rc::Rc<std::cell::RefCell<crate::parallel::ddp::Ddp>>,
)> {
    parallel_modelled("DDP", config, w)?;
    let mut model: Box<dyn HfModel> = families::build(rt, config, w.task, w.weights)?;
    model.cuda()?;
    if let Some(lora) = &w.lora {
        // get_peft_model(model, LoraConfig(...)), then DDP(model): the
        // reducer takes the adapters only
        model.apply_lora(lora, w.mode == Mode::Train)?;
    }
    let Some(buffers) = model.buffers() else {
        return Err(ModelError::Unsupported(format!(
            "DDP of model_type `{}` (its buffers are not listed)",
            config.model_type
        )));
    };
    let ps = model.parameters();
    let ddp = crate::parallel::ddp::Ddp::wrap(rt, c, ps.clone(), buffers)?;
    Ok((model, ps, ddp))
}

/// `loss = model(**inputs, labels=labels).loss`: the output object is a
/// temporary, so everything but the loss is released when the statement ends
/// (`sink`: DDP's `_DDPSink` over the outputs first).
fn forward(
    rt: &Runtime,
    model: &dyn HfModel,
    inputs: &Inputs,
    autocast: Option<DType>,
    sink: bool,
) -> Result<Option<Tensor>> {
    with_autocast(rt, autocast, || {
        let out = ddp_sink(rt, model.forward(inputs)?, sink)?;
        let loss = out.loss;
        drop(out.logits);
        drop(out.retained);
        Ok(loss)
    })
}

/// With `sink`, DDP's `_post_forward` under `find_unused_parameters`: the
/// output's loss and logits (its tensors, flattened in field order; the
/// cache object is no tensor) through `_DDPSink` (`parallel::ddp::sink`).
fn ddp_sink(
    rt: &Runtime,
    out: crate::families::ModelOutput,
    sink: bool,
) -> Result<crate::families::ModelOutput> {
    if !sink {
        return Ok(out);
    }
    let mut v = crate::parallel::ddp::sink(rt, vec![out.loss, out.logits])?.into_iter();
    Ok(crate::families::ModelOutput {
        loss: v.next().flatten(),
        logits: v.next().flatten(),
        retained: out.retained,
    })
}

fn with_autocast<T>(
    rt: &Runtime,
    autocast: Option<DType>,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    match autocast {
        None => f(),
        // `with torch.autocast("cuda", dtype=...)`: leaving the region
        // clears the cast cache (the weight copies not saved for backward)
        Some(dtype) => {
            let mut out = None;
            rt.autocast(dtype, || {
                out = Some(f());
                Ok(())
            })?;
            out.unwrap_or_else(|| {
                Err(ModelError::Unsupported(
                    "autocast region did not run".into(),
                ))
            })
        }
    }
}

/// The inputs, created on the GPU at the end of `load`.
fn make_inputs(rt: &Runtime, config: &HfConfig, w: &Workload) -> Result<Inputs> {
    rt.with_category(Category::Input, || -> Result<Inputs> {
        if w.task == Task::Image {
            // pixel_values = torch.randn(b, num_channels, size, size, dtype=W, device="cuda")
            let size = config.size("image_size", 224)?;
            let ch = config.size("num_channels", 3)?;
            let px = rt.randn(&[w.batch, ch, size, size], w.weights, Device::Cuda)?;
            // labels = torch.randint(0, num_labels, (b,), device="cuda")
            let labels = rt.empty(&[w.batch], DType::I64, Device::Cuda)?;
            Ok(Inputs {
                input_ids: None,
                pixel_values: Some(px),
                labels: Some(labels),
            })
        } else {
            // input_ids = torch.randint(0, vocab, (b, s), device="cuda"); labels = input_ids.clone()
            // (generate: no labels)
            let ids = rt.empty(&[w.batch, w.seq], DType::I64, Device::Cuda)?;
            let labels = match w.mode {
                Mode::Train | Mode::Infer => Some(ids.clone_tensor()?),
                Mode::Generate => None,
            };
            Ok(Inputs {
                input_ids: Some(ids),
                pixel_values: None,
                labels,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(conf: &str, memory_fraction: Option<f64>) -> EstimateOptions {
        EstimateOptions {
            allocator: AllocatorConfig::parse(conf).unwrap(),
            memory_fraction,
            ..EstimateOptions::default()
        }
    }

    /// `PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:F` limits the
    /// allocator as `set_per_process_memory_fraction(F)` does, and the
    /// capacity reported says so; a later `set_per_process_memory_fraction`
    /// replaces it (1.0 removes the limit).
    #[test]
    fn the_settings_fraction_is_the_limit_unless_the_run_sets_one() {
        let total = DeviceProfile::h100_torch_2_11().total_memory;
        let usable = DeviceProfile::h100_torch_2_11().usable_memory;
        let half = (0.5 * total as f64) as u64;
        assert_eq!(options("", None).limit_fraction(), None);
        assert_eq!(options("", None).capacity(1 << 20), usable - (1 << 20));
        let knob = options("per_process_memory_fraction:0.5", None);
        assert_eq!(knob.limit_fraction(), Some(0.5));
        assert_eq!(knob.capacity(1 << 20), half);
        assert_eq!(
            knob.capacity(1 << 20),
            options("", Some(0.5)).capacity(1 << 20)
        );
        // the allocator the estimate runs on holds the same limit
        let alloc = CachingAllocator::with_device(
            knob.allocator.clone(),
            vramscope_alloc::SimDevice::with_driver_placement(total, usable),
        );
        assert_eq!(alloc.allowed_memory_maximum(), Some(half));
        // the run's set_per_process_memory_fraction comes after the settings'
        let both = options("per_process_memory_fraction:0.1", Some(0.5));
        assert_eq!(both.limit_fraction(), Some(0.5));
        assert_eq!(both.capacity(0), half);
        let lifted = options("per_process_memory_fraction:0.1", Some(1.0));
        assert_eq!(lifted.limit_fraction(), None);
        assert_eq!(lifted.capacity(0), usable);
        assert_eq!(
            options("per_process_memory_fraction:1.0", None).limit_fraction(),
            None
        );
        // never more than the device has
        assert_eq!(
            options("per_process_memory_fraction:0.999", None).capacity(0),
            usable
        );
    }
}
