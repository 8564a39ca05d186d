//! A workload's allocator requests, replayed on the allocator twin alone.
//!
//! Whatever the eager twin simulates, what reaches the caching allocator is
//! a sequence of `malloc(size)` and `free(block)` on one stream, with
//! `reset_peak_memory_stats()` between phases. Nothing the eager twin does
//! depends on the allocator's answers (it never asks how much memory is
//! free), so replaying that sequence on a fresh allocator reproduces every
//! figure of the estimate, under any limit, out-of-memory included.
//!
//! Sweeps use it to avoid re-running the model: within a column of equal
//! sequence length, every request of the workload has the same place in
//! the sequence at every batch size and a size that is an affine function
//! of the batch (tensor sizes are products of dimensions, one of which is
//! the batch). Sizes a kernel computes otherwise (a library's scratch
//! memory, whose size follows tiles and launch configurations; the
//! embedding backward's segment buffers, an integer division of the index
//! count) are different: three points cannot vouch for them (an integer
//! division lies on one line at three batch sizes and off it between them),
//! so the eager twin keeps with each the rule that sized it
//! ([`ScratchRule`]) and a template re-sizes it by that rule, or takes it
//! only when it does not change with the batch. [`BatchTemplate::fit`]
//! checks this on three recorded batch sizes (the other sizes must be
//! integer-affine through the first two and land exactly on the third) and
//! refuses otherwise; the caller then runs the model. Batch 1 is never fitted nor
//! extrapolated to: a size-1 dimension makes some views contiguous, so
//! their `.contiguous()` copies vanish (the shifted logits of a causal LM
//! loss, measured in these requests).

use std::collections::BTreeMap;
use vramscope_alloc::inthash::FastMap;
use vramscope_alloc::{
    AllocatorConfig, CachingAllocator, Handle, Shortcut, SimDevice, UNLIMITED_BYTES,
};

use vramscope_engine::{At, DeviceProfile, HostEvent, MemEvent, PathSwitch, ScratchRule};

use crate::estimate::{Estimate, EstimateOptions, PhaseFigures, PhaseSpan};

/// One allocator request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `malloc(bytes)` for a tensor (its size is a product of its dimensions)
    Malloc(u64),
    /// `malloc(bytes)` of a size a kernel computes rather than a product of
    /// dimensions: a library's scratch memory (CUB's temporary storage, a
    /// split reduction's buffer, cuBLAS's and cuDNN's workspaces) or a
    /// kernel's buffer such as the embedding backward's segment offsets
    Scratch(u64),
    /// free the block of the `n`-th malloc
    Free(u32),
}

impl Request {
    /// The bytes of a malloc (either kind).
    pub fn malloc_bytes(&self) -> Option<u64> {
        match *self {
            Request::Malloc(b) | Request::Scratch(b) => Some(b),
            Request::Free(_) => None,
        }
    }

    /// The same kind of request (the same block for frees).
    fn same_kind(&self, other: &Request) -> bool {
        match (self, other) {
            (Request::Free(x), Request::Free(y)) => x == y,
            (Request::Malloc(_), Request::Malloc(_))
            | (Request::Scratch(_), Request::Scratch(_)) => true,
            _ => false,
        }
    }
}

/// A workload's allocator requests, phase by phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requests {
    /// every request, in order
    pub requests: Vec<Request>,
    /// each phase's span of `requests`
    pub phases: Vec<PhaseSpan>,
    /// how the eager twin sized each [`Request::Scratch`], by its index in
    /// `requests`
    pub rules: BTreeMap<usize, ScratchRule>,
    /// a size came from a table of measured shapes (no template may hold)
    pub measured_sizes: bool,
    /// the count-dependent paths the kernels took, in order, each with the
    /// number of requests before it ([`PathSwitch`])
    pub switches: Vec<At<PathSwitch>>,
    /// sizes the run took without a measurement
    /// ([`crate::Estimate::unmeasured`]; a run with any has no template:
    /// its notes name its own shapes, and what it took for them is no
    /// function of the batch that a fit could trust)
    pub unmeasured: Vec<String>,
    /// device memory the CUDA driver takes outside the allocator (a new
    /// cuBLAS handle), each with the number of requests before it: a replay
    /// takes it from the device there
    /// ([`vramscope_alloc::SimDevice::driver_alloc`]). Made once per
    /// process, so never copied into repeated or derived steps.
    pub driver: Vec<At<u64>>,
    /// where the process's first kernels ran, as the number of requests
    /// before: a replay gives back the CUDA context's range there, inside a
    /// phase too ([`vramscope_alloc::SimDevice::first_kernels`]; the
    /// estimate's workload: after `forward0`'s first allocation, or at the
    /// end of `load` where the range becomes a hole)
    pub first_kernels: Option<usize>,
    /// where the process created its first cuBLAS handle, as the number of
    /// requests before: a replay reserves the driver's address space there
    /// ([`vramscope_alloc::SimDevice::first_cublas`]). Once per process, as
    /// [`Requests::first_kernels`].
    pub first_cublas: Option<usize>,
    /// the CPU tensors glibc maps and unmaps among the segments
    /// ([`vramscope_alloc::SimDevice::host_map`]; `load`'s model
    /// construction and `.cuda()`), and the libraries the loader maps
    /// (cuDNN's, at the first attention:
    /// [`vramscope_alloc::SimDevice::load_library`]), each with the number
    /// of requests before it: a replay maps them there. Made once per
    /// process, as [`Requests::driver`].
    pub host: Vec<At<HostRequest>>,
}

/// A host mapping in [`Requests::host`]: a CPU tensor's own, or a library's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRequest {
    /// glibc maps this many bytes
    Map(u64),
    /// the mapping of the `k`-th [`HostRequest::Map`] or
    /// [`HostRequest::Pinned`] is unmapped
    Unmap(usize),
    /// the dynamic loader maps a library of this span, for good
    /// ([`vramscope_alloc::SimDevice::load_library`])
    Library(u64),
    /// a thread starts with a stack of this length and makes its malloc
    /// arena, for good ([`vramscope_alloc::SimDevice::thread_started`])
    Thread(u64),
    /// a thread starts with a stack of this length, for good
    /// ([`vramscope_alloc::SimDevice::thread_stack`])
    Stack(u64),
    /// a started thread makes its malloc arena, for good
    /// ([`vramscope_alloc::SimDevice::thread_arena`])
    Arena,
    /// `cudaHostAlloc` maps this many bytes of page-locked host memory
    /// ([`vramscope_alloc::SimDevice::pinned_map`]), counted with the
    /// [`HostRequest::Map`]s for [`HostRequest::Unmap`]
    Pinned(u64),
    /// the driver takes this many bytes of address space, for good
    /// ([`vramscope_alloc::SimDevice::driver_map`])
    Driver(u64),
}

impl HostRequest {
    /// Made once per process and never undone (a library, a thread): a
    /// replay of a later step does not repeat it.
    pub(crate) fn once_per_process(&self) -> bool {
        matches!(
            self,
            HostRequest::Library(_)
                | HostRequest::Thread(_)
                | HostRequest::Stack(_)
                | HostRequest::Arena
                | HostRequest::Driver(_)
        )
    }
}

impl Requests {
    /// A copy with room for `more` requests after its own (a copy that is
    /// then extended reallocates the whole of them otherwise).
    fn clone_with_room(&self, more: usize) -> Requests {
        let mut requests = Vec::with_capacity(self.requests.len() + more);
        requests.extend_from_slice(&self.requests);
        Requests {
            requests,
            phases: self.phases.clone(),
            rules: self.rules.clone(),
            measured_sizes: self.measured_sizes,
            switches: self.switches.clone(),
            unmeasured: self.unmeasured.clone(),
            driver: self.driver.clone(),
            first_kernels: self.first_kernels,
            first_cublas: self.first_cublas,
            host: self.host.clone(),
        }
    }

    /// The requests of an estimate that ran to the end (`None` after an
    /// out-of-memory: the sequence is not complete).
    pub fn of(est: &Estimate) -> Option<Requests> {
        if est.oom.is_some() || est.phase_requests.len() != est.phases.len() {
            return None;
        }
        let mut requests = Vec::with_capacity(est.events.events.len());
        let by_seq: FastMap<u64, &ScratchRule> = est
            .events
            .scratch_rules
            .iter()
            .map(|(s, r)| (*s, r))
            .collect();
        let mut rules = BTreeMap::new();
        // live allocations by address (device addresses: an integer hash)
        let mut live: FastMap<u64, u32> = FastMap::default();
        let mut n = 0u32;
        if !est.events.initial.is_empty() {
            return None;
        }
        // each switch and driver allocation at the number of requests
        // before it
        let mut switches = Vec::with_capacity(est.events.switches.len());
        let mut pending = est.events.switches.iter().peekable();
        let mut driver = Vec::with_capacity(est.events.driver.len());
        let mut pending_driver = est.events.driver.iter().peekable();
        let mut first_kernels = None;
        let mut first_cublas = None;
        // the CPU tensors' mappings, an unmap by the number of its map
        let mut host = Vec::with_capacity(est.events.host.len());
        let mut pending_host = est.events.host.iter().peekable();
        let mut mapped: FastMap<u64, usize> = FastMap::default();
        let mut maps = 0;
        let mut host_event = |at: usize, e: &HostEvent| -> Option<()> {
            host.push(match *e {
                HostEvent::Map(addr, len) | HostEvent::Pinned(addr, len) => {
                    mapped.insert(addr, maps);
                    maps += 1;
                    let what = match e {
                        HostEvent::Pinned(..) => HostRequest::Pinned(len),
                        _ => HostRequest::Map(len),
                    };
                    At { at, what }
                }
                HostEvent::Unmap(addr) => {
                    let k = mapped.remove(&addr);
                    // (a mapping made before the log started: no replay)
                    debug_assert!(k.is_some(), "an unmap of a mapping the log never saw");
                    At {
                        at,
                        what: HostRequest::Unmap(k?),
                    }
                }
                HostEvent::Library(_, span) => At {
                    at,
                    what: HostRequest::Library(span),
                },
                HostEvent::Thread(_, stack) => At {
                    at,
                    what: HostRequest::Thread(stack),
                },
                HostEvent::Stack(_, stack) => At {
                    at,
                    what: HostRequest::Stack(stack),
                },
                HostEvent::Arena(_) => At {
                    at,
                    what: HostRequest::Arena,
                },
                HostEvent::Driver(_, len) => At {
                    at,
                    what: HostRequest::Driver(len),
                },
            });
            Some(())
        };
        for (k, e) in est.events.events.iter().enumerate() {
            if est.events.first_kernels == Some(k) {
                first_kernels = Some(requests.len());
            }
            if est.events.first_cublas == Some(k) {
                first_cublas = Some(requests.len());
            }
            let here = requests.len();
            while let Some(w) = pending.next_if(|w| w.at <= k) {
                switches.push(At { at: here, ..*w });
            }
            while let Some(d) = pending_driver.next_if(|d| d.at <= k) {
                driver.push(At { at: here, ..*d });
            }
            while let Some(h) = pending_host.next_if(|h| h.at <= k) {
                host_event(here, &h.what)?;
            }
            match e {
                MemEvent::Alloc(r) => {
                    live.insert(r.addr, n);
                    match by_seq.get(&r.seq) {
                        Some(rule) => {
                            rules.insert(requests.len(), (*rule).clone());
                            requests.push(Request::Scratch(r.bytes));
                        }
                        None => requests.push(Request::Malloc(r.bytes)),
                    }
                    n += 1;
                }
                MemEvent::Free(a) => requests.push(Request::Free(live.remove(a)?)),
                MemEvent::Recategorize(..) => {}
            }
        }
        let here = requests.len();
        switches.extend(pending.map(|w| At { at: here, ..*w }));
        driver.extend(pending_driver.map(|d| At { at: here, ..*d }));
        for h in pending_host {
            host_event(here, &h.what)?;
        }
        if est.events.first_kernels.is_some() && first_kernels.is_none() {
            first_kernels = Some(requests.len());
        }
        if est.events.first_cublas.is_some() && first_cublas.is_none() {
            first_cublas = Some(requests.len());
        }
        let phases: Vec<PhaseSpan> = est
            .phases
            .iter()
            .zip(&est.phase_requests)
            .map(|(p, r)| PhaseSpan::new(p.name.clone(), r.start, r.end))
            .collect();
        // what follows the last phase is the teardown (the model and the
        // optimizer dropped), not part of the workload
        let end = phases.last().map_or(0, |p| p.end);
        requests.truncate(end);
        rules.retain(|i, _| *i < end);
        switches.retain(|w| w.at <= end);
        driver.retain(|d| d.at < end);
        host.retain(|h| h.at <= end);
        Some(Requests {
            requests,
            phases,
            rules,
            measured_sizes: est.events.measured_sizes,
            switches,
            unmeasured: est.unmeasured.clone(),
            driver,
            first_kernels: first_kernels.filter(|&i| i <= end),
            first_cublas: first_cublas.filter(|&i| i <= end),
            host,
        })
    }

    /// The step number of a phase name (`forward1` and `forward1.0` are
    /// step 1; `load` has none).
    fn step_of(name: &str) -> Option<usize> {
        let digits = name.trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == '_');
        digits.split('.').next()?.parse().ok()
    }

    /// Where step `step` is (`None` unless it is one contiguous run of
    /// phases).
    fn step_span(&self, step: usize) -> Option<StepSpan> {
        let idx: Vec<usize> = (0..self.phases.len())
            .filter(|&i| Self::step_of(&self.phases[i].name) == Some(step))
            .collect();
        let (&a, &b) = (idx.first()?, idx.last()?);
        if b - a + 1 != idx.len() {
            return None;
        }
        Some(StepSpan {
            first_phase: a,
            start: self.phases[a].start,
            end: self.phases[b].end,
        })
    }

    /// Whether step `b` makes the requests of step `a` right before it:
    /// phases of the same lengths, the same sizes, each freeing only what
    /// it allocates, in the same order.
    fn mirrors(&self, a: StepAt, b: StepAt) -> bool {
        self.mirrors_by(a, b, |_, _, x, y| x == y)
    }

    /// [`Self::mirrors`], with `same(i, j, x, y)` deciding whether the
    /// mallocs `x` (request `i`) and `y` (request `j`) match.
    fn mirrors_by(
        &self,
        a: StepAt,
        b: StepAt,
        mut same: impl FnMut(usize, usize, Request, Request) -> bool,
    ) -> bool {
        let (first_a, first_b) = (a.mallocs_before, b.mallocs_before);
        let (a, b) = (a.span, b.span);
        let (ra, rb) = (&self.requests[a.range()], &self.requests[b.range()]);
        let phases_of = |first: usize| {
            let k = Self::step_of(&self.phases[first].name);
            self.phases[first..]
                .iter()
                .take_while(move |p| Self::step_of(&p.name) == k)
                .map(PhaseSpan::len)
        };
        if ra.len() != rb.len() || !phases_of(a.first_phase).eq(phases_of(b.first_phase)) {
            return false;
        }
        ra.iter()
            .zip(rb)
            .enumerate()
            .all(|(k, (x, y))| match (*x, *y) {
                (Request::Free(m), Request::Free(n)) => {
                    m >= first_a && n >= first_b && m - first_a == n - first_b
                }
                (Request::Free(_), _) | (_, Request::Free(_)) => false,
                (x, y) => same(a.start + k, b.start + k, x, y),
            })
    }

    /// How many mallocs come before each of `starts` (request indices, in
    /// increasing order), in one pass.
    fn mallocs_before(&self, starts: &[usize]) -> Vec<u32> {
        let mut out = Vec::with_capacity(starts.len());
        let (mut at, mut n) = (0, 0u32);
        for &s in starts {
            n += self.requests[at..s]
                .iter()
                .filter(|r| r.malloc_bytes().is_some())
                .count() as u32;
            at = s;
            out.push(n);
        }
        out
    }

    /// Whether step `s` frees every block it allocates, and only those.
    fn balanced(&self, s: StepAt) -> bool {
        let first = s.mallocs_before;
        let (mut mallocs, mut frees) = (0u32, 0u32);
        for r in &self.requests[s.span.range()] {
            match *r {
                Request::Free(n) if n < first => return false,
                Request::Free(_) => frees += 1,
                _ => mallocs += 1,
            }
        }
        mallocs == frees
    }

    /// The same phases and the same requests in the same order, sizes aside
    /// (the same blocks freed).
    pub fn same_structure(&self, other: &Requests) -> bool {
        self.requests.len() == other.requests.len()
            && self.phases == other.phases
            && self.driver == other.driver
            && self.host == other.host
            && self.first_kernels == other.first_kernels
            && self.first_cublas == other.first_cublas
            && self
                .requests
                .iter()
                .zip(&other.requests)
                .all(|(a, b)| a.same_kind(b))
    }

    /// The device memory the driver takes outside the allocator before
    /// request `end` ([`Requests::driver`]).
    pub fn driver_bytes_before(&self, end: usize) -> u64 {
        self.driver
            .iter()
            .filter(|d| d.at < end)
            .map(|d| d.what)
            .sum()
    }

    /// The phases of step `step` (by their names' digits), if they are one
    /// contiguous run.
    pub fn step_phases(&self, step: usize) -> Option<std::ops::Range<usize>> {
        let first = self.step_span(step)?.first_phase;
        let len = self.phases[first..]
            .iter()
            .take_while(|p| Self::step_of(&p.name) == Some(step))
            .count();
        Some(first..first + len)
    }

    /// How many requests the second step (step 1) makes.
    pub fn repeated_step_len(&self) -> Option<usize> {
        self.step_span(1).map(|s| s.end - s.start)
    }

    /// The requests of the same workload run for `steps` steps, from those
    /// of a run of two (steps 0 and 1) that ended with step 1: step 1
    /// repeated. `None` unless step 1 frees only what it allocated and
    /// frees all of it, so that every later step starts as it did.
    pub fn repeat_steps(&self, steps: usize) -> Option<Requests> {
        let StepSpan {
            first_phase,
            start,
            end,
        } = self.step_span(1)?;
        if !self.phases[first_phase..]
            .iter()
            .all(|p| Self::step_of(&p.name) == Some(1))
            || self.phases.last()?.end != self.requests.len()
            || end != self.requests.len()
        {
            return None;
        }
        let (_, freed) = self.frees_within(start, end)?;
        let step = &self.requests[start..end];
        let mallocs = freed.len() as u32;
        if !freed.iter().all(|f| *f) {
            return None;
        }
        let mut out = self.clone_with_room(steps.saturating_sub(2).saturating_mul(step.len()));
        for k in 2..steps {
            let shift = (k as u32 - 1) * mallocs;
            let at = out.requests.len();
            for (i, rule) in self.rules.range(start..end) {
                out.rules.insert(i - start + at, rule.clone());
            }
            out.switches.extend(
                self.switches
                    .iter()
                    .filter(|w| (start..end).contains(&w.at))
                    .map(|w| At {
                        at: w.at - start + at,
                        ..*w
                    }),
            );
            out.requests.extend(step.iter().map(|r| match *r {
                Request::Free(n) => Request::Free(n + shift),
                m => m,
            }));
            for p in &self.phases[first_phase..] {
                let name = &p.name;
                let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
                let rest = &name[prefix.len()..];
                let sub = rest.split_once('.').map(|(_, m)| format!(".{m}"));
                out.phases.push(PhaseSpan::new(
                    format!("{prefix}{k}{}", sub.unwrap_or_default()),
                    p.start - start + at,
                    p.end - start + at,
                ));
            }
        }
        Some(out)
    }

    /// For the requests `start..end`: the index of their first malloc, and
    /// for each of their mallocs whether they free it. `None` if they free
    /// a block malloc'd before them.
    fn frees_within(&self, start: usize, end: usize) -> Option<(u32, Vec<bool>)> {
        let first_malloc = self.requests[..start]
            .iter()
            .filter(|r| r.malloc_bytes().is_some())
            .count() as u32;
        let span = &self.requests[start..end];
        let mallocs = span.iter().filter(|r| r.malloc_bytes().is_some()).count();
        let mut freed = vec![false; mallocs];
        for r in span {
            if let Request::Free(n) = *r {
                let k = n.checked_sub(first_malloc)?;
                *freed.get_mut(k as usize)? = true;
            }
        }
        Some((first_malloc, freed))
    }

    /// The name of a phase of step `from` for step `to` (`forward0.1` ->
    /// `forward1.1`).
    fn phase_of_step(name: &str, to: usize) -> String {
        let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let rest = &name[prefix.len()..];
        let sub = rest.split_once('.').map(|(_, m)| format!(".{m}"));
        format!("{prefix}{to}{}", sub.unwrap_or_default())
    }

    /// The requests of the same training workload run for two steps, from
    /// those of a run of one (`load`, then step 0 to the end): step 1 is
    /// step 0 without the mallocs that step 0 keeps to its end, the state a
    /// first step creates once (the optimizer's moments or momentum
    /// buffers, a library's workspace), which exist when step 1 starts.
    /// `None` unless step 0 follows `load` to the end of the run and frees
    /// only what it allocated.
    ///
    /// That is the model's step 1 when an optimizer's later steps make the
    /// requests of its first, less what it creates: a caller checks it on
    /// one run of two steps ([`Requests::second_step_derives`]) before it
    /// trusts it for others of the same workload at other batch sizes (the
    /// first step's state does not depend on the batch).
    pub fn with_derived_second_step(&self) -> Option<Requests> {
        let StepSpan {
            first_phase,
            start,
            end,
        } = self.step_span(0)?;
        if first_phase != 1
            || self.phases.first()?.name != "load"
            || self.phases.len() < 2
            || self.phases.last()?.end != self.requests.len()
            || end != self.requests.len()
            || self.step_span(1).is_some()
            // (a switch after the last request: of step 0's end, or of the
            // next step's start?)
            || self.switches.iter().any(|w| w.at >= end)
            // (the CPU tensors are mapped in `load`: one in step 0 would
            // not repeat in step 1; a library is loaded once per process,
            // as the first cuBLAS handle is made)
            || self
                .host
                .iter()
                .any(|h| h.at >= start && !h.what.once_per_process())
        {
            return None;
        }
        // which of step 0's mallocs it frees: the others it keeps
        let (first_malloc, freed) = self.frees_within(start, end)?;
        let step = &self.requests[start..end];
        let mallocs = freed.len() as u32;
        // step 1's index of each freed malloc of step 0
        let mut renamed = vec![u32::MAX; mallocs as usize];
        let mut next = first_malloc + mallocs;
        for (k, f) in freed.iter().enumerate() {
            if *f {
                renamed[k] = next;
                next += 1;
            }
        }
        let mut out = self.clone_with_room(step.len());
        // where each request of step 0 (and its end) lands in step 1
        let mut at = Vec::with_capacity(step.len() + 1);
        let mut k = 0;
        for (j, r) in step.iter().enumerate() {
            at.push(out.requests.len());
            match *r {
                Request::Free(n) => out
                    .requests
                    .push(Request::Free(renamed[(n - first_malloc) as usize])),
                m => {
                    if freed[k] {
                        if let Some(rule) = self.rules.get(&(start + j)) {
                            out.rules.insert(out.requests.len(), rule.clone());
                        }
                        out.requests.push(m);
                    }
                    k += 1;
                }
            }
        }
        at.push(out.requests.len());
        out.switches.extend(
            self.switches
                .iter()
                .filter(|w| (start..end).contains(&w.at))
                .map(|w| At {
                    at: at[w.at - start],
                    ..*w
                }),
        );
        for p in &self.phases[first_phase..] {
            out.phases.push(PhaseSpan::new(
                Self::phase_of_step(&p.name, 1),
                at[p.start - start],
                at[p.end - start],
            ));
        }
        Some(out)
    }

    /// The first `phases` phases, whose requests end at `end`.
    fn prefix(&self, phases: usize, end: usize) -> Requests {
        Requests {
            requests: self.requests[..end].to_vec(),
            phases: self.phases[..phases].to_vec(),
            rules: self
                .rules
                .range(..end)
                .map(|(i, r)| (*i, r.clone()))
                .collect(),
            measured_sizes: self.measured_sizes,
            unmeasured: self.unmeasured.clone(),
            switches: self
                .switches
                .iter()
                .filter(|w| w.at < end)
                .copied()
                .collect(),
            driver: self.driver.iter().filter(|d| d.at < end).copied().collect(),
            first_kernels: self.first_kernels.filter(|&i| i <= end),
            first_cublas: self.first_cublas.filter(|&i| i <= end),
            host: self.host.iter().filter(|h| h.at <= end).copied().collect(),
        }
    }

    /// Whether the first two steps of these requests (a training run of
    /// two steps or more) are `load` and step 0 with the step 1 that
    /// [`Requests::with_derived_second_step`] derives from them.
    pub fn second_step_derives(&self) -> bool {
        let (Some(_), Some(step1)) = (self.step_span(0), self.step_span(1)) else {
            return false;
        };
        let (p1, end1) = (step1.first_phase, step1.end);
        let Some(p2) = self.step_phases(1).map(|r| r.end) else {
            return false;
        };
        if p1 == 0 || self.phases[p1 - 1].end != self.phases[p1].start {
            return false;
        }
        let end0 = self.phases[p1].start;
        let (first, two) = (self.prefix(p1, end0), self.prefix(p2, end1));
        first.with_derived_second_step().as_ref() == Some(&two)
    }
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// each phase that ran (up to the out-of-memory)
    pub phases: Vec<PhaseFigures>,
    /// the highest `memory_allocated()`
    pub peak_allocated_bytes: i64,
    /// the highest `memory_reserved()`
    pub peak_reserved_bytes: i64,
    /// the most bytes requested at once (before rounding: what no cache
    /// can serve in less)
    pub peak_requested_bytes: i64,
    /// the request that ran out of memory
    pub oom: Option<ReplayOom>,
    /// how many steps at the end were not replayed because the one before
    /// them started in the same state (their figures are its figures)
    pub repeated_steps: usize,
}

impl Replayed {
    /// The replay of these phases: its peaks are theirs.
    pub fn of(
        phases: Vec<PhaseFigures>,
        peak_requested_bytes: i64,
        oom: Option<ReplayOom>,
        repeated_steps: usize,
    ) -> Replayed {
        let peak = |f: fn(&PhaseFigures) -> i64| phases.iter().map(f).max().unwrap_or(0);
        Replayed {
            peak_allocated_bytes: peak(|p| p.peak_allocated_bytes),
            peak_reserved_bytes: peak(|p| p.peak_reserved_bytes),
            peak_requested_bytes,
            phases,
            oom,
            repeated_steps,
        }
    }
}

/// A request the allocator could not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOom {
    /// the phase
    pub phase: String,
    /// its index in the requests
    pub request: usize,
    /// the bytes it asked for
    pub bytes: u64,
    /// the allocator's message
    pub message: String,
}

/// The allocator of a fresh process, as the eager twin's runtime makes it
/// for the estimate ([`SimDevice::with_driver_placement`]: the context's
/// range held until the requests' [`Requests::first_kernels`]), for
/// [`replay`] (which frees by handle, so it keeps no index of the
/// blocks by address: [`CachingAllocator::without_address_index`]; and
/// reads the figures alone, so it keeps no other statistics:
/// [`CachingAllocator::figures_only`]).
pub fn fresh_allocator(
    profile: &DeviceProfile,
    config: &AllocatorConfig,
    memory_fraction: Option<f64>,
    unlimited: bool,
) -> CachingAllocator {
    let mut a =
        CachingAllocator::with_device(config.clone(), SimDevice::with_driver_placement(0, 0))
            .figures_only();
    renew_allocator(&mut a, profile, memory_fraction, unlimited);
    a
}

/// Make `alloc` (from [`fresh_allocator`]) what `fresh_allocator` makes
/// with its settings and these arguments, keeping its buffers
/// ([`CachingAllocator::renew`]): for a caller that replays cell after
/// cell.
pub fn renew_allocator(
    alloc: &mut CachingAllocator,
    profile: &DeviceProfile,
    memory_fraction: Option<f64>,
    unlimited: bool,
) {
    let (total, usable) = if unlimited {
        (UNLIMITED_BYTES, UNLIMITED_BYTES)
    } else {
        (profile.total_memory, profile.usable_memory)
    };
    alloc.renew_recycling(|d| d.recycled(total, usable));
    if let Some(f) = memory_fraction {
        alloc.set_memory_fraction(f);
    }
}

/// What a sweep needs of one run under a limit: whether it fits, and the
/// figures of the run under the limit when it does (releasing cached
/// blocks at the limit can keep it lower than without one), else of the
/// whole run without a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// every request was served under the limit
    pub fits: bool,
    /// the run the figures are of
    pub figures: Replayed,
}

/// The [`Verdict`] of `requests` under the limit that [`fresh_allocator`]
/// sets for `options` (its GPU, allocator settings, memory fraction and
/// `unlimited`), replaying the requests without a limit first
/// and under the limit only when that decides something:
/// - a run whose reserved memory never went over the limit never met it
///   (the device's capacity once the driver has taken its share, or
///   PyTorch's `allowed_memory_maximum` under a fraction): the run under it
///   is the same run, when the allocator's settings allow it
///   ([`Shortcut::UnmetLimit`]);
/// - a run that once asked for more bytes than the limit (before rounding)
///   cannot fit under it, whatever the cache does.
pub fn verdict(requests: &Requests, options: &EstimateOptions) -> Verdict {
    let whole = replay(
        requests,
        &mut fresh_allocator(&options.profile, &options.allocator, None, true),
    );
    verdict_from(whole, requests, options)
}

/// [`verdict`], given the figures of the whole run without a limit
/// (`whole`: a [`replay`] of `requests` on `fresh_allocator(&options.profile,
/// &options.allocator, None, true)`, or what equals it, such as
/// [`crate::workload_run`]'s).
pub fn verdict_from(whole: Replayed, requests: &Requests, options: &EstimateOptions) -> Verdict {
    verdict_from_planned(whole, requests, None, options)
}

/// [`verdict_from`], given the plan of the requests' steps
/// ([`replay_planned`]).
pub fn verdict_from_planned(
    whole: Replayed,
    requests: &Requests,
    plan: Option<&StepPlan>,
    options: &EstimateOptions,
) -> Verdict {
    let (profile, config) = (&options.profile, &options.allocator);
    let (memory_fraction, unlimited) = (options.memory_fraction, options.unlimited);
    if unlimited {
        return Verdict {
            fits: whole.oom.is_none(),
            figures: whole,
        };
    }
    let mut alloc = fresh_allocator(profile, config, memory_fraction, unlimited);
    let allowed = alloc.allowed_memory_maximum().unwrap_or(u64::MAX);
    let limit = allowed.min(profile.usable_memory) as i64;
    // the device's room once the driver has taken all it takes (the least
    // it ever has)
    let driver = requests.driver_bytes_before(usize::MAX);
    let least = allowed.min(profile.usable_memory.saturating_sub(driver)) as i64;
    let unmet = config.allows(Shortcut::UnmetLimit {
        memory_fraction: memory_fraction.is_some(),
    });
    if whole.peak_reserved_bytes <= least && unmet {
        return Verdict {
            fits: true,
            figures: whole,
        };
    }
    if whole.peak_requested_bytes > limit {
        return Verdict {
            fits: false,
            figures: whole,
        };
    }
    let limited = replay_planned(requests, plan, &mut alloc);
    if limited.oom.is_none() {
        Verdict {
            fits: true,
            figures: limited,
        }
    } else {
        Verdict {
            fits: false,
            figures: whole,
        }
    }
}

/// Replay `requests` on `alloc`, phase by phase.
///
/// A step that starts as the one before it started and makes the same
/// requests is not replayed: the allocator is deterministic, so it does what
/// the step before did (`Steady`).
pub fn replay(requests: &Requests, alloc: &mut CachingAllocator) -> Replayed {
    replay_planned(requests, None, alloc)
}

/// [`replay`], given the plan of the requests' steps (their template's,
/// [`Source::step_plan`]; `None`: computed from the requests).
pub fn replay_planned(
    requests: &Requests,
    plan: Option<&StepPlan>,
    alloc: &mut CachingAllocator,
) -> Replayed {
    // the block of each malloc so far (frees name mallocs by their index)
    let mut blocks: Vec<Handle> = Vec::with_capacity(requests.requests.len());
    let mut phases: Vec<PhaseFigures> = Vec::with_capacity(requests.phases.len());
    let mut oom = None;
    let mut steady = Steady::new(requests, plan, alloc);
    // a repeated step's peak is the step's it repeats
    let mut peak_requested = 0;
    let mut repeated_steps = 0;
    // the driver's allocations still to take, and where the next one is
    let mut driver = requests.driver.iter().peekable();
    // the CPU tensors' mappings still to make, and the addresses of those
    // made
    let mut host = requests.host.iter().peekable();
    let mut host_addrs: Vec<Option<u64>> = Vec::new();
    // what the driver does to the address space at the process's first
    // kernels and first cuBLAS handle (`driver_va.rs`, rules 6 and 8), by
    // position: inside a phase where the run did it there (the context's
    // range goes after `forward0`'s first allocation)
    let mark = |at: Option<usize>, what| at.map(|at| At { at, what });
    let mut marks: Vec<At<Mark>> = mark(requests.first_kernels, Mark::FirstKernels)
        .into_iter()
        .chain(mark(requests.first_cublas, Mark::FirstCublas))
        .collect();
    marks.sort_by_key(|m| m.at);
    let mut marks = marks.into_iter().peekable();
    'phases: for (p, span) in requests.phases.iter().enumerate() {
        let (name, start, end) = (&span.name, &span.start, &span.end);
        if let Some(Repeat { from, reserved }) = steady.at_phase(p, alloc) {
            // this step and every later one repeat the phases from `from`
            // (at the reserved memory it ends with, when it grew the cache)
            for (i, PhaseSpan { name, .. }) in requests.phases.iter().enumerate().skip(p) {
                let mut f = phases[from + i - p].clone();
                f.name.clone_from(name);
                if let Some(r) = reserved {
                    f.reserved_bytes = r;
                    f.peak_reserved_bytes = r;
                }
                phases.push(f);
            }
            repeated_steps = steady.steps_from(p);
            break;
        }
        // the driver's address-space marks due by the phase's start
        while let Some(m) = marks.next_if(|m| m.at <= *start) {
            m.what.apply(alloc.device_mut());
        }
        alloc.reset_peak_stats();
        let mut next_driver = driver.peek().map_or(usize::MAX, |d| d.at);
        // the phase's requests in stretches between the driver's
        // allocations (a run has two of them, in step 0)
        let mut at = *start;
        while at < *end {
            // the driver's allocations due before request `at`
            while next_driver <= at {
                if let Some(&At { what: bytes, .. }) = driver.next() {
                    if !alloc.device_mut().driver_alloc(bytes) {
                        // `cublasCreate` or cuDNN fails (the runtime's
                        // `driver_take`; the requests keep no op names)
                        oom = Some(ReplayOom {
                            phase: name.clone(),
                            request: at,
                            bytes,
                            message: format!(
                                "the driver needs {bytes} bytes outside the caching allocator (a cuBLAS handle or a thread's kernels) and the device has less free: cuBLAS fails with CUBLAS_STATUS_ALLOC_FAILED, cuDNN with CUDNN_STATUS_INTERNAL_ERROR"
                            ),
                        });
                        phases.push(figures(name, alloc));
                        break 'phases;
                    }
                }
                next_driver = driver.peek().map_or(usize::MAX, |d| d.at);
            }
            // the CPU tensors mapped and unmapped before request `at`
            while let Some(h) = host.next_if(|h| h.at <= at) {
                match h.what {
                    HostRequest::Map(len) => host_addrs.push(alloc.device_mut().host_map(len)),
                    HostRequest::Pinned(len) => host_addrs.push(alloc.device_mut().pinned_map(len)),
                    HostRequest::Library(span) => {
                        let _ = alloc.device_mut().load_library(span);
                    }
                    HostRequest::Thread(stack) => {
                        let _ = alloc.device_mut().thread_started(stack);
                    }
                    HostRequest::Stack(stack) => {
                        let _ = alloc.device_mut().thread_stack(stack);
                    }
                    HostRequest::Arena => {
                        let _ = alloc.device_mut().thread_arena();
                    }
                    HostRequest::Driver(len) => {
                        let _ = alloc.device_mut().driver_map(len);
                    }
                    HostRequest::Unmap(k) => {
                        if let Some(addr) = host_addrs.get_mut(k).and_then(Option::take) {
                            alloc.device_mut().host_unmap(addr);
                        }
                    }
                }
            }
            // and the driver's address-space marks
            while let Some(m) = marks.next_if(|m| m.at <= at) {
                m.what.apply(alloc.device_mut());
            }
            let next_host = host.peek().map_or(usize::MAX, |h| h.at);
            let next_mark = marks.peek().map_or(usize::MAX, |m| m.at);
            let upto = next_driver.min(next_host).min(next_mark).min(*end);
            for (i, r) in requests.requests[at..upto].iter().enumerate() {
                match *r {
                    Request::Malloc(bytes) | Request::Scratch(bytes) => {
                        match alloc.malloc_handle(bytes, 0) {
                            Ok(h) => blocks.push(h),
                            Err(e) => {
                                oom = Some(ReplayOom {
                                    phase: name.clone(),
                                    request: at + i,
                                    bytes,
                                    message: e.to_string(),
                                });
                                phases.push(figures(name, alloc));
                                break 'phases;
                            }
                        }
                    }
                    Request::Free(n) => {
                        let _ = alloc.free_handle(blocks[n as usize]);
                    }
                }
            }
            at = upto;
        }
        phases.push(figures(name, alloc));
        peak_requested = peak_requested.max(alloc.stats().requested_bytes.all().peak);
    }
    Replayed::of(phases, peak_requested, oom, repeated_steps)
}

/// A driver event of [`Requests`] that changes the address space only.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// [`Requests::first_kernels`]
    FirstKernels,
    /// [`Requests::first_cublas`]
    FirstCublas,
}

impl Mark {
    fn apply(self, device: &mut SimDevice) {
        // (each a no-op after the first time, or on a device started after)
        match self {
            Mark::FirstKernels => device.first_kernels(),
            Mark::FirstCublas => device.first_cublas(),
        };
    }
}

/// Where a step is: its first phase and its span of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StepSpan {
    first_phase: usize,
    start: usize,
    end: usize,
}

impl StepSpan {
    fn range(self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// A step and the mallocs before it (frees name blocks by their malloc's
/// order).
#[derive(Debug, Clone, Copy)]
struct StepAt {
    span: StepSpan,
    mallocs_before: u32,
}

/// What `Steady` learns of a run's steps from its requests before a
/// replay: where each step from step 1 on is, the mallocs before it,
/// whether each step makes the requests of the step before it, and whether
/// it frees only what it allocates. All but the sizes' part of the third
/// are the same at every batch size of a [`BatchTemplate`], which computes
/// it once ([`BatchTemplate::step_plan`]) for every cell of a sweep, where
/// each replay computed it again (three passes over the requests).
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// each step from step 1 on
    steps: Vec<StepSpan>,
    /// each step's phases follow the previous step's to the end
    contiguous: bool,
    /// the mallocs before each of `steps` (when `contiguous`)
    firsts: Vec<u32>,
    /// for each of `steps` after the first: whether it makes the requests
    /// of the one before it, when known for every batch size (else the
    /// replay compares them)
    mirrors: Vec<Option<bool>>,
    /// for each of `steps`: whether it frees only what it allocates, when
    /// computed
    balanced: Vec<Option<bool>>,
}

impl StepPlan {
    /// The `i`-th of its steps, with the mallocs before it (when
    /// `contiguous`).
    fn step(&self, i: usize) -> StepAt {
        StepAt {
            span: self.steps[i],
            mallocs_before: self.firsts[i],
        }
    }

    /// The plan of `requests`, to be completed by the replay (what it does
    /// not ask, it never computes).
    pub fn of(requests: &Requests) -> StepPlan {
        let mut steps = Vec::new();
        let mut k = 1;
        while let Some(span) = requests.step_span(k) {
            steps.push(span);
            k += 1;
        }
        let contiguous = steps.windows(2).all(|w| w[0].end == w[1].start)
            && steps.last().is_some_and(|l| {
                l.end == requests.requests.len()
                    && requests.phases.last().is_some_and(|p| p.end == l.end)
            });
        let firsts = if contiguous {
            requests.mallocs_before(&steps.iter().map(|s| s.start).collect::<Vec<_>>())
        } else {
            Vec::new()
        };
        StepPlan {
            mirrors: vec![None; steps.len()],
            balanced: vec![None; steps.len()],
            steps,
            contiguous,
            firsts,
        }
    }
}

/// Finds where a replay reaches a steady state, where step `k` and every
/// later step make the requests of the step before them, each freeing only
/// what it allocates, and either
/// - the allocator starts step `k` as it started step `k - 1` (the same
///   segments and blocks, nothing taken from or given back to the device
///   during step `k - 1`, no garbage collection, whose block ages are state
///   the snapshot does not show): then every later step does what step
///   `k - 1` did; or
/// - step `k - 1` freed everything it allocated and none of the segments it
///   created would have been a better fit for an earlier malloc of it than
///   the block that malloc took ([`CachingAllocator::repeats_with_its_segments`],
///   from its recorded fits): then step `k` takes the same blocks and
///   creates no segment, so every later step does what step `k - 1` did at
///   the reserved memory step `k - 1` ended with.
struct Steady<'a> {
    requests: &'a Requests,
    /// the steps, from the requests or their template
    plan: std::borrow::Cow<'a, StepPlan>,
    /// whether the steps from the `i`-th of the plan's on each mirror the
    /// step before: computed when first asked (a pass over the requests
    /// that a run whose steps keep growing the cache never needs)
    mirrors_from: Option<Vec<bool>>,
    /// the allocator at the start of the previous step
    last: Option<StepStart>,
    /// the device calls at the start of the previous step, and its index
    calls_at: Option<(usize, DeviceCalls)>,
    /// the step whose fits the allocator records, and the device frees at
    /// its start
    watch: Option<(usize, i64)>,
    enabled: bool,
}

/// What [`Steady`] found at a phase's start: this step and every later
/// one repeat the phases from `from` on, at `reserved` bytes reserved when
/// given (when the step before grew the cache).
struct Repeat {
    from: usize,
    reserved: Option<i64>,
}

/// The allocator's device calls so far (`num_device_alloc`,
/// `num_device_free`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DeviceCalls {
    allocs: i64,
    frees: i64,
}

/// The allocator at the start of a step ([`Steady`]).
struct StepStart {
    /// the step's index in the plan's steps
    step: usize,
    /// the allocator's segments
    segments: Vec<vramscope_alloc::SegmentInfo>,
    /// its device calls
    calls: DeviceCalls,
}

impl<'a> Steady<'a> {
    fn new(
        requests: &'a Requests,
        plan: Option<&'a StepPlan>,
        alloc: &CachingAllocator,
    ) -> Steady<'a> {
        let plan = match plan {
            Some(p) => std::borrow::Cow::Borrowed(p),
            None => std::borrow::Cow::Owned(StepPlan::of(requests)),
        };
        let enabled = plan.contiguous && alloc.config().allows(Shortcut::MirroredSteps);
        Steady {
            enabled,
            requests,
            plan,
            mirrors_from: None,
            last: None,
            calls_at: None,
            watch: None,
        }
    }

    /// Whether the steps from the `i`-th of `steps` on each mirror the
    /// step before (only asked when `enabled`: the steps are contiguous).
    fn mirrors_from(&mut self, i: usize) -> bool {
        let (requests, plan) = (self.requests, &self.plan);
        let m = self.mirrors_from.get_or_insert_with(|| {
            let mut m = vec![false; plan.steps.len()];
            let mut ok = true;
            for i in (1..plan.steps.len()).rev() {
                ok = ok
                    && plan.mirrors[i]
                        .unwrap_or_else(|| requests.mirrors(plan.step(i - 1), plan.step(i)));
                m[i] = ok;
            }
            m
        });
        m.get(i) == Some(&true)
    }

    /// Whether the `i`-th step of the plan frees only what it allocates.
    fn balanced(&self, i: usize) -> bool {
        let plan = &self.plan;
        plan.balanced[i].unwrap_or_else(|| self.requests.balanced(plan.step(i)))
    }

    /// How many steps start at phase `p` or later.
    fn steps_from(&self, p: usize) -> usize {
        self.plan
            .steps
            .iter()
            .filter(|s| s.first_phase >= p)
            .count()
    }

    /// At the start of phase `p`: `Some` when `p` starts a step that, with
    /// every later one, repeats earlier phases.
    fn at_phase(&mut self, p: usize, alloc: &mut CachingAllocator) -> Option<Repeat> {
        if !self.enabled {
            return None;
        }
        let i = self.plan.steps.iter().position(|s| s.first_phase == p)?;
        if let Some((j, frees)) = self.watch.take() {
            let repeats = alloc.repeats_with_its_segments(frees);
            if repeats && j + 1 == i && self.mirrors_from(i) {
                let reserved = alloc.stats().reserved_bytes.all().current;
                return Some(Repeat {
                    from: self.plan.steps[j].first_phase,
                    reserved: Some(reserved),
                });
            }
        }
        if self.mirrors_from(i + 1) && self.balanced(i) {
            alloc.record_fits();
            self.watch = Some((i, alloc.stats().num_device_free));
        }
        let stats = alloc.stats();
        let calls = DeviceCalls {
            allocs: stats.num_device_alloc,
            frees: stats.num_device_free,
        };
        let candidate = match &self.last {
            Some(l) if l.step + 1 == i && l.calls == calls => Some(l.step),
            _ => None,
        };
        if let Some(j) = candidate {
            if self.mirrors_from(i)
                && self
                    .last
                    .as_ref()
                    .is_some_and(|l| l.segments == alloc.snapshot())
            {
                return Some(Repeat {
                    from: self.plan.steps[j].first_phase,
                    reserved: None,
                });
            }
        }
        // a state worth keeping: the step before made no device calls (a
        // step that still grows the cache cannot be repeated by the next)
        let settled = self.calls_at.is_some_and(|(j, c)| j + 1 == i && c == calls);
        self.last = (settled && self.mirrors_from(i + 1)).then(|| StepStart {
            step: i,
            segments: alloc.snapshot(),
            calls,
        });
        self.calls_at = Some((i, calls));
        None
    }
}

/// A phase's figures as the allocator's statistics give them at its end
/// (the peaks since its `reset_peak_memory_stats()`).
pub fn figures<D: vramscope_alloc::Device>(
    name: &str,
    alloc: &CachingAllocator<D>,
) -> PhaseFigures {
    let s = alloc.stats();
    PhaseFigures {
        name: name.to_owned(),
        allocated_bytes: s.allocated_bytes.all().current,
        peak_allocated_bytes: s.allocated_bytes.all().peak,
        reserved_bytes: s.reserved_bytes.all().current,
        peak_reserved_bytes: s.reserved_bytes.all().peak,
        requested_bytes: s.requested_bytes.all().current,
    }
}

/// The requests of a workload at any batch size of a column, from three
/// recorded ones (see the module doc).
#[derive(Debug, Clone)]
pub struct BatchTemplate {
    base: Requests,
    b0: i64,
    /// per malloc, in order: its index in `base.requests` and its size
    sizes: Vec<(u32, Size)>,
    /// the distinct rules of `sizes` (every layer repeats its own)
    rules: Vec<RuleTemplate>,
    /// the GPU the scratch rules are evaluated for
    profile: DeviceProfile,
    /// each path switch
    switches: Vec<SwitchTemplate>,
    /// the plan of its steps, when first asked ([`Self::step_plan`])
    plan: std::cell::OnceCell<StepPlan>,
}

/// How a malloc's size follows the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    /// bytes at `b0`, and bytes per extra batch element
    Affine(u64, i64),
    /// sized by a rule: its index in `BatchTemplate::rules`
    Rule(usize),
}

/// A scratch rule whose inputs are affine in the batch, like sizes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RuleTemplate {
    rule: ScratchRule,
    inputs: Vec<Affine>,
}

/// A path switch of a [`BatchTemplate`]: where it is in the requests, its
/// threshold, its count, and the side of the threshold the three runs were
/// on.
#[derive(Debug, Clone, Copy)]
struct SwitchTemplate {
    at: usize,
    threshold: i64,
    count: Affine,
    above: bool,
}

/// A value integer-affine in the batch: `at_b0 + per * (batch - b0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Affine {
    at_b0: i64,
    per: i64,
}

impl Affine {
    /// Its value `db` batch elements past `b0`.
    fn at(self, db: i64) -> i64 {
        self.at_b0 + self.per * db
    }
}

/// The line through `v0, v1, v2` at `b0, b1, b2`, when its slope is an
/// integer.
fn affine(b: [i64; 3], v: [i64; 3]) -> Option<Affine> {
    let d = v[1] - v[0];
    if d % (b[1] - b[0]) != 0 {
        return None;
    }
    let per = d / (b[1] - b[0]);
    (v[0] + per * (b[2] - b[0]) == v[2]).then_some(Affine { at_b0: v[0], per })
}

impl BatchTemplate {
    /// Fit from the requests at three different batch sizes; `None` unless
    /// the three have the same structure, took no size without a
    /// measurement, every tensor's size is an
    /// integer-affine function of the batch through all three, and every
    /// library scratch either keeps its size or has a rule whose inputs are
    /// (its size then comes from the rule, evaluated for `profile`).
    pub fn fit(runs: [(i64, &Requests); 3], profile: &DeviceProfile) -> Option<BatchTemplate> {
        let [(b0, r0), (b1, r1), (b2, r2)] = runs;
        if b0 == b1 || b0 == b2 || b1 == b2 {
            return None;
        }
        let bs = [b0, b1, b2];
        if r0.measured_sizes || r1.measured_sizes || r2.measured_sizes {
            return None;
        }
        if [r0, r1, r2].iter().any(|r| !r.unmeasured.is_empty()) {
            return None;
        }
        if !r0.same_structure(r1) || !r0.same_structure(r2) {
            return None;
        }
        // the kernels took the same paths, by counts affine in the batch
        let (w0, w1, w2) = (&r0.switches, &r1.switches, &r2.switches);
        if w0.len() != w1.len() || w0.len() != w2.len() {
            return None;
        }
        let switches = (0..w0.len())
            .map(|k| {
                let At { at, what: x } = w0[k];
                let (y, z) = (w1[k].what, w2[k].what);
                let same = at == w1[k].at
                    && at == w2[k].at
                    && x.threshold == y.threshold
                    && x.threshold == z.threshold
                    && x.above() == y.above()
                    && x.above() == z.above();
                let count = affine(bs, [x.count, y.count, z.count])?;
                same.then_some(SwitchTemplate {
                    at,
                    threshold: x.threshold,
                    count,
                    above: x.above(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let mut sizes = Vec::new();
        let mut distinct_rules = Vec::new();
        let mut distinct = std::collections::HashMap::new();
        for (i, ((a, b), c)) in r0
            .requests
            .iter()
            .zip(&r1.requests)
            .zip(&r2.requests)
            .enumerate()
        {
            // (a request's index fits in the u32 that frees name mallocs by)
            let at = u32::try_from(i).ok()?;
            match (a, b, c) {
                (Request::Scratch(s0), Request::Scratch(s1), Request::Scratch(s2)) => {
                    let rules = (r0.rules.get(&i), r1.rules.get(&i), r2.rules.get(&i));
                    match rules {
                        (Some(x), Some(y), Some(z)) if x.same_rule(y) && x.same_rule(z) => {
                            let (ix, iy, iz) = (x.inputs(), y.inputs(), z.inputs());
                            if ix.len() != iy.len() || ix.len() != iz.len() {
                                return None;
                            }
                            let inputs = (0..ix.len())
                                .map(|k| affine(bs, [ix[k], iy[k], iz[k]]))
                                .collect::<Option<Vec<_>>>()?;
                            let rule = RuleTemplate {
                                rule: x.clone(),
                                inputs,
                            };
                            let k = match distinct.get(&rule) {
                                Some(&k) => k,
                                None => {
                                    distinct.insert(rule.clone(), distinct_rules.len());
                                    distinct_rules.push(rule);
                                    distinct_rules.len() - 1
                                }
                            };
                            sizes.push((at, Size::Rule(k)));
                        }
                        // no rule kept: only a size that does not change
                        (None, None, None) if s0 == s1 && s0 == s2 => {
                            sizes.push((at, Size::Affine(*s0, 0)));
                        }
                        _ => return None,
                    }
                }
                (Request::Malloc(s0), Request::Malloc(s1), Request::Malloc(s2)) => {
                    let a = affine(bs, [*s0 as i64, *s1 as i64, *s2 as i64])?;
                    sizes.push((at, Size::Affine(a.at_b0 as u64, a.per)));
                }
                _ => {}
            }
        }
        Some(BatchTemplate {
            base: r0.clone(),
            b0,
            sizes,
            rules: distinct_rules,
            profile: profile.clone(),
            switches,
            plan: std::cell::OnceCell::new(),
        })
    }

    /// The plan of its steps' replay, the same at every batch size: each
    /// step's place, the mallocs before it and whether it frees only what
    /// it allocates follow from the requests' structure; whether a step
    /// makes the requests of the one before it is known for every batch
    /// where the structure says no, or where the two steps' mallocs have
    /// the same sizes by the same rules (affine with the same value and
    /// slope, or the same scratch rule). Elsewhere (sizes by other rules
    /// that may meet at some batch) the replay compares them.
    pub fn step_plan(&self) -> &StepPlan {
        self.plan.get_or_init(|| {
            let r = &self.base;
            let mut plan = StepPlan::of(r);
            if !plan.contiguous {
                return plan;
            }
            let mut size_of = vec![None; r.requests.len()];
            for &(at, size) in &self.sizes {
                size_of[at as usize] = Some(size);
            }
            for i in 1..plan.steps.len() {
                let (a, b) = (plan.step(i - 1), plan.step(i));
                let same_kind = |_, _, x: Request, y: Request| x.same_kind(&y);
                plan.mirrors[i] = if !r.mirrors_by(a, b, same_kind) {
                    Some(false)
                } else if r.mirrors_by(a, b, |i, j, x, y| {
                    x.same_kind(&y) && size_of[i].is_some() && size_of[i] == size_of[j]
                }) {
                    Some(true)
                } else {
                    None
                };
            }
            for i in 0..plan.steps.len() {
                plan.balanced[i] = Some(r.balanced(plan.step(i)));
            }
            plan
        })
    }

    /// The requests at `batch` (`None` if a size would not be positive, a
    /// scratch rule does not apply there, or a kernel would take another
    /// path there than at the batch sizes the template was fitted on).
    pub fn at(&self, batch: i64) -> Option<Requests> {
        self.requests_at(batch, true)
    }

    /// The requests at `batch`, with the rule of each rule-sized request
    /// when `keep_rules` (a replay needs only the sizes).
    pub fn requests_at(&self, batch: i64, keep_rules: bool) -> Option<Requests> {
        let mut out = Requests {
            requests: self.base.requests.clone(),
            phases: self.base.phases.clone(),
            rules: BTreeMap::new(),
            measured_sizes: false,
            unmeasured: self.base.unmeasured.clone(),
            switches: Vec::new(),
            driver: self.base.driver.clone(),
            first_kernels: self.base.first_kernels,
            first_cublas: self.base.first_cublas,
            host: self.base.host.clone(),
        };
        self.write_at(batch, keep_rules, &mut out).then_some(out)
    }

    /// Make `out`, this template's requests at some batch (from
    /// [`Self::requests_at`] or an earlier call), its requests at `batch`:
    /// only the mallocs' sizes, the rules and the path switches change.
    /// `false` where [`Self::requests_at`] gives `None` (`out` is then
    /// unusable until the next call that succeeds).
    fn write_at(&self, batch: i64, keep_rules: bool, out: &mut Requests) -> bool {
        debug_assert_eq!(out.requests.len(), self.base.requests.len());
        let db = batch - self.b0;
        let switches = self
            .switches
            .iter()
            .map(|t| {
                let w = PathSwitch {
                    count: t.count.at(db),
                    threshold: t.threshold,
                };
                (w.above() == t.above).then_some(At { at: t.at, what: w })
            })
            .collect::<Option<Vec<_>>>();
        // each distinct rule evaluated once
        let evaluated: Option<Vec<(ScratchRule, i64)>> = self
            .rules
            .iter()
            .map(|t| {
                let v: Vec<i64> = t.inputs.iter().map(|a| a.at(db)).collect();
                let rule = t.rule.with_inputs(&v)?;
                let b = rule.bytes(&self.profile)? as i64;
                Some((rule, b))
            })
            .collect();
        let (Some(switches), Some(evaluated)) = (switches, evaluated) else {
            return false;
        };
        out.rules.clear();
        // each malloc resized (frees and kinds stay the base's)
        for &(i, size) in &self.sizes {
            let bytes = match size {
                Size::Affine(s0, per) => s0 as i64 + per * db,
                Size::Rule(k) => {
                    let (rule, b) = &evaluated[k];
                    if keep_rules {
                        out.rules.insert(i as usize, rule.clone());
                    }
                    *b
                }
            };
            if bytes <= 0 {
                return false;
            }
            let r = &mut out.requests[i as usize];
            *r = match *r {
                Request::Scratch(_) => Request::Scratch(bytes as u64),
                _ => Request::Malloc(bytes as u64),
            };
        }
        out.switches = switches;
        true
    }
}

/// Where a sweep keeps the requests of the template cell it replays:
/// the next cell of the same template changes them in place
/// ([`Source::sizes_in`]) instead of copying the template's requests.
#[derive(Debug, Default)]
pub struct SizesBuffer {
    of: Option<(std::rc::Rc<BatchTemplate>, Requests)>,
}

/// Where the requests of one batch size come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// the model ran at this batch
    Model(Requests),
    /// a template fitted on three batch sizes that bracket this one
    Template(std::rc::Rc<BatchTemplate>),
}

impl Source {
    /// The requests at `batch`.
    pub fn requests(&self, batch: i64) -> Option<std::borrow::Cow<'_, Requests>> {
        match self {
            Source::Model(r) => Some(std::borrow::Cow::Borrowed(r)),
            Source::Template(t) => t.at(batch).map(std::borrow::Cow::Owned),
        }
    }

    /// The requests at `batch` as a replay needs them: the sizes (a
    /// template's keep no rules).
    pub fn sizes(&self, batch: i64) -> Option<std::borrow::Cow<'_, Requests>> {
        match self {
            Source::Model(r) => Some(std::borrow::Cow::Borrowed(r)),
            Source::Template(t) => t.requests_at(batch, false).map(std::borrow::Cow::Owned),
        }
    }

    /// The plan of a replay of its requests' steps: a template's, the same
    /// at every batch ([`BatchTemplate::step_plan`]); `None` for a model's
    /// requests (the replay computes it).
    pub fn step_plan(&self) -> Option<&StepPlan> {
        match self {
            Source::Model(_) => None,
            Source::Template(t) => Some(t.step_plan()),
        }
    }

    /// [`Source::sizes`], a template's in `buf`: where `buf` holds the same
    /// template's requests at another batch, only what differs is
    /// rewritten.
    pub fn sizes_in<'a>(&'a self, batch: i64, buf: &'a mut SizesBuffer) -> Option<&'a Requests> {
        match self {
            Source::Model(r) => Some(r),
            Source::Template(t) => {
                match &mut buf.of {
                    Some((held, r)) if std::rc::Rc::ptr_eq(held, t) => {
                        if !t.write_at(batch, false, r) {
                            return None;
                        }
                    }
                    _ => buf.of = Some((t.clone(), t.requests_at(batch, false)?)),
                }
                buf.of.as_ref().map(|(_, r)| r)
            }
        }
    }
}

/// The positions of `sorted[lo..=hi]` at which, by the runs at its two ends
/// (`a` and `b`), a kernel changes path ([`PathSwitch`]): for each switch
/// on different sides at the two ends whose count is integer-affine in the
/// batch through them, the first position on `b`'s side. None when the two
/// runs met different switches.
fn switch_cuts(sorted: &[i64], lo: usize, hi: usize, a: &Requests, b: &Requests) -> Vec<usize> {
    let (ba, bb) = (sorted[lo], sorted[hi]);
    if a.switches.len() != b.switches.len() {
        return Vec::new();
    }
    let mut cuts: Vec<usize> = a
        .switches
        .iter()
        .zip(&b.switches)
        .map(|(x, y)| (x.what, y.what))
        .filter(|(x, y)| x.threshold == y.threshold && x.above() != y.above())
        .filter_map(|(x, y)| {
            let d = y.count - x.count;
            if d % (bb - ba) != 0 {
                return None;
            }
            let per = d / (bb - ba);
            let above = |batch: i64| {
                PathSwitch {
                    count: x.count + per * (batch - ba),
                    threshold: x.threshold,
                }
                .above()
            };
            (lo + 1..=hi).find(|&j| above(sorted[j]) == y.above())
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The requests at every batch of `batches` (a column of equal sequence
/// length), running the model (`run`) as few times as the checks allow.
///
/// 1. Batch 1 always runs (see the module doc).
/// 2. Structure: the model runs at both ends of the range; where their
///    structures differ, it runs on both sides of each batch size at which
///    a kernel's noted path switch flips ([`PathSwitch`]:
///    `embedding_dense_backward` above 3072 indices), and bisects every
///    stretch whose ends still differ, down to adjacent batch sizes.
/// 3. Sizes: each stretch of one structure gets a [`BatchTemplate`] fitted
///    on its ends and an interior run; where the sizes are not affine
///    through the three (a reduction whose workspace follows its launch
///    configuration), the stretch is split there and each half fitted
///    again.
///
/// Returns the sources in the order of `batches`, and how many times the
/// model ran.
pub fn batch_column<E>(
    batches: &[i64],
    profile: &DeviceProfile,
    mut run: impl FnMut(i64) -> Result<Requests, E>,
) -> Result<(Vec<Source>, usize), E> {
    use std::collections::BTreeMap;
    let mut sorted: Vec<i64> = batches.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut ran: BTreeMap<i64, Requests> = BTreeMap::new();
    let mut known: BTreeMap<i64, Source> = BTreeMap::new();
    let mut model = |b: i64, ran: &mut BTreeMap<i64, Requests>| -> Result<(), E> {
        if let std::collections::btree_map::Entry::Vacant(e) = ran.entry(b) {
            e.insert(run(b)?);
        }
        Ok(())
    };
    if sorted.first() == Some(&1) {
        model(1, &mut ran)?;
        sorted.remove(0);
    }
    if !sorted.is_empty() {
        let last = sorted.len() - 1;
        model(sorted[0], &mut ran)?;
        model(sorted[last], &mut ran)?;
        // 2. where the structure changes: run on both sides of each predicted
        //    path switch, bisect what still differs, down to adjacent sizes
        let mut todo = vec![(0, last)];
        let mut cuts = Vec::new();
        while let Some((lo, hi)) = todo.pop() {
            if ran[&sorted[lo]].same_structure(&ran[&sorted[hi]]) {
                continue;
            }
            if hi == lo + 1 {
                cuts.push(hi);
                continue;
            }
            // where the kernels' path switches say the structure changes:
            // run on both sides of each, and check the stretches between
            // like any other
            let predicted = switch_cuts(&sorted, lo, hi, &ran[&sorted[lo]], &ran[&sorted[hi]]);
            if !predicted.is_empty() {
                let mut ends = vec![lo];
                for j in predicted {
                    ends.extend([j - 1, j]);
                }
                ends.push(hi);
                ends.dedup();
                for &e in &ends {
                    model(sorted[e], &mut ran)?;
                }
                todo.extend(ends.windows(2).map(|w| (w[0], w[1])));
                continue;
            }
            let mid = (lo + hi) / 2;
            model(sorted[mid], &mut ran)?;
            todo.push((lo, mid));
            todo.push((mid, hi));
        }
        cuts.sort_unstable();
        // 3. fit each stretch of one structure
        let mut starts = vec![0];
        starts.extend(&cuts);
        let mut ends: Vec<usize> = cuts.iter().map(|c| c - 1).collect();
        ends.push(last);
        let mut todo: Vec<(usize, usize)> = starts.into_iter().zip(ends).collect();
        while let Some((lo, hi)) = todo.pop() {
            model(sorted[lo], &mut ran)?;
            model(sorted[hi], &mut ran)?;
            if hi <= lo + 1 {
                continue;
            }
            // the run nearest the middle, or a new one there
            let target = (lo + hi) / 2;
            let mid = (lo + 1..hi)
                .filter(|i| ran.contains_key(&sorted[*i]))
                .min_by_key(|i| i.abs_diff(target))
                .unwrap_or(target);
            model(sorted[mid], &mut ran)?;
            let fit = BatchTemplate::fit(
                [
                    (sorted[lo], &ran[&sorted[lo]]),
                    (sorted[mid], &ran[&sorted[mid]]),
                    (sorted[hi], &ran[&sorted[hi]]),
                ],
                profile,
            );
            match fit {
                Some(t) => {
                    let t = std::rc::Rc::new(t);
                    for &b in &sorted[lo + 1..hi] {
                        known.insert(b, Source::Template(t.clone()));
                    }
                }
                None => {
                    todo.push((lo, mid));
                    todo.push((mid, hi));
                }
            }
        }
    }
    let runs = ran.len();
    for (b, r) in ran {
        known.insert(b, Source::Model(r));
    }
    let out = batches
        .iter()
        .map(|b| known.get(b).cloned().expect("every batch is known"))
        .collect();
    Ok((out, runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(sizes: &[u64]) -> Requests {
        let mut requests: Vec<Request> = sizes.iter().map(|&s| Request::Malloc(s)).collect();
        requests.push(Request::Free(0));
        Requests {
            phases: vec![PhaseSpan::new("p", 0, requests.len())],
            requests,
            rules: BTreeMap::new(),
            measured_sizes: false,
            unmeasured: Vec::new(),
            driver: Vec::new(),
            first_kernels: None,
            first_cublas: None,
            host: Vec::new(),
            switches: Vec::new(),
        }
    }

    /// Requests of `load` (a parameter) and steps of (mallocs, frees),
    /// phase `forward` then `step`; a free names a malloc by its index.
    fn run_of(steps: &[(&[u64], &[u32])]) -> Requests {
        let mut requests = vec![Request::Malloc(4096)];
        let mut phases = vec![PhaseSpan::new("load", 0, 1)];
        for (i, (mallocs, frees)) in steps.iter().enumerate() {
            let s = requests.len();
            requests.extend(mallocs.iter().map(|&b| Request::Malloc(b)));
            let m = requests.len();
            requests.extend(frees.iter().map(|&n| Request::Free(n)));
            phases.push(PhaseSpan::new(format!("forward{i}"), s, m));
            phases.push(PhaseSpan::new(format!("step{i}"), m, requests.len()));
        }
        Requests {
            requests,
            phases,
            rules: BTreeMap::new(),
            measured_sizes: false,
            unmeasured: Vec::new(),
            driver: Vec::new(),
            first_kernels: None,
            first_cublas: None,
            host: Vec::new(),
            switches: Vec::new(),
        }
    }

    /// Step 1 is step 0 less what step 0 keeps (here malloc 2, a moment
    /// buffer), its frees renamed; the check refuses a step 1 that differs.
    #[test]
    fn the_second_step_is_the_first_less_its_state() {
        let one = run_of(&[(&[100, 200, 300], &[1, 3])]);
        let derived = one.with_derived_second_step().unwrap();
        let two = run_of(&[(&[100, 200, 300], &[1, 3]), (&[100, 300], &[4, 5])]);
        assert_eq!(derived, two);
        assert!(two.second_step_derives());
        // a step 1 that allocates what step 0 did not, or frees otherwise
        let more = run_of(&[(&[100, 200, 300], &[1, 3]), (&[100, 300, 50], &[4, 5, 6])]);
        assert!(!more.second_step_derives());
        let order = run_of(&[(&[100, 200, 300], &[1, 3]), (&[100, 300], &[5, 4])]);
        assert!(!order.second_step_derives());
        // step 0 frees what `load` made: step 1 cannot free it again
        assert!(run_of(&[(&[100], &[0, 1])])
            .with_derived_second_step()
            .is_none());
        // a run of two steps is not derived from
        assert!(two.with_derived_second_step().is_none());
    }

    #[test]
    fn affine_sizes_fit_and_extrapolate() {
        let (a, b, c) = (reqs(&[10, 512]), reqs(&[20, 512]), reqs(&[50, 512]));
        let t = BatchTemplate::fit(
            [(1, &a), (2, &b), (5, &c)],
            &DeviceProfile::h100_torch_2_11(),
        )
        .unwrap();
        assert_eq!(t.at(7).unwrap(), reqs(&[70, 512]));
    }

    /// A buffer reused cell after cell holds what `requests_at` gives at
    /// each batch, after a batch the template refuses too.
    #[test]
    fn a_buffer_holds_a_templates_requests_at_each_batch() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let fit = |runs: [(i64, &Requests); 3]| {
            std::rc::Rc::new(BatchTemplate::fit(runs, &h100).unwrap())
        };
        let t = fit([
            (1, &reqs(&[10, 512])),
            (2, &reqs(&[20, 512])),
            (5, &reqs(&[50, 512])),
        ]);
        let u = fit([
            (1, &reqs(&[7, 64])),
            (2, &reqs(&[14, 64])),
            (3, &reqs(&[21, 64])),
        ]);
        let (st, su) = (Source::Template(t.clone()), Source::Template(u.clone()));
        let mut buf = SizesBuffer::default();
        for b in [3, 7, 4, 1] {
            assert_eq!(st.sizes_in(b, &mut buf), t.requests_at(b, false).as_ref());
        }
        // batch 0 would allocate 0 bytes
        assert!(st.sizes_in(0, &mut buf).is_none());
        assert_eq!(st.sizes_in(6, &mut buf), t.requests_at(6, false).as_ref());
        assert_eq!(su.sizes_in(4, &mut buf), u.requests_at(4, false).as_ref());
        assert_eq!(st.sizes_in(2, &mut buf), t.requests_at(2, false).as_ref());
    }

    #[test]
    fn anything_else_is_refused() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let fit = |runs: [(i64, &Requests); 3]| BatchTemplate::fit(runs, &h100);
        let (a, b) = (reqs(&[10, 512]), reqs(&[20, 512]));
        // not affine at the third point (a rounding, say)
        assert!(fit([(1, &a), (2, &b), (5, &reqs(&[56, 512]))]).is_none());
        // another structure
        assert!(fit([(1, &a), (2, &b), (5, &reqs(&[50]))]).is_none());
        // not an integer slope
        let c = reqs(&[15, 512]);
        assert!(fit([(1, &a), (3, &c), (5, &reqs(&[20, 512]))]).is_none());
        // two equal batch sizes
        assert!(fit([(1, &a), (1, &a), (5, &c)]).is_none());
    }

    #[test]
    fn a_scratch_follows_its_rule_or_keeps_its_size() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let sort = |n: i64| ScratchRule::RadixSortPairs {
            n,
            key_bytes: 8,
            value_bytes: 8,
            end_bit: 64,
        };
        let run = |n: i64, rule: bool| {
            let bytes = sort(n).bytes(&h100).unwrap();
            Requests {
                requests: vec![Request::Malloc(n as u64 * 8), Request::Scratch(bytes)],
                phases: vec![PhaseSpan::new("p", 0, 2)],
                rules: if rule {
                    BTreeMap::from([(1, sort(n))])
                } else {
                    BTreeMap::new()
                },
                measured_sizes: false,
                unmeasured: Vec::new(),
                driver: Vec::new(),
                first_kernels: None,
                first_cublas: None,
                host: Vec::new(),
                switches: Vec::new(),
            }
        };
        let b = |k: i64| k * 3000;
        let t = BatchTemplate::fit(
            [
                (2, &run(b(2), true)),
                (3, &run(b(3), true)),
                (9, &run(b(9), true)),
            ],
            &h100,
        )
        .unwrap();
        assert_eq!(t.at(5).unwrap(), run(b(5), true));
        // without its rule, a scratch that changes size is refused
        let without = [
            (2, &run(b(2), false)),
            (3, &run(b(3), false)),
            (9, &run(b(9), false)),
        ];
        assert!(BatchTemplate::fit(without, &h100).is_none());
    }

    #[test]
    fn step_one_repeats_when_it_is_closed() {
        use Request::*;
        let two = Requests {
            // load: a parameter; step 0: state (kept) and a temporary;
            // step 1: a temporary
            requests: vec![
                Malloc(8),
                Malloc(16),
                Malloc(4),
                Free(2),
                Malloc(4),
                Free(3),
            ],
            phases: vec![
                PhaseSpan::new("load", 0, 1),
                PhaseSpan::new("step0", 1, 4),
                PhaseSpan::new("step1", 4, 6),
            ],
            rules: BTreeMap::new(),
            measured_sizes: false,
            unmeasured: Vec::new(),
            driver: Vec::new(),
            first_kernels: None,
            first_cublas: None,
            host: Vec::new(),
            switches: Vec::new(),
        };
        let four = two.repeat_steps(4).unwrap();
        assert_eq!(four.requests[6..], [Malloc(4), Free(4), Malloc(4), Free(5)]);
        let names: Vec<&str> = four.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["load", "step0", "step1", "step2", "step3"]);
        assert_eq!(four.phases[4], PhaseSpan::new("step3", 8, 10));
        // step 1 frees what step 0 made: not repeatable
        let mut open = two.clone();
        open.requests[5] = Free(1);
        assert!(open.repeat_steps(3).is_none());
        // step 1 keeps what it made: not repeatable
        let mut keeps = two.clone();
        keeps.requests[5] = Free(2);
        keeps.requests[3] = Free(3);
        assert!(keeps.repeat_steps(3).is_none());
    }

    #[test]
    fn replay_stops_at_an_out_of_memory() {
        let r = reqs(&[1 << 30, 1 << 30]);
        let profile = DeviceProfile::h100_torch_2_11();
        let mut a = fresh_allocator(&profile, &AllocatorConfig::default(), Some(0.02), false);
        let out = replay(&r, &mut a);
        let oom = out.oom.unwrap();
        assert_eq!(
            (oom.phase.as_str(), oom.bytes, oom.request),
            ("p", 1 << 30, 1)
        );
        assert_eq!(out.peak_allocated_bytes, 1 << 30);
    }

    /// A column whose structure changes where a kernel's count passes its
    /// threshold: the runs at the ends name the batch, the model runs on
    /// both sides of it instead of bisecting, and every batch is exact.
    #[test]
    fn a_path_switch_names_the_batch_where_the_structure_changes() {
        // `4 * batch` indices; more than 12 take a path with one more buffer
        let run = |b: i64, threshold: i64| {
            let mut requests = vec![Request::Malloc(b as u64 * 512)];
            if 4 * b > 12 {
                requests.push(Request::Malloc(b as u64 * 1024));
            }
            Requests {
                phases: vec![PhaseSpan::new("p", 0, requests.len())],
                requests,
                rules: BTreeMap::new(),
                measured_sizes: false,
                unmeasured: Vec::new(),
                driver: Vec::new(),
                first_kernels: None,
                first_cublas: None,
                host: Vec::new(),
                switches: vec![At {
                    at: 0,
                    what: PathSwitch {
                        count: 4 * b,
                        threshold,
                    },
                }],
            }
        };
        let h100 = DeviceProfile::h100_torch_2_11();
        let batches: Vec<i64> = (1..=40).collect();
        let column = |threshold: i64| {
            let mut ran = Vec::new();
            let (sources, runs) = batch_column(&batches, &h100, |b| {
                ran.push(b);
                Ok::<_, ()>(run(b, threshold))
            })
            .unwrap();
            for (&b, s) in batches.iter().zip(&sources) {
                assert!(*s.requests(b).unwrap() == run(b, threshold), "batch {b}");
            }
            ran.sort_unstable();
            assert_eq!(ran.len(), runs);
            ran
        };
        // 1, both ends, both sides of the switch, then one run inside each
        // stretch that has an inside
        assert_eq!(column(12), [1, 2, 3, 4, 22, 40]);
        // a switch that says nothing of this change (on one side at both
        // ends): bisection finds it, more runs, the same requests
        let blind = column(1000);
        assert!(blind.len() > 6 && blind.contains(&3) && blind.contains(&4));
    }
}
