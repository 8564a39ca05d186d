//! What fits over several GPUs (`vramscope plan --fsdp N` / `--ddp N`): the
//! largest batch per rank, the fewest GPUs for a global batch, a sweep of
//! batches per rank and the levers (FSDP against DDP, resharding, mixed
//! precision, CPU offload, checkpointing, more GPUs), each from the twin's
//! run of every rank whose memory differs, the GPU's own out-of-memory path
//! deciding "fits".
//!
//! The two searches (each a chain of runs) and the runs that depend on
//! nothing (the levers, the sweep's rows) are taken in turn by threads of
//! this process; each run is the twin's alone, so the answers are those of
//! running them one after another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;

use vramscope_engine::DType;
use vramscope_models::parallel::fsdp::rank_classes;
use vramscope_models::{
    estimate, Checkpointing, DdpConfig, EstimateOptions, FsdpConfig, HfConfig, Mode, Parallel,
    Result, Workload,
};

use crate::search::not_modelled;

/// The most GPUs the fewest-GPUs search tries.
pub const MAX_GPUS: i64 = 64;
/// The largest batch per rank the search tries.
pub const MAX_BATCH_PER_RANK: i64 = 1 << 16;

/// What one workload gives on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RanksOutcome {
    /// every rank completes every step under the limit
    pub fits: bool,
    /// the fullest rank's peak reserved bytes (of the run without a limit
    /// where one ran out)
    pub peak_reserved_bytes: i64,
}

/// One lever's outcome at the batch per rank the plan looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelLever {
    /// what changes (`reshard_after_forward=False`, `DDP instead`, ...)
    pub name: String,
    /// its outcome on every rank
    pub outcome: RanksOutcome,
}

/// The fewest GPUs for a global batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fewest {
    /// the global batch asked for
    pub target_batch: i64,
    /// the fewest GPUs and the batch per rank there (`ceil(target / n)`);
    /// `None` when no count up to [`MAX_GPUS`] fits
    pub found: Option<(i64, i64)>,
}

/// What [`plan_parallel`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelPlan {
    /// the largest batch per rank that fits (0: not even 1; [`Largest`])
    pub max_batch_per_rank: i64,
    /// every batch per rank above the largest up to this one was run and
    /// does not fit ([`Largest::checked_up_to`])
    pub checked_up_to: i64,
    /// why the search for it stopped with no batch running out, when it
    /// did (a batch past the search's bound, or one that takes something
    /// the twin does not model): `max_batch_per_rank` is a lower bound
    pub capped: Option<String>,
    /// the batch per rank the levers are run at: the target's share, else
    /// the largest that fits (at least 1)
    pub at: i64,
    /// the workload as given at `at`
    pub here: RanksOutcome,
    /// with a target batch: the fewest GPUs
    pub fewest: Option<Fewest>,
    /// each batch per rank asked for, with its outcome
    pub sweep: Vec<(i64, RanksOutcome)>,
    /// the levers at `at` (none when asked for none)
    pub levers: Vec<ParallelLever>,
}

/// `par` over `n` ranks.
pub fn with_world(par: &Parallel, n: i64) -> Parallel {
    match par {
        Parallel::Fsdp(f) => Parallel::Fsdp(FsdpConfig {
            world: n,
            ..f.clone()
        }),
        Parallel::Ddp(d) => Parallel::Ddp(DdpConfig {
            world: n,
            ..d.clone()
        }),
    }
}

/// One rank of each group whose memory is the same: FSDP's ranks that
/// shard alike; under DDP every rank is the same.
fn representatives(config: &HfConfig, base: &Workload, par: &Parallel) -> Result<Vec<Parallel>> {
    Ok(match par {
        Parallel::Fsdp(f) => rank_classes(config, base.task, f.world, base.lora.as_ref())?
            .into_iter()
            .map(|ranks| {
                Parallel::Fsdp(FsdpConfig {
                    rank: ranks[0],
                    ..f.clone()
                })
            })
            .collect(),
        Parallel::Ddp(_) => vec![par.clone()],
    })
}

/// `base` under `par` on every rank that differs. Without `figures`,
/// whether all fit only: the first rank out of memory ends it, and no run
/// without the limit follows.
pub fn run_ranks(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    options: &EstimateOptions,
    figures: bool,
) -> Result<RanksOutcome> {
    let mut out = RanksOutcome {
        fits: true,
        peak_reserved_bytes: 0,
    };
    for p in representatives(config, base, par)? {
        let w = Workload {
            parallel: Some(p),
            ..base.clone()
        };
        let mut e = estimate(config, &w, options)?;
        if e.oom.is_some() {
            out.fits = false;
            if !figures {
                return Ok(out);
            }
            e = estimate(config, &w, &options.without_limit())?;
        }
        out.peak_reserved_bytes = out.peak_reserved_bytes.max(e.peak_reserved_bytes);
    }
    Ok(out)
}

/// The largest batch per rank that fits (0: not even 1), searched from 1
/// and made exact up to the search's first failure ([`largest_by`]).
pub fn largest_batch_per_rank(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    options: &EstimateOptions,
) -> Result<Largest> {
    let fits = |b: i64| fits_at(config, base, par, options, b, par.world());
    largest_by(&fits, 1)
}

/// Whether `base` at batch `batch` per rank fits on every rank of `par`
/// over `world` ranks.
fn fits_at(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    options: &EstimateOptions,
    batch: i64,
    world: i64,
) -> Result<bool> {
    let w = Workload {
        batch,
        ..base.clone()
    };
    Ok(run_ranks(config, &w, &with_world(par, world), options, false)?.fits)
}

/// The most batches per rank [`largest_by`]'s scan runs above the
/// bisection's answer.
pub const SCAN_LIMIT: i64 = 64;

/// What [`largest_by`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Largest {
    /// the largest batch per rank that fits (0: not even 1): no batch
    /// above it up to `checked_up_to` fits
    pub max: i64,
    /// every batch above `max` up to this one was run and does not fit
    /// (the doubling's first failure, unless the scan's bound or a batch
    /// the twin does not model stopped it first)
    pub checked_up_to: i64,
    /// why the doubling stopped with no batch running out, when it did
    /// (a batch past the search's bound, or one the twin does not model):
    /// `max` is then a lower bound
    pub capped: Option<String>,
}

/// The largest batch for which `fits` holds (0: not even 1), from `start`:
/// doubling while it fits, else halving until it does, then bisection
/// between the last that fits and the first that does not (from 1, the
/// probes are 1, 2, 4, ...). A batch past [`MAX_BATCH_PER_RANK`], or one
/// that takes what the twin does not model while doubling, stops it with
/// the last that fitted, and says why.
///
/// Whether a batch fits is not monotone in the batch (the allocator's
/// rounding and block splitting: `crate::boundary` has a GPU case), so the
/// bisection's answer need not be the largest below the failure that
/// bounds it: every batch between the two (at most [`SCAN_LIMIT`]) is run
/// too, and the largest that fits is the answer. Batches below it are not
/// all run (some may not fit), nor those past that failure.
pub(crate) fn largest_by(fits: &dyn Fn(i64) -> Result<bool>, start: i64) -> Result<Largest> {
    let known: std::cell::RefCell<HashMap<i64, bool>> = Default::default();
    let fits = |b: i64| -> Result<bool> {
        if let Some(&f) = known.borrow().get(&b) {
            return Ok(f);
        }
        let f = fits(b)?;
        known.borrow_mut().insert(b, f);
        Ok(f)
    };
    let (lo, capped, failed) = search(&fits, start)?;
    let mut out = Largest {
        max: lo,
        checked_up_to: lo,
        capped,
    };
    // the scan: from the answer up to the doubling's first failure
    let Some(failed) = failed else {
        return Ok(out);
    };
    let mut b = lo + 1;
    while b < failed && b <= lo + SCAN_LIMIT {
        match fits(b) {
            Ok(true) => out.max = b,
            Ok(false) => {}
            Err(e) if not_modelled(&e) => return Ok(out),
            Err(e) => return Err(e),
        }
        out.checked_up_to = b;
        b += 1;
    }
    if b == failed {
        out.checked_up_to = failed;
    }
    Ok(out)
}

/// The doubling (or halving) and bisection of [`largest_by`]: the batch it
/// ends on, why the doubling stopped without a failure, and the failure
/// that bounds the bisection (the doubling's first, or the halving's last).
#[allow(clippy::type_complexity)]
fn search(
    fits: &dyn Fn(i64) -> Result<bool>,
    start: i64,
) -> Result<(i64, Option<String>, Option<i64>)> {
    let start = start.clamp(1, MAX_BATCH_PER_RANK);
    let (mut lo, mut hi);
    let try_fits = |b: i64| -> Result<std::result::Result<bool, String>> {
        match fits(b) {
            Ok(f) => Ok(Ok(f)),
            // a batch past what the twin models (e.g. a convolution over
            // more than 2^31 elements, which PyTorch splits)
            Err(e) if b > 1 && not_modelled(&e) => Ok(Err(format!("batch {b} per rank: {e}"))),
            Err(e) => Err(e),
        }
    };
    // the doubling's first failure (when halving, the last that failed)
    let failed = match try_fits(start)? {
        Ok(true) => {
            (lo, hi) = (start, start * 2);
            loop {
                if hi > MAX_BATCH_PER_RANK {
                    // the cap itself is the last probe
                    if lo == MAX_BATCH_PER_RANK || fits(MAX_BATCH_PER_RANK)? {
                        let why = format!(
                            "batch {} per rank is past the search's bound ({MAX_BATCH_PER_RANK})",
                            MAX_BATCH_PER_RANK * 2
                        );
                        return Ok((MAX_BATCH_PER_RANK, Some(why), None));
                    }
                    hi = MAX_BATCH_PER_RANK;
                    break;
                }
                match try_fits(hi)? {
                    Ok(true) => {
                        lo = hi;
                        hi *= 2;
                    }
                    Ok(false) => break,
                    Err(why) => return Ok((lo, Some(why), None)),
                }
            }
            hi
        }
        Ok(false) | Err(_) => {
            hi = start;
            lo = start / 2;
            while lo >= 1 && !fits(lo)? {
                hi = lo;
                lo /= 2;
            }
            if lo == 0 {
                return Ok((0, None, Some(1)));
            }
            hi
        }
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, None, Some(failed)))
}

/// The fewest GPUs (2 to [`MAX_GPUS`]) on which `target` fits, each rank
/// running `ceil(target / n)`. A rank's memory need not fall as `n` grows
/// (FSDP pads uneven shards, and `ceil(target / n)` stays put over runs of
/// `n`), so no count is inferred from another: the counts run in order and
/// the first that fits is the answer.
pub fn fewest_gpus(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    target: i64,
    options: &EstimateOptions,
) -> Result<Fewest> {
    let fits = |b: i64, n: i64| fits_at(config, base, par, options, b, n);
    fewest_by(&fits, target)
}

/// [`fewest_gpus`]' answer and the fullest rank there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FewestAndPeak {
    /// the fewest GPUs for the target
    pub fewest: Fewest,
    /// the GPUs and the batch per rank `outcome` is of: the answer, else
    /// [`MAX_GPUS`] and `ceil(target / MAX_GPUS)`
    pub at: (i64, i64),
    /// every rank there (under the limit at the answer; without it at
    /// [`MAX_GPUS`], where `fits` is false)
    pub outcome: RanksOutcome,
}

/// [`fewest_gpus`] with the fullest rank's peak at its answer (that of the
/// search's own run there), or, when no count fits, at [`MAX_GPUS`]
/// without the limit (what the most GPUs searched would need).
pub fn fewest_gpus_and_peak(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    target: i64,
    options: &EstimateOptions,
) -> Result<FewestAndPeak> {
    let run = |b: i64, n: i64, options: &EstimateOptions| {
        let w = Workload {
            batch: b,
            ..base.clone()
        };
        run_ranks(config, &w, &with_world(par, n), options, false)
    };
    // the search of `fewest_gpus`, keeping the run that fits
    let fitted: std::cell::Cell<Option<RanksOutcome>> = Default::default();
    let fits = |b: i64, n: i64| -> Result<bool> {
        let o = run(b, n, options)?;
        if o.fits {
            fitted.set(Some(o));
        }
        Ok(o.fits)
    };
    let fewest = fewest_by(&fits, target)?;
    let (at, outcome) = match (fewest.found, fitted.get()) {
        (Some(found), Some(o)) => (found, o),
        _ => {
            let at = (MAX_GPUS, div_up(target, MAX_GPUS));
            let o = run(at.1, at.0, &options.without_limit())?;
            (at, RanksOutcome { fits: false, ..o })
        }
    };
    Ok(FewestAndPeak {
        fewest,
        at,
        outcome,
    })
}

/// [`fewest_gpus`] over any `fits(batch per rank, ranks)`.
fn fewest_by(fits: &dyn Fn(i64, i64) -> Result<bool>, target: i64) -> Result<Fewest> {
    for n in 2..=MAX_GPUS {
        let per = div_up(target, n);
        if fits(per, n)? {
            return Ok(Fewest {
                target_batch: target,
                found: Some((n, per)),
            });
        }
    }
    Ok(Fewest {
        target_batch: target,
        found: None,
    })
}

/// What [`plan_parallel`] is asked.
#[derive(Debug, Clone)]
pub struct ParallelAsk {
    /// the global batch whose fewest GPUs to find (its share per rank is
    /// where the levers run)
    pub target_batch: Option<i64>,
    /// batches per rank to sweep
    pub sweep: Vec<i64>,
    /// the levers too
    pub levers: bool,
    /// threads to run independent runs on (1: one after another)
    pub threads: usize,
}

/// The whole plan over `par`: the largest batch per rank, the fewest GPUs
/// for the target, the sweep and the levers. The searches (each a chain of
/// runs) and the independent runs are taken in turn by `ask.threads`
/// threads.
pub fn plan_parallel(
    config: &HfConfig,
    base: &Workload,
    par: &Parallel,
    ask: &ParallelAsk,
    options: &EstimateOptions,
) -> Result<ParallelPlan> {
    let world = par.world();
    // whether a batch per rank fits over a number of ranks, each asked once
    // (the searches meet: the fewest GPUs at `world`, the largest batch at
    // the target's share, which is also where the levers run)
    let memo: Mutex<HashMap<(i64, i64), bool>> = Mutex::new(HashMap::new());
    let fits = |b: i64, n: i64| -> Result<bool> {
        let known = memo
            .lock()
            .expect("a planning thread panicked")
            .get(&(b, n))
            .copied();
        if let Some(f) = known {
            return Ok(f);
        }
        let f = fits_at(config, base, par, options, b, n)?;
        memo.lock()
            .expect("a planning thread panicked")
            .insert((b, n), f);
        Ok(f)
    };
    let largest = |start: i64| largest_by(&|b| fits(b, world), start);
    // without a target the levers run at the largest batch: its search
    // comes first; with one, beside the rest, from the target's share
    let (searched, at) = match ask.target_batch {
        Some(t) => (None, div_up(t, world)),
        None => {
            let max = largest(1)?;
            let at = max.max.max(1);
            (Some(max), at)
        }
    };
    let given = Workload {
        batch: at,
        ..base.clone()
    };
    // the independent runs: the workload as given, each sweep row, each lever
    let mut runs: Vec<(String, Workload, Parallel)> =
        vec![("as given".into(), given.clone(), par.clone())];
    for &b in &ask.sweep {
        let w = Workload {
            batch: b,
            ..base.clone()
        };
        runs.push((String::new(), w, par.clone()));
    }
    if ask.levers {
        runs.extend(parallel_levers(par, &given, base.weights));
        // twice the GPUs: the same global batch (the target's), or the same
        // batch per rank
        let per = ask.target_batch.map_or(at, |t| div_up(t, world * 2));
        runs.push((
            format!("{} GPUs, batch {per} per rank", world * 2),
            Workload {
                batch: per,
                ..given.clone()
            },
            with_world(par, world * 2),
        ));
    }
    let mut tasks: Vec<Task> = Vec::new();
    if searched.is_none() {
        tasks.push(Task::Largest);
    }
    if let Some(t) = ask.target_batch {
        tasks.push(Task::Fewest(t));
    }
    tasks.extend((0..runs.len()).map(Task::Run));
    let answers = on_threads(ask.threads, &tasks, |task| {
        Ok(match *task {
            Task::Largest => Answer::Largest(largest(at)?),
            Task::Fewest(t) => Answer::Fewest(fewest_by(&fits, t)?),
            Task::Run(i) => {
                let (_, w, p) = &runs[i];
                Answer::Run(run_ranks(config, w, p, options, true)?)
            }
        })
    })?;
    let mut largest = searched.unwrap_or(Largest {
        max: 0,
        checked_up_to: 0,
        capped: None,
    });
    let mut fewest = None;
    let mut outcomes = Vec::with_capacity(runs.len());
    for a in answers {
        match a {
            Answer::Largest(m) => largest = m,
            Answer::Fewest(f) => fewest = Some(f),
            Answer::Run(o) => outcomes.push(o),
        }
    }
    let sweep = ask
        .sweep
        .iter()
        .copied()
        .zip(outcomes[1..].iter().copied())
        .collect();
    let levers = runs
        .iter()
        .zip(&outcomes)
        .skip(1 + ask.sweep.len())
        .map(|((name, _, _), &outcome)| ParallelLever {
            name: name.clone(),
            outcome,
        })
        .collect();
    Ok(ParallelPlan {
        max_batch_per_rank: largest.max,
        checked_up_to: largest.checked_up_to,
        capped: largest.capped,
        at,
        here: outcomes[0],
        fewest,
        sweep,
        levers,
    })
}

/// One piece of [`plan_parallel`]'s work: a search or one run.
enum Task {
    Largest,
    Fewest(i64),
    Run(usize),
}

enum Answer {
    Largest(Largest),
    Fewest(Fewest),
    Run(RanksOutcome),
}

/// The levers at the same batch per rank and world size, each named, with
/// its workload and parallelism: FSDP's mixed precision, resharding, CPU
/// offload and DDP instead; DDP's gradients as bucket views and FSDP
/// instead (with bf16 mixed precision too, for fp32 weights); checkpointing.
fn parallel_levers(
    par: &Parallel,
    given: &Workload,
    weights: DType,
) -> Vec<(String, Workload, Parallel)> {
    let mut v: Vec<(String, Workload, Parallel)> = Vec::new();
    let fsdp_default = FsdpConfig {
        world: par.world(),
        rank: 0,
        param_dtype: None,
        reshard_after_forward: true,
        cpu_offload: false,
    };
    let mp = "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)";
    match par {
        Parallel::Fsdp(f) => {
            if f.param_dtype.is_none() && weights == DType::F32 {
                let p = FsdpConfig {
                    param_dtype: Some(DType::BF16),
                    ..f.clone()
                };
                v.push((mp.into(), given.clone(), Parallel::Fsdp(p)));
            }
            let flipped = if f.reshard_after_forward {
                "False"
            } else {
                "None (the default)"
            };
            let p = FsdpConfig {
                reshard_after_forward: !f.reshard_after_forward,
                ..f.clone()
            };
            v.push((
                format!("reshard_after_forward={flipped}"),
                given.clone(),
                Parallel::Fsdp(p),
            ));
            if !f.cpu_offload {
                let p = FsdpConfig {
                    cpu_offload: true,
                    ..f.clone()
                };
                v.push((
                    "CPUOffloadPolicy()".into(),
                    given.clone(),
                    Parallel::Fsdp(p),
                ));
            }
            let d = DdpConfig {
                world: f.world,
                bucket_cap_mb: None,
                gradient_as_bucket_view: false,
                first_buckets_held: false,
                find_unused_parameters: false,
            };
            v.push((
                "DDP instead (its defaults)".into(),
                given.clone(),
                Parallel::Ddp(d),
            ));
        }
        Parallel::Ddp(d) => {
            if !d.gradient_as_bucket_view {
                let p = DdpConfig {
                    gradient_as_bucket_view: true,
                    ..d.clone()
                };
                v.push((
                    "gradient_as_bucket_view=True".into(),
                    given.clone(),
                    Parallel::Ddp(p),
                ));
            }
            v.push((
                "FSDP2 instead (fully_shard per layer)".into(),
                given.clone(),
                Parallel::Fsdp(fsdp_default.clone()),
            ));
            if weights == DType::F32 {
                let p = FsdpConfig {
                    param_dtype: Some(DType::BF16),
                    ..fsdp_default
                };
                v.push((
                    "FSDP2 instead, MixedPrecisionPolicy(param_dtype=bf16)".to_string(),
                    given.clone(),
                    Parallel::Fsdp(p),
                ));
            }
        }
    }
    if given.checkpointing.is_none() && given.mode == Mode::Train {
        v.push((
            "gradient checkpointing of every layer".into(),
            Workload {
                checkpointing: Some(Checkpointing::Every(1)),
                ..given.clone()
            },
            par.clone(),
        ));
    }
    v
}

/// `f` of each item, on up to `threads` threads taking the next item as
/// they finish, the answers in the items' order (the first error wins).
fn on_threads<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    if threads <= 1 || items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<R>>>> = items.iter().map(|_| Mutex::new(None)).collect();
    thread::scope(|s| {
        for _ in 0..threads.min(items.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                *slots[i].lock().expect("a planning thread panicked") = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .expect("a planning thread panicked")
                .expect("every item ran")
        })
        .collect()
}

fn div_up(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use vramscope_models::Task;

    fn llama() -> HfConfig {
        HfConfig::parse(
            r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
                "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 32000,
                "max_position_embeddings": 2048}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_largest_batch_is_the_same_from_any_start() {
        for k in [0, 1, 5, 6, 7, 8, 100, MAX_BATCH_PER_RANK] {
            for start in [1, 2, 6, 8, 64, MAX_BATCH_PER_RANK] {
                let fits = |b: i64| Ok(b <= k);
                assert_eq!(
                    largest_by(&fits, start).unwrap().max,
                    k,
                    "k {k} from {start}"
                );
            }
        }
        // from 1 the probes are 1, 2, 4, ..., then the bisection
        let probes = RefCell::new(Vec::new());
        let fits = |b: i64| {
            probes.borrow_mut().push(b);
            Ok(b <= 6)
        };
        largest_by(&fits, 1).unwrap();
        // (nothing left to scan between 6 and 8)
        assert_eq!(probes.into_inner(), vec![1, 2, 4, 8, 6, 7]);
    }

    #[test]
    fn where_fits_is_not_monotone_the_scan_finds_the_largest() {
        // 6 runs out, 7 fits (the allocator's rounding), 8 runs out: the
        // bisection ends on 5, the scan finds 7; from 4 the doubling's
        // failure is 8 too
        let fits = |b: i64| Ok(b <= 5 || b == 7);
        for start in [1, 4] {
            let l = largest_by(&fits, start).unwrap();
            assert_eq!((l.max, l.checked_up_to), (7, 8), "from {start}");
        }
        // 9 and 11 fit, 10 and 12 do not: from 1 the doubling fails at 16,
        // the bisection ends on 9 (12, 10 fail), the scan finds 11
        let fits = |b: i64| Ok(b <= 9 || b == 11);
        let l = largest_by(&fits, 1).unwrap();
        assert_eq!((l.max, l.checked_up_to), (11, 16));
    }

    #[test]
    fn a_batch_the_twin_does_not_model_stops_the_doubling_with_a_lower_bound() {
        let fits = |b: i64| {
            if b >= 32 {
                Err(vramscope_models::ModelError::Unsupported(
                    "conv2d on tensors of more than 2^31 elements".into(),
                ))
            } else {
                Ok(true)
            }
        };
        let l = largest_by(&fits, 1).unwrap();
        assert_eq!((l.max, l.checked_up_to), (16, 16));
        assert!(l.capped.unwrap().starts_with("batch 32 per rank: "));
    }

    /// FSDP2 with its defaults over 2 GPUs, rank 0.
    fn fsdp_on_two() -> Parallel {
        Parallel::Fsdp(FsdpConfig {
            world: 2,
            rank: 0,
            param_dtype: None,
            reshard_after_forward: true,
            cpu_offload: false,
        })
    }

    #[test]
    fn the_peak_is_that_of_the_fewest_gpus_or_of_the_most_searched() {
        let config = llama();
        let base = Workload::train(Task::Causal, 1, 1024);
        let par = fsdp_on_two();
        let cut = |gib: f64| EstimateOptions {
            profile: vramscope_engine::gpu("h200").unwrap().profile(),
            memory_fraction: Some(gib / 139.0),
            ..EstimateOptions::default()
        };
        // 2 GiB: some count fits 48 sequences; 0.05 GiB: none does
        for (gib, found) in [(2.0, true), (0.05, false)] {
            let options = cut(gib);
            let f = fewest_gpus_and_peak(&config, &base, &par, 48, &options).unwrap();
            assert_eq!(
                f.fewest,
                fewest_gpus(&config, &base, &par, 48, &options).unwrap()
            );
            assert_eq!(f.fewest.found.is_some(), found, "{f:?}");
            assert_eq!(f.outcome.fits, found, "{f:?}");
            let (n, per) = f.at;
            if !found {
                assert_eq!((n, per), (MAX_GPUS, 1));
            }
            let w = Workload {
                batch: per,
                ..base.clone()
            };
            let there = if found {
                run_ranks(&config, &w, &with_world(&par, n), &options, true).unwrap()
            } else {
                let free = options.without_limit();
                let o = run_ranks(&config, &w, &with_world(&par, n), &free, true).unwrap();
                RanksOutcome { fits: false, ..o }
            };
            assert_eq!(f.outcome, there);
        }
    }

    #[test]
    fn threads_give_the_answers_of_one_thread_and_fewest_is_the_first_count_that_fits() {
        let config = llama();
        let base = Workload::train(Task::Causal, 1, 1024);
        let par = fsdp_on_two();
        // an H200 cut to 2 GiB (memory_fraction): a few sequences per rank fit
        let options = EstimateOptions {
            profile: vramscope_engine::gpu("h200").unwrap().profile(),
            memory_fraction: Some(2.0 / 139.0),
            ..EstimateOptions::default()
        };
        let ask = |threads| ParallelAsk {
            target_batch: Some(48),
            sweep: vec![1, 2],
            levers: true,
            threads,
        };
        let one = plan_parallel(&config, &base, &par, &ask(1), &options).unwrap();
        let three = plan_parallel(&config, &base, &par, &ask(3), &options).unwrap();
        assert_eq!(one, three);
        let (n, per) = one.fewest.unwrap().found.unwrap();
        assert!(n > 2, "{one:?}");
        for k in 2..n {
            let w = Workload {
                batch: div_up(48, k),
                ..base.clone()
            };
            assert!(
                !run_ranks(&config, &w, &with_world(&par, k), &options, false)
                    .unwrap()
                    .fits
            );
        }
        let w = Workload {
            batch: per,
            ..base.clone()
        };
        assert!(
            run_ranks(&config, &w, &with_world(&par, n), &options, false)
                .unwrap()
                .fits
        );
    }
}
