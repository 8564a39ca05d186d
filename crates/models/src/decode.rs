//! The decode steps of `--mode generate` after the first few, served on the
//! allocator twin without running the model.
//!
//! Every decode step of `generate()` runs the same ops on tensors of the
//! same shapes but a few: the cache's keys and values, the ids, the mask
//! and the positions are one token longer each step. So each step asks the
//! allocator for the same sequence of mallocs and frees, each malloc's size
//! an affine function of the step. The model runs [`MODEL_NEW_TOKENS`]
//! tokens; its requests are checked to be such a sequence on its last three
//! steps (the same kinds and frees, sizes integer-affine through the first
//! two and landing exactly on the third, scratch sized by equal rules, no
//! count-dependent kernel path, nothing the driver or the loader maps); the
//! allocator as the model left it at the start of step [`FROM`] then serves
//! the model's own requests up to its last step, the template's for the
//! later steps, and `generate()`'s frees after its loop. Each request is
//! served by the allocator twin, so the figures are those of a run of every
//! step (the tests below compare the two); only the model's ops are not
//! simulated again. From the first template step on, the small pool is
//! served apart and its chunks memoised ([`apart`]); where that gives up,
//! every request goes to the twin.
//!
//! A static cache is sized for the whole generation, so the model's short
//! run is given the long run's cache; its steps differ then only in the
//! growing ids, mask and positions, as a dynamic cache's do. Its last step
//! alone pads no 2-D mask to the cache's length: it comes from a second
//! short run whose prompt ends where the long run's last step begins
//! ([`LastStepRun`]).

use std::collections::HashMap;
use std::ops::Range;

use vramscope_alloc::{Addr, CachingAllocator, Handle};
use vramscope_engine::{AllocRecord, DeviceProfile, LogPeak, ScratchRule};

use crate::estimate::{Estimate, Oom, StepFigures};
use crate::requests::{Request, Requests};

mod apart;
use apart::{Aborted, Apart, ApartCounts};

/// The new tokens the model generates itself (its steps 0 to 5).
pub(crate) const MODEL_NEW_TOKENS: i64 = 6;

/// The step at whose start the allocator is taken (step 1 frees the
/// prefill's cache, so it is no template).
pub(crate) const FROM: i64 = 2;

/// What a model's run for the decode template keeps and how it differs
/// from the workload's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeRun {
    /// take the allocator at the start of this step ([`FROM`])
    pub from: i64,
    /// a static cache's `max_cache_len` (the long run's, for a short one)
    pub max_cache_len: Option<i64>,
}

/// The allocator and its live blocks at the start of step [`FROM`] of the
/// model's run, and the marks of its steps.
pub(crate) struct DecodeStart {
    /// the allocator twin then
    pub alloc: CachingAllocator,
    /// the handle of each live block, by address
    pub live: HashMap<Addr, Handle>,
    /// the event log's peak allocated then
    pub log_peak: LogPeak,
    /// the decode phase's highest peaks before then
    pub earlier_peaks: Peaks,
    /// the requests before each iteration `k >= 1` (`step_starts[k - 1]`)
    pub step_starts: Vec<usize>,
    /// the requests before each decode forward's return
    pub forward_ends: Vec<usize>,
    /// the requests before the loop's end
    pub loop_done: Option<usize>,
    /// the cache's sliding windows
    pub windows: Vec<i64>,
}

impl DecodeStart {
    /// Whether every step from [`FROM`] to the last of `new_tokens` is on
    /// the same side of each sliding window for a prompt of `prompt`
    /// tokens: iteration `k`'s keys reach a window `w` (the sliding layer
    /// stops growing and its mask is materialised,
    /// `DynamicSlidingWindowLayer.get_mask_sizes`) once `prompt + k >= w`.
    pub(crate) fn one_regime(&self, prompt: i64, new_tokens: i64) -> bool {
        self.windows
            .iter()
            .all(|&w| prompt + FROM >= w || prompt + new_tokens - 1 < w)
    }
}

/// The highest peaks of a run of steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Peaks {
    /// `max_memory_allocated()`
    pub allocated: i64,
    /// `max_memory_reserved()`
    pub reserved: i64,
}

impl Peaks {
    /// With a step's peaks.
    pub(crate) fn with(self, f: &StepFigures) -> Peaks {
        Peaks {
            allocated: self.allocated.max(f.peak_allocated_bytes),
            reserved: self.reserved.max(f.peak_reserved_bytes),
        }
    }
}

/// A request of a step: the step, and the request's place within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StepRequest {
    step: usize,
    request: usize,
}

/// The template step read from the model's last steps ([`template`]).
struct Template {
    steps: Vec<Step>,
    /// how many steps back its frees reach
    max_back: usize,
    /// its scratch rules
    rules: Vec<StepRule>,
}

/// A scratch rule of the template step, with the change of its inputs per
/// step.
struct StepRule {
    rule: ScratchRule,
    per_step: Vec<i64>,
}

impl StepRule {
    /// Its bytes `ahead` steps after the template step.
    fn bytes_at(&self, ahead: i64, profile: &DeviceProfile) -> Option<u64> {
        let inputs: Vec<i64> = self
            .rule
            .inputs()
            .iter()
            .zip(&self.per_step)
            .map(|(v, p)| v + p * ahead)
            .collect();
        self.rule.with_inputs(&inputs)?.bytes(profile)
    }
}

/// The handles of one step's mallocs, in order.
#[derive(Clone)]
struct StepMallocs {
    step: usize,
    handles: Vec<Handle>,
}

/// A malloc the allocator refused.
struct Refused {
    at: StepRequest,
    bytes: u64,
    message: String,
}

/// One request of the template step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// a malloc: its size at the template step and its change per step
    Malloc { size: u64, slope: i64 },
    /// a library's scratch: its rule at the template step and the change
    /// of its inputs per step (`rules[i]`), sized by the rule
    Scratch { rule: usize },
    /// a free of malloc `r` of the step `back` steps before
    Free { back: usize, r: usize },
}

/// Where a malloc of the model's run was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    /// malloc `r` of step `k >= 1`
    InStep { k: usize, r: usize },
    /// before step 1 (the load, the prefill, the rest of its iteration):
    /// its index among the mallocs
    Before(usize),
}

/// What the model's run of [`MODEL_NEW_TOKENS`] tokens gives the later steps.
struct Model<'a> {
    reqs: Requests,
    /// each step's span of requests, step 1 first
    spans: Vec<Range<usize>>,
    /// the request of each step before which its forward returns, counted
    /// from the step's start
    forward_ends: Vec<usize>,
    /// the mallocs before each request
    mallocs_before: Vec<usize>,
    /// the end of `generate`'s loop and of the decode phase
    loop_done: usize,
    end: usize,
    /// the allocation records in malloc order
    records: Vec<&'a AllocRecord>,
    /// the run's event log
    log: &'a vramscope_engine::EventLog,
}

impl<'a> Model<'a> {
    /// The model's run `est` and the marks `start` holds; `None` where
    /// something but the allocator's requests comes from step [`FROM`] on
    /// (driver memory, a host mapping, a count-dependent path, the first
    /// kernels).
    fn of(est: &'a Estimate, start: &DecodeStart) -> Option<Model<'a>> {
        let reqs = Requests::of(est)?;
        let end = reqs.phases.last()?.end;
        let loop_done = start.loop_done?;
        let mut spans: Vec<Range<usize>> = Vec::with_capacity(start.step_starts.len());
        for (i, &s) in start.step_starts.iter().enumerate() {
            let e = start.step_starts.get(i + 1).copied().unwrap_or(loop_done);
            spans.push(s..e);
        }
        if spans.len() != MODEL_NEW_TOKENS as usize - 1 || start.forward_ends.len() != spans.len() {
            return None;
        }
        let forward_ends = spans
            .iter()
            .zip(&start.forward_ends)
            .map(|(s, &f)| f.checked_sub(s.start))
            .collect::<Option<Vec<usize>>>()?;
        let from = spans[FROM as usize - 1].start;
        if reqs.driver.iter().any(|d| d.at >= from)
            || reqs.host.iter().any(|h| h.at >= from)
            || reqs.switches.iter().any(|s| s.at >= from)
            || reqs.first_kernels.is_some_and(|k| k > from)
            || reqs.first_cublas.is_some_and(|k| k > from)
        {
            return None;
        }
        let mut mallocs_before = Vec::with_capacity(end + 1);
        let mut n = 0;
        for q in &reqs.requests[..end] {
            mallocs_before.push(n);
            n += usize::from(q.malloc_bytes().is_some());
        }
        mallocs_before.push(n);
        let records: Vec<&AllocRecord> = est
            .events
            .events
            .iter()
            .filter_map(|e| match e {
                vramscope_engine::MemEvent::Alloc(r) => Some(r),
                _ => None,
            })
            .collect();
        Some(Model {
            reqs,
            spans,
            forward_ends,
            mallocs_before,
            loop_done,
            end,
            records,
            log: &est.events,
        })
    }

    /// The mallocs before step [`FROM`]: the blocks made before it are
    /// served by handle ([`Serving::before`]).
    fn first(&self) -> usize {
        self.mallocs_before[self.spans[FROM as usize - 1].start]
    }

    /// What the free of malloc `j` frees, seen from the model's step `at`:
    /// malloc `r` of the step `back` steps before, or a block made before
    /// step [`FROM`] (`None` from a step before it).
    fn freed(&self, j: usize, at: usize) -> Option<Freed> {
        match self.made(j) {
            Made::InStep { k, r } if j >= self.first() => Some(Freed::InStep {
                back: at.checked_sub(k)?,
                r,
            }),
            _ => Some(Freed::Before(j)),
        }
    }

    /// `generate()`'s frees after its loop, seen from its last step.
    fn end_frees(&self) -> Option<Vec<Freed>> {
        let last = self.spans.len();
        self.reqs.requests[self.loop_done..self.end]
            .iter()
            .map(|q| match *q {
                Request::Free(j) => self.freed(j as usize, last),
                _ => None,
            })
            .collect()
    }
}

/// A block a free releases, seen from the step it is freed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freed {
    /// malloc `r` of the step `back` steps before
    InStep { back: usize, r: usize },
    /// malloc `j` of the model's run, made before step [`FROM`]
    Before(usize),
}

impl Model<'_> {
    fn made(&self, k: usize) -> Made {
        // the step whose mallocs hold index k
        let step = self
            .spans
            .partition_point(|s| self.mallocs_before[s.start] <= k);
        if step == 0 {
            return Made::Before(k);
        }
        let first = self.mallocs_before[self.spans[step - 1].start];
        if step == self.spans.len() && k >= self.mallocs_before[self.spans[step - 1].end] {
            return Made::Before(k);
        }
        Made::InStep {
            k: step,
            r: k - first,
        }
    }
}

/// The template step, read from the model's last three steps; `None` when
/// they do not repeat as the module says.
fn template(m: &Model, profile: &DeviceProfile) -> Option<Template> {
    let n = m.spans.len();
    if n < 3 {
        return None;
    }
    let three = [n - 2, n - 1, n]; // step numbers (1-based)
    let len = m.spans[n - 1].len();
    if three.iter().any(|&k| m.spans[k - 1].len() != len) {
        return None;
    }
    let mut out = Vec::with_capacity(len);
    let mut rules = Vec::new();
    let mut maxback = 0;
    for q in 0..len {
        let at = three.map(|k| m.spans[k - 1].start + q);
        let rq = at.map(|i| m.reqs.requests[i]);
        let step = match rq {
            [Request::Malloc(a), Request::Malloc(b), Request::Malloc(c)] => {
                let slope = b as i64 - a as i64;
                if c as i64 - b as i64 != slope {
                    return None;
                }
                Step::Malloc { size: c, slope }
            }
            [Request::Scratch(_), Request::Scratch(_), Request::Scratch(c)] => {
                // the same rule, its inputs affine in the step
                let [Some(ra), Some(rb), Some(rc)] = at.map(|i| m.reqs.rules.get(&i)) else {
                    return None;
                };
                if !ra.same_rule(rb) || !rb.same_rule(rc) {
                    return None;
                }
                let (ia, ib, ic) = (ra.inputs(), rb.inputs(), rc.inputs());
                if ia.len() != ib.len() || ib.len() != ic.len() {
                    return None;
                }
                let per: Vec<i64> = ia.iter().zip(&ib).map(|(a, b)| b - a).collect();
                if ib.iter().zip(&ic).zip(&per).any(|((b, c), p)| c - b != *p) {
                    return None;
                }
                // (the rule gives the model's size)
                if rc.bytes(profile) != Some(c) {
                    return None;
                }
                rules.push(StepRule {
                    rule: rc.clone(),
                    per_step: per,
                });
                Step::Scratch {
                    rule: rules.len() - 1,
                }
            }
            [Request::Free(a), Request::Free(b), Request::Free(c)] => {
                let made = [a, b, c].map(|k| m.made(k as usize));
                let mut back = None;
                for (j, w) in made.iter().enumerate() {
                    let Made::InStep { k, r } = *w else {
                        return None;
                    };
                    let b = (three[j] - k, r);
                    if back.is_some_and(|x| x != b) {
                        return None;
                    }
                    back = Some(b);
                }
                let (back, r) = back?;
                maxback = maxback.max(back);
                Step::Free { back, r }
            }
            _ => return None,
        };
        out.push(step);
    }
    // every malloc of a step is freed by a later one (none piles up, so
    // what is live at a point of a late step is what is live at the same
    // point of the template step)
    let mallocs = out
        .iter()
        .filter(|s| !matches!(s, Step::Free { .. }))
        .count();
    let mut freed = vec![false; mallocs];
    for s in &out {
        if let Step::Free { r, .. } = *s {
            *freed.get_mut(r)? = true;
        }
    }
    if freed.iter().any(|f| !f) {
        return None;
    }
    // the later steps free only what steps since `FROM` made
    if n.checked_sub(maxback)? < FROM as usize {
        return None;
    }
    Some(Template {
        steps: out,
        max_back: maxback,
        rules,
    })
}

/// What serving the later steps found.
pub(crate) struct Served {
    /// the decode phase's figures (its name is the caller's)
    pub decode: StepFigures,
    /// the figures of each step from the one the allocator was taken in
    /// (those that ended before an out-of-memory)
    pub steps: Vec<StepFigures>,
    /// the out-of-memory, with the template record of its malloc
    pub oom: Option<Oom>,
    /// the allocations live at the run's highest allocated
    pub live_at_peak: Vec<AllocRecord>,
    /// with the small pool apart ([`apart`]): its chunks reused and served
    #[cfg_attr(not(test), allow(dead_code))]
    pub apart: Option<ApartCounts>,
}

/// A static cache's last decode step: the one step whose 2-D mask is not
/// padded (`prepare_padding_mask` pads it to the cache's length before), so
/// no template gives it. A run of [`MODEL_NEW_TOKENS`] tokens with the
/// prompt `prompt + N - MODEL_NEW_TOKENS` and the same cache (`est`, and the
/// marks `start` holds) makes it as its own last step: the same ids, mask,
/// positions and cache as the long run's.
pub(crate) struct LastStepRun<'a> {
    pub est: &'a Estimate,
    pub start: &'a DecodeStart,
}

/// The last step read from a [`LastStepRun`].
#[derive(Clone)]
struct Last<'a> {
    /// its requests: a malloc of its size, or a free of malloc `r` of the
    /// step `back` steps before (the template's mallocs)
    reqs: Vec<LastRequest>,
    /// the request before which its forward returns
    forward_end: usize,
    /// `generate()`'s frees after its loop
    end: Vec<Freed>,
    /// the record of each request's malloc (`None` for a free)
    records: Vec<Option<&'a AllocRecord>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastRequest {
    Malloc(u64),
    Free { back: usize, r: usize },
}

/// Request `q` of a step in the template's terms: `None` for a malloc, the
/// `(back, r)` of a free.
fn shape_of(step: &Step) -> Option<(usize, usize)> {
    match *step {
        Step::Free { back, r } => Some((back, r)),
        _ => None,
    }
}

/// The last step of `b` ([`LastStepRun`]) for a long run served from `a`'s
/// template `tpl`; `None` unless the steps of `b` its frees reach are the
/// template's in shape (the same requests, the same frees) and it and the
/// frees after the loop release nothing `a` made otherwise.
fn last_step<'b>(a: &Model, b: &Model<'b>, tpl: &[Step]) -> Option<Last<'b>> {
    let n = b.spans.len();
    let span = b.spans[n - 1].clone();
    let mut reqs = Vec::with_capacity(span.len());
    let mut records = Vec::with_capacity(span.len());
    let mut reach = 0;
    for i in span.clone() {
        match b.reqs.requests[i] {
            Request::Malloc(x) | Request::Scratch(x) => {
                reqs.push(LastRequest::Malloc(x));
                records.push(b.records.get(b.mallocs_before[i]).copied());
            }
            Request::Free(j) => {
                let Freed::InStep { back, r } = b.freed(j as usize, n)? else {
                    return None;
                };
                reach = reach.max(back);
                reqs.push(LastRequest::Free { back, r });
                records.push(None);
            }
        }
    }
    // the steps it reaches are the template's (their mallocs in the same
    // order), and so are the long run's steps there
    let shape: Vec<Option<(usize, usize)>> = tpl.iter().map(shape_of).collect();
    for k in n.checked_sub(reach)?.max(FROM as usize)..n {
        let mut got = Vec::with_capacity(shape.len());
        for i in b.spans[k - 1].clone() {
            got.push(match b.reqs.requests[i] {
                Request::Free(j) => match b.freed(j as usize, k)? {
                    Freed::InStep { back, r } => Some((back, r)),
                    Freed::Before(_) => return None,
                },
                _ => None,
            });
        }
        if got != shape {
            return None;
        }
    }
    if n.checked_sub(reach)? < a.spans.len() - 2 {
        return None;
    }
    // generate's frees after the loop: `b`'s for the steps' blocks, `a`'s
    // for the blocks made before (their sizes are the long run's)
    let (ea, eb) = (a.end_frees()?, b.end_frees()?);
    if ea.len() != eb.len() {
        return None;
    }
    let end = ea
        .into_iter()
        .zip(eb)
        .map(|pair| match pair {
            (Freed::InStep { .. }, x @ Freed::InStep { .. }) => Some(x),
            (x @ Freed::Before(_), Freed::Before(_)) => Some(x),
            _ => None,
        })
        .collect::<Option<Vec<Freed>>>()?;
    Some(Last {
        reqs,
        forward_end: b.forward_ends[n - 1],
        end,
        records,
    })
}

/// Serve `generate()`'s decode steps up to `new_tokens` tokens from the
/// model's run of [`MODEL_NEW_TOKENS`] (`est`, its phases `load`, `prefill`,
/// `decode`) and the allocator it left at the start of step [`FROM`], and
/// with `last` a static cache's last step from another run; `None` where
/// the steps do not repeat as the module says (then the caller runs the
/// model for every step).
pub(crate) fn serve(
    est: &Estimate,
    start: DecodeStart,
    new_tokens: i64,
    profile: &DeviceProfile,
    last: Option<LastStepRun>,
) -> Option<Served> {
    if est.oom.is_some() || new_tokens <= MODEL_NEW_TOKENS || est.phases.len() != 3 {
        return None;
    }
    let m = Model::of(est, &start)?;
    // where each iteration's forward returns: the same request of each
    // from `FROM` on (the first also frees the prefill's cache)
    let forward_end = m.forward_ends[FROM as usize - 1];
    if m.forward_ends[FROM as usize - 1..]
        .iter()
        .any(|&f| f != forward_end)
    {
        return None;
    }
    let Template {
        steps: tpl,
        max_back,
        rules,
    } = template(&m, profile)?;
    let b = match &last {
        Some(l) if l.est.oom.is_none() && l.est.phases.len() == 3 => {
            Some(Model::of(l.est, l.start)?)
        }
        Some(_) => return None,
        None => None,
    };
    let (last, end) = match &b {
        Some(b) => {
            let l = last_step(&m, b, &tpl)?;
            let end = l.end.clone();
            (Some(l), end)
        }
        None => (None, m.end_frees()?),
    };
    let reach = last
        .iter()
        .flat_map(|l| &l.reqs)
        .filter_map(|q| match *q {
            LastRequest::Free { back, .. } => Some(back),
            LastRequest::Malloc(_) => None,
        })
        .max()
        .unwrap_or(0);
    let malloc_q: Vec<usize> = tpl
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Step::Free { .. }))
        .map(|(q, _)| q)
        .collect();
    let back = max_back.max(reach);
    // (for a run of every request on the twin, should the small pool apart
    // give up)
    let again = (start.alloc.clone(), start.live.clone());
    let serving = |start: DecodeStart, apart: bool| -> Option<Serving> {
        let mut s = Serving::new(&m, start, &tpl, back)?;
        s.forward_end = forward_end;
        s.rules = &rules;
        s.profile = Some(profile);
        s.last = last.clone();
        s.end = end.clone();
        s.malloc_q = malloc_q.clone();
        s.apart_allowed = apart;
        Some(s)
    };
    let (log_peak, earlier_peaks) = (start.log_peak, start.earlier_peaks);
    let mut aborted = false;
    let served = serving(start, true)?.run(new_tokens, &mut aborted);
    #[cfg(test)]
    tests::APART.set((served.as_ref().and_then(|s| s.apart), aborted));
    match aborted {
        false => served,
        true => {
            let start = DecodeStart {
                alloc: again.0,
                live: again.1,
                log_peak,
                earlier_peaks,
                step_starts: Vec::new(),
                forward_ends: Vec::new(),
                loop_done: None,
                windows: Vec::new(),
            };
            serving(start, false)?.run(new_tokens, &mut aborted)
        }
    }
}

/// The allocator going on from step [`FROM`], and what it has served.
struct Serving<'a> {
    m: &'a Model<'a>,
    tpl: &'a [Step],
    alloc: CachingAllocator,
    /// the handles of the mallocs made before step `FROM`, by index
    before: std::collections::HashMap<usize, Handle>,
    /// the handles of the last `maxback + 1` steps' mallocs, by step modulo
    ring: Vec<StepMallocs>,
    steps: Vec<StepFigures>,
    earlier_peaks: Peaks,
    /// the highest allocated since step `FROM`
    best_allocated: i64,
    /// where it was reached
    best_at: Option<StepRequest>,
    log_peak: LogPeak,
    /// the template's scratch rules, and the GPU they are sized for
    rules: &'a [StepRule],
    profile: Option<&'a DeviceProfile>,
    /// the request of an iteration before which its forward returns (a
    /// step's figures end there)
    forward_end: usize,
    /// a static cache's last step, from its own run
    last: Option<Last<'a>>,
    /// `generate()`'s frees after its loop
    end: Vec<Freed>,
    /// the last step
    last_k: usize,
    /// the template's position of each of its mallocs
    malloc_q: Vec<usize>,
    /// whether the small pool may be served apart ([`apart`])
    apart_allowed: bool,
}

impl<'a> Serving<'a> {
    fn new(
        m: &'a Model<'a>,
        start: DecodeStart,
        tpl: &'a [Step],
        maxback: usize,
    ) -> Option<Serving<'a>> {
        let by_addr = &start.live;
        let first = m.mallocs_before[m.spans[FROM as usize - 1].start];
        // the blocks made before and freed after: live now
        let mut before = HashMap::new();
        for q in &m.reqs.requests[m.spans[FROM as usize - 1].start..m.end] {
            if let Request::Free(k) = *q {
                let k = k as usize;
                if k < first {
                    before.insert(k, *by_addr.get(&m.records.get(k)?.addr)?);
                }
            }
        }
        Some(Serving {
            m,
            tpl,
            alloc: start.alloc,
            before,
            ring: vec![
                StepMallocs {
                    step: 0,
                    handles: Vec::new(),
                };
                maxback + 1
            ],
            steps: Vec::new(),
            earlier_peaks: start.earlier_peaks,
            best_allocated: 0,
            best_at: None,
            log_peak: start.log_peak,
            rules: &[],
            profile: None,
            malloc_q: Vec::new(),
            apart_allowed: false,
            forward_end: 0,
            last: None,
            end: Vec::new(),
            last_k: 0,
        })
    }

    fn malloc(&mut self, bytes: u64, step: usize, q: usize) -> Result<Handle, Refused> {
        let at = StepRequest { step, request: q };
        let h = self.alloc.malloc_handle(bytes, 0).map_err(|e| Refused {
            at,
            bytes,
            message: e.to_string(),
        })?;
        let cur = self.alloc.stats().allocated_bytes.all().current;
        if cur > self.best_allocated {
            self.best_allocated = cur;
            self.best_at = Some(at);
        }
        let n = self.ring.len();
        self.ring[step % n].handles.push(h);
        Ok(h)
    }

    /// The handle of malloc `r` of step `k`, if the ring still holds it.
    fn made_in(&self, k: usize, r: usize) -> Option<Handle> {
        let s = &self.ring[k % self.ring.len()];
        if s.step != k {
            return None;
        }
        s.handles.get(r).copied()
    }

    fn free(&mut self, h: Handle) -> Option<()> {
        self.alloc.free_handle(h).ok()
    }

    fn end_step(&mut self) {
        let f = StepFigures::of(self.alloc.stats());
        self.earlier_peaks = self.earlier_peaks.with(&f);
        self.steps.push(f);
        self.alloc.reset_peak_stats();
    }

    /// Serve the steps up to `new_tokens`; `aborted` is set where the small
    /// pool apart gave up ([`apart`]; then `None`).
    fn run(mut self, new_tokens: i64, aborted: &mut bool) -> Option<Served> {
        let m = self.m;
        let last_model = m.spans.len(); // the model's last step
        let last = (new_tokens - 1) as usize;
        self.last_k = last;
        // (a step's figures each, and the end's: no copies as it grows)
        self.steps.reserve((last + 2).saturating_sub(FROM as usize));
        let mut oom = None;
        let mut apart: Option<Box<Apart>> = None;
        'steps: for k in FROM as usize..=last {
            if k > last_model && (apart.is_some() || self.apart_allowed) {
                if apart.is_none() {
                    self.apart_allowed = false;
                    apart = Apart::start(&self, k).map(Box::new);
                }
                if let Some(ap) = apart.as_mut() {
                    let r = match self.last.as_ref().filter(|_| k == last) {
                        Some(l) => {
                            let (reqs, fe) = (l.reqs.clone(), l.forward_end);
                            ap.last_step(&mut self, k, &reqs, fe)
                        }
                        None => ap.template_step(&mut self, k, (k - last_model) as i64),
                    };
                    if r.is_err() {
                        *aborted = true;
                        return None;
                    }
                    continue;
                }
            }
            let n = self.ring.len();
            self.ring[k % n].step = k;
            self.ring[k % n].handles.clear();
            if k <= last_model {
                // the model's own requests
                let Range { start: s, end: e } = m.spans[k - 1].clone();
                let first = m.mallocs_before[m.spans[FROM as usize - 1].start];
                for i in s..e {
                    if i - s == self.forward_end {
                        self.end_step();
                    }
                    match m.reqs.requests[i] {
                        Request::Malloc(b) | Request::Scratch(b) => {
                            if let Err(refused) = self.malloc(b, k, i - s) {
                                oom = Some(refused);
                                break 'steps;
                            }
                        }
                        Request::Free(j) => {
                            let h = match m.made(j as usize) {
                                Made::InStep { k: kk, r } if j as usize >= first => {
                                    self.made_in(kk, r)?
                                }
                                _ => *self.before.get(&(j as usize))?,
                            };
                            self.free(h)?;
                        }
                    }
                }
            } else if let Some(l) = self.last.as_ref().filter(|_| k == last) {
                // a static cache's last step, from its own run
                let (reqs, forward_end) = (l.reqs.clone(), l.forward_end);
                for (q, r) in reqs.into_iter().enumerate() {
                    if q == forward_end {
                        self.end_step();
                    }
                    match r {
                        LastRequest::Malloc(b) => {
                            if let Err(refused) = self.malloc(b, k, q) {
                                oom = Some(refused);
                                break 'steps;
                            }
                        }
                        LastRequest::Free { back, r } => {
                            let h = self.made_in(k.checked_sub(back)?, r)?;
                            self.free(h)?;
                        }
                    }
                }
            } else {
                let ahead = (k - last_model) as i128;
                for (q, s) in self.tpl.iter().enumerate() {
                    if q == self.forward_end {
                        self.end_step();
                    }
                    match *s {
                        Step::Malloc { size, slope } => {
                            let b = size as i128 + slope as i128 * ahead;
                            let b = u64::try_from(b).ok()?;
                            if let Err(refused) = self.malloc(b, k, q) {
                                oom = Some(refused);
                                break 'steps;
                            }
                        }
                        Step::Scratch { rule } => {
                            let b = self.rules[rule].bytes_at(ahead as i64, self.profile?)?;
                            if let Err(refused) = self.malloc(b, k, q) {
                                oom = Some(refused);
                                break 'steps;
                            }
                        }
                        Step::Free { back, r } => {
                            let h = self.made_in(k.checked_sub(back)?, r)?;
                            self.free(h)?;
                        }
                    }
                }
            }
        }
        let mut counts = None;
        let f = if let Some(mut ap) = apart {
            let end = std::mem::take(&mut self.end);
            match ap.end(&mut self, last, &end) {
                Ok(f) => {
                    counts = Some(ap.counts);
                    f
                }
                Err(Aborted) => {
                    *aborted = true;
                    return None;
                }
            }
        } else {
            self.end_frees(oom.is_none(), last)?;
            StepFigures::of(self.alloc.stats())
        };
        if oom.is_none() {
            // the last step ends with `generate()`
            self.steps.push(f);
        }
        self.served(f, oom, counts)
    }

    /// `generate()`'s frees after its loop whose last step is `last` (where
    /// no out-of-memory ended it first: `ran`).
    fn end_frees(&mut self, ran: bool, last: usize) -> Option<()> {
        if ran {
            // `generate()`'s frees after its loop, of the last steps' blocks
            // and of what it made before
            for e in std::mem::take(&mut self.end) {
                let h = match e {
                    Freed::InStep { back, r } => self.made_in(last.checked_sub(back)?, r)?,
                    Freed::Before(j) => *self.before.get(&j)?,
                };
                self.free(h)?;
            }
        }
        Some(())
    }

    /// What was served, its figures at the end `f`.
    fn served(
        self,
        f: StepFigures,
        oom: Option<Refused>,
        apart: Option<ApartCounts>,
    ) -> Option<Served> {
        let decode = StepFigures {
            peak_allocated_bytes: f.peak_allocated_bytes.max(self.earlier_peaks.allocated),
            peak_reserved_bytes: f.peak_reserved_bytes.max(self.earlier_peaks.reserved),
            ..f
        };
        let oom = oom.map(|o| {
            let Refused { at, bytes, message } = o;
            let r = self.record_of(at);
            Oom {
                phase: "decode".into(),
                op: r.map(|r| r.op.to_string()).unwrap_or_default(),
                module: r.map(|r| r.module.to_string()).unwrap_or_default(),
                bytes,
                message,
            }
        });
        let live_at_peak = self.live_at_peak()?;
        Some(Served {
            decode,
            steps: self.steps,
            oom,
            live_at_peak,
            apart,
        })
    }

    /// The model's record of the malloc at request `q` of step `k` (the
    /// template step's, for a later step).
    fn record_of(&self, at: StepRequest) -> Option<&'a AllocRecord> {
        let m = self.m;
        if let Some(l) = self.last.as_ref().filter(|_| at.step == self.last_k) {
            return l.records.get(at.request).copied().flatten();
        }
        let k = at.step.min(m.spans.len());
        let i = m.spans[k - 1].start + at.request;
        m.records.get(m.mallocs_before[i]).copied()
    }

    /// What is live at the run's highest allocated: the model's own live
    /// set where the model's run reached it, or, in a later step, the live
    /// set at the same point of the model's last step with each block made
    /// in a step grown to the later step's size.
    fn live_at_peak(&self) -> Option<Vec<AllocRecord>> {
        let m = self.m;
        let Some(StepRequest {
            step: k,
            request: q,
        }) = self
            .best_at
            .filter(|_| self.best_allocated > self.log_peak.allocated)
        else {
            // the peak came before step `FROM` (or in the prefill)
            return Some(m.log.live_after(self.log_peak.events));
        };
        if self.last.is_some() && k == self.last_k {
            // (a static cache's last step: its run's blocks made before
            // are not the long run's; the caller runs every step)
            return None;
        }
        let last_model = m.spans.len();
        let req = m.spans[k.min(last_model) - 1].start + q + 1;
        // the events up to that request (allocations, frees, changes of role)
        let mut ev = 0;
        let mut seen = 0;
        for e in &m.log.events {
            if seen == req {
                break;
            }
            ev += 1;
            if !matches!(e, vramscope_engine::MemEvent::Recategorize(..)) {
                seen += 1;
            }
        }
        let mut live = m.log.live_after(ev);
        if k > last_model {
            let ahead = (k - last_model) as i64;
            let first_seq = m
                .records
                .get(m.mallocs_before[m.spans[FROM as usize - 1].start])?
                .seq;
            for r in &mut live {
                if r.seq < first_seq {
                    continue;
                }
                let idx = m.records.partition_point(|x| x.seq < r.seq);
                if let Made::InStep { r: j, .. } = m.made(idx) {
                    match self
                        .tpl
                        .iter()
                        .filter(|s| !matches!(s, Step::Free { .. }))
                        .nth(j)
                    {
                        Some(Step::Malloc { slope, .. }) => {
                            r.bytes = u64::try_from(r.bytes as i64 + slope * ahead).ok()?;
                        }
                        Some(Step::Scratch { rule }) => {
                            r.bytes = self.rules[*rule].bytes_at(ahead, self.profile?)?;
                        }
                        _ => {}
                    }
                }
            }
        }
        Some(live)
    }
}

#[cfg(test)]
mod tests {
    use super::ApartCounts;
    use crate::estimate::estimate_every_step;

    thread_local! {
        /// The last serve's counts with the small pool apart on this
        /// thread, and whether it gave up.
        pub(super) static APART: std::cell::Cell<(Option<ApartCounts>, bool)> =
            const { std::cell::Cell::new((None, false)) };
    }

    /// The small pool apart's counts of the last estimate on this thread.
    fn apart() -> (Option<ApartCounts>, bool) {
        APART.get()
    }
    use crate::{estimate, EstimateOptions, HfConfig, Task, Workload};
    use vramscope_engine::DType;

    /// The figures, the steps, the peak's live set and the out-of-memory of
    /// `estimate` (the template for the later steps) and of a run of every
    /// step are the same.
    fn same(config: &str, w: &Workload, o: &EstimateOptions) -> crate::Estimate {
        let c = HfConfig::parse(config).unwrap();
        let fast = estimate(&c, w, o).unwrap();
        let full = estimate_every_step(&c, w, o).unwrap();
        assert_eq!(fast.phases, full.phases);
        assert_eq!(fast.decode_steps, full.decode_steps);
        assert_eq!(fast.oom, full.oom);
        assert_eq!(fast.breakdown_at_peak, full.breakdown_at_peak);
        assert_eq!(fast.by_module_at_peak, full.by_module_at_peak);
        let live = |e: &crate::Estimate| -> Vec<(u64, &str, String)> {
            e.live_at_peak
                .iter()
                .map(|r| (r.bytes, r.op, r.module.to_string()))
                .collect()
        };
        assert_eq!(live(&fast), live(&full));
        // (the template served them: the model ran fewer ops)
        assert!(fast.ops_simulated < full.ops_simulated);
        fast
    }

    const LLAMA: &str = r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,
        "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":1000,
        "eos_token_id":2,"bos_token_id":1}"#;

    #[test]
    fn later_steps_served_by_the_template_are_the_steps_run() {
        let unlimited = EstimateOptions {
            unlimited: true,
            ..EstimateOptions::default()
        };
        let w = Workload {
            weights: DType::BF16,
            ..Workload::generate(Task::Causal, 3, 40, 150)
        };
        let est = same(LLAMA, &w, &unlimited);
        assert_eq!(est.decode_steps.len(), 150);
        // a sliding window, another family, fp32, batch 1
        let mistral = r#"{"model_type":"mistral","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,
            "vocab_size":500,"sliding_window":512}"#;
        same(
            mistral,
            &Workload::generate(Task::Causal, 1, 100, 60),
            &unlimited,
        );
        // every served step past the window (prompt 100, window 90): the
        // cut and materialised masks repeat too
        let past = mistral.replace("512", "90");
        same(
            &past,
            &Workload::generate(Task::Causal, 2, 100, 30),
            &unlimited,
        );
        // a step reaching the window after the template's: every step runs
        let c = HfConfig::parse(&mistral.replace("512", "120")).unwrap();
        let w = Workload::generate(Task::Causal, 2, 100, 30);
        let fast = estimate(&c, &w, &unlimited).unwrap();
        let full = estimate_every_step(&c, &w, &unlimited).unwrap();
        assert_eq!(fast.ops_simulated, full.ops_simulated);
        assert_eq!(fast.phases, full.phases);
        let qwen3 = r#"{"model_type":"qwen3","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
            "head_dim":32,"vocab_size":3000}"#;
        same(
            qwen3,
            &Workload::generate(Task::Causal, 5, 7, 40),
            &unlimited,
        );
        // gemma2 past its window (sliding and full layers, the logits
        // softcapped, a pad token), gemma3 inside its window
        let gemma2 = r#"{"model_type":"gemma2","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
            "head_dim":16,"vocab_size":500,"sliding_window":32}"#;
        same(
            gemma2,
            &Workload::generate(Task::Causal, 2, 40, 30),
            &unlimited,
        );
        let gemma3 = r#"{"model_type":"gemma3_text","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":1,
            "head_dim":16,"vocab_size":700,"sliding_window":512,"sliding_window_pattern":3}"#;
        same(
            gemma3,
            &Workload::generate(Task::Causal, 3, 20, 25),
            &unlimited,
        );
    }

    #[test]
    fn a_static_cache_is_served_by_the_template_and_its_own_last_step() {
        let st = |b, s, n| Workload {
            cache: crate::CacheKind::Static,
            ..Workload::generate(Task::Causal, b, s, n)
        };
        let o = EstimateOptions::default();
        let est = same(LLAMA, &st(3, 40, 20), &o);
        assert_eq!(est.decode_steps.len(), 20);
        // the shortest the template serves: one template step, then the last
        same(LLAMA, &st(2, 8, 7), &o);
        same(LLAMA, &st(2, 8, 8), &o);
        // every step's window full and rolling (prompt 40, window 30)
        let mistral = r#"{"model_type":"mistral","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,
            "vocab_size":500,"sliding_window":30}"#;
        same(mistral, &st(2, 40, 25), &o);
        // gemma2: sliding and full static layers, a pad token
        let gemma2 = r#"{"model_type":"gemma2","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
            "head_dim":16,"vocab_size":500,"sliding_window":32}"#;
        same(gemma2, &st(2, 40, 30), &o);
        // a window the steps fill: every step runs
        let c = HfConfig::parse(&mistral.replace("30", "50")).unwrap();
        let fast = estimate(&c, &st(2, 40, 30), &o).unwrap();
        let full = estimate_every_step(&c, &st(2, 40, 30), &o).unwrap();
        assert_eq!(fast.ops_simulated, full.ops_simulated);
        assert_eq!(fast.phases, full.phases);
    }

    #[test]
    fn an_out_of_memory_in_a_later_step_is_the_one_of_the_run() {
        // a limit the prefill fits in and the growing cache outgrows
        let big = r#"{"model_type":"llama","hidden_size":256,"intermediate_size":512,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,
            "vocab_size":32000,"eos_token_id":2}"#;
        let w = Workload::generate(Task::Causal, 64, 64, 400);
        let limited = EstimateOptions {
            memory_fraction: Some(LIMIT),
            ..EstimateOptions::default()
        };
        let est = same(big, &w, &limited);
        let oom = est.oom.expect("runs out");
        assert_eq!(oom.phase, "decode");
        assert!(est.decode_steps.len() > super::MODEL_NEW_TOKENS as usize);
    }
    /// 255 MB of the H100: the prefill peaks at 195 MB reserved, the decode
    /// steps at 278 MB allocated
    const LIMIT: f64 = 0.003;

    #[test]
    fn a_long_generation_the_template_cannot_serve_is_refused() {
        // a window the steps cross: every step would run, keeping each one
        let c = HfConfig::parse(
            r#"{"model_type":"mistral","hidden_size":64,"intermediate_size":128,
            "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,
            "vocab_size":500,"sliding_window":120}"#,
        )
        .unwrap();
        let o = EstimateOptions::default();
        let w = Workload::generate(Task::Causal, 1, 100, 9_000);
        let e = estimate(&c, &w, &o).unwrap_err().to_string();
        assert!(e.contains("9000 new tokens run one by one"), "{e}");
        // the template serves the same length without a window
        let c = HfConfig::parse(LLAMA).unwrap();
        assert_eq!(estimate(&c, &w, &o).unwrap().decode_steps.len(), 9_000);
    }

    /// A llama whose caches are large-pool blocks (8 heads of 64 at
    /// batch 8 and more than 128 tokens) and whose activations are small:
    /// the small pool apart serves its steps ([`super::apart`]).
    const WIDE: &str = r#"{"model_type":"llama","hidden_size":512,"intermediate_size":1024,
        "num_hidden_layers":6,"num_attention_heads":8,"num_key_value_heads":8,"vocab_size":1000}"#;

    /// [`same`], served with the small pool apart, some of its chunks taken
    /// from earlier ones; its counts.
    fn same_apart(config: &str, w: &Workload, o: &EstimateOptions) -> ApartCounts {
        same(config, w, o);
        let (counts, aborted) = apart();
        assert!(!aborted);
        let counts = counts.expect("served with the small pool apart");
        assert!(counts.reused > 0 && counts.served > 0, "{counts:?}");
        counts
    }

    #[test]
    fn the_small_pool_apart_gives_the_figures_of_every_step() {
        let o = EstimateOptions::default();
        let bf16 = |b, s, n| Workload {
            weights: DType::BF16,
            ..Workload::generate(Task::Causal, b, s, n)
        };
        // (the changing chunks' instances mostly patched from the last one;
        // the contents of those whose sizes round otherwise dropped)
        let c = same_apart(WIDE, &bf16(8, 200, 40), &o);
        assert!(c.patched > 0 && c.contents_dropped > 0, "{c:?}");
        // fp32, another batch and prompt; a static cache
        same_apart(WIDE, &Workload::generate(Task::Causal, 4, 300, 30), &o);
        let st = Workload {
            cache: crate::CacheKind::Static,
            ..bf16(8, 200, 30)
        };
        same_apart(WIDE, &st, &o);
        // grouped keys and values repeated for a static cache's mask (large
        // blocks, one made and freed between the other's malloc and free:
        // made for a moment)
        let gqa = WIDE.replace(r#""num_key_value_heads":8"#, r#""num_key_value_heads":2"#);
        let c = same_apart(&gqa, &st, &o);
        assert!(c.moments > 0, "{c:?}");
        // (most layers' nests taken from the layer before: the large pool
        // unchanged since; each chunk's most allocated, and where first, is
        // that of the nests served)
        assert!(c.nests_again > 0, "{c:?}");
        let notes = |memo: bool| {
            super::apart::tests::NO_NEST_MEMO.set(!memo);
            super::apart::tests::NOTES.set(Some(Vec::new()));
            super::apart::tests::CHUNK_MOST.set(None);
            let c = HfConfig::parse(&gqa).unwrap();
            let e = estimate(&c, &st, &o).unwrap();
            super::apart::tests::NO_NEST_MEMO.set(false);
            (
                e,
                apart().0.unwrap(),
                super::apart::tests::NOTES.take().unwrap(),
            )
        };
        let ((a, ca, na), (b, cb, nb)) = (notes(true), notes(false));
        assert_eq!((ca.nests_again > 0, cb.nests_again), (true, 0));
        assert_eq!((ca.moments, a.decode_steps), (cb.moments, b.decode_steps));
        assert!(na == nb && !na.is_empty());
        // qwen3 (its q and k norms), gemma2 (sliding and full layers past
        // the window, softcapped logits)
        let qwen = r#"{"model_type":"qwen3","hidden_size":256,"intermediate_size":512,
            "num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":4,
            "head_dim":128,"vocab_size":3000}"#;
        same_apart(qwen, &bf16(16, 100, 40), &o);
        let gemma2 = r#"{"model_type":"gemma2","hidden_size":512,"intermediate_size":1024,
            "num_hidden_layers":10,"num_attention_heads":8,"num_key_value_heads":8,
            "head_dim":64,"vocab_size":500,"sliding_window":150}"#;
        same_apart(gemma2, &bf16(8, 200, 30), &o);
        // sizes rounded to powers of two by divisions
        let pow2 = EstimateOptions {
            allocator: vramscope_alloc::AllocatorConfig::parse("roundup_power2_divisions:4")
                .unwrap(),
            ..EstimateOptions::default()
        };
        same_apart(WIDE, &bf16(8, 200, 40), &pow2);
        // the growing ids outgrow the small pool's free blocks: a new small
        // segment in the served steps, made by the twin in its turn
        let c = same_apart(WIDE, &bf16(64, 500, 300), &o);
        assert_eq!(c.segments, 1);
    }

    #[test]
    fn a_moments_fit_is_kept_while_no_free_block_below_it_changes() {
        use super::apart::tests::FIT_WHILE_SAME;
        // a dynamic cache's attention scratch at a long prompt: a large block
        // made for a moment each layer, between its `cat`s
        let cfg = r#"{"model_type":"llama","hidden_size":8192,"intermediate_size":1024,
            "num_hidden_layers":6,"num_attention_heads":64,"num_key_value_heads":8,
            "vocab_size":1000}"#;
        let w = Workload {
            weights: DType::BF16,
            ..Workload::generate(Task::Causal, 8, 4096, 40)
        };
        let o = EstimateOptions::default();
        let a = same_apart(cfg, &w, &o);
        FIT_WHILE_SAME.set(true);
        let b = same_apart(cfg, &w, &o);
        FIT_WHILE_SAME.set(false);
        // (the `cat`s change the free blocks above it: the fit kept)
        assert!(a.moments > 100 && a.fits_again + 1 == a.moments, "{a:?}");
        assert_eq!((b.moments, b.fits_again), (a.moments, 0));
    }

    #[test]
    fn chunks_whose_memo_entries_are_never_taken_stop_making_them_and_old_ones_go() {
        use super::apart::tests::{ALWAYS_MEMO, CHUNK_MOST, NOTES, SWEEP_EACH_CHUNK};
        let o = EstimateOptions::default();
        let dynamic = Workload {
            weights: DType::BF16,
            ..Workload::generate(Task::Causal, 8, 200, 100)
        };
        let st = Workload {
            cache: crate::CacheKind::Static,
            ..dynamic.clone()
        };
        for w in [dynamic, st] {
            // (a step's first chunks start from a new state every step)
            let c = same_apart(WIDE, &w, &o);
            assert!(c.unmemoised > 0 && c.dropped > 0, "{c:?}");
            // the same figures and notes as with every chunk memoised and
            // every entry kept
            let notes = |always: bool| {
                ALWAYS_MEMO.set(always);
                NOTES.set(Some(Vec::new()));
                CHUNK_MOST.set(None);
                let e = estimate(&HfConfig::parse(WIDE).unwrap(), &w, &o).unwrap();
                ALWAYS_MEMO.set(false);
                (e, apart().0.unwrap(), NOTES.take().unwrap())
            };
            let ((a, ca, na), (b, cb, nb)) = (notes(false), notes(true));
            assert_eq!((ca.unmemoised > 0, cb.unmemoised), (true, 0));
            assert_eq!((ca.dropped > 0, cb.dropped), (true, 0));
            assert_eq!(ca.reused + ca.served, cb.reused + cb.served);
            assert_eq!((a.phases, a.decode_steps), (b.phases, b.decode_steps));
            assert!(na == nb && !na.is_empty());
            // and with all but the step's entries, and their states after,
            // dropped before each chunk: fewer taken, the same figures
            SWEEP_EACH_CHUNK.set(true);
            let cc = same_apart(WIDE, &w, &o);
            SWEEP_EACH_CHUNK.set(false);
            assert!(cc.dropped > ca.dropped && cc.reused < ca.reused, "{cc:?}");
        }
    }

    #[test]
    fn what_the_small_pool_apart_cannot_serve_runs_on_the_twin() {
        // expandable segments: not apart
        let exp = EstimateOptions {
            allocator: vramscope_alloc::AllocatorConfig::parse("expandable_segments:True").unwrap(),
            ..EstimateOptions::default()
        };
        let w = Workload {
            weights: DType::BF16,
            ..Workload::generate(Task::Causal, 8, 200, 30)
        };
        let c = HfConfig::parse(WIDE).unwrap();
        let fast = estimate(&c, &w, &exp).unwrap();
        let full = estimate_every_step(&c, &w, &exp).unwrap();
        assert_eq!(fast.phases, full.phases);
        assert_eq!(fast.decode_steps, full.decode_steps);
        assert_eq!(apart(), (None, false));
        // an out-of-memory mid-decode (a limit the prefill fits in): given
        // up, and every request served on the twin from step `FROM`
        let limited = EstimateOptions {
            memory_fraction: Some(0.002),
            ..EstimateOptions::default()
        };
        let w = Workload {
            weights: DType::BF16,
            ..Workload::generate(Task::Causal, 32, 100, 300)
        };
        let est = same(WIDE, &w, &limited);
        assert_eq!(est.oom.expect("runs out").phase, "decode");
        assert_eq!(apart(), (None, true));
    }
}
