//! The template's steps served with the small and large pools apart.
//!
//! A decode step of a large model makes thousands of small-pool requests
//! (norms, projections of one token, masks) and a few hundred large ones
//! (the cache's `cat`s, the logits). The two pools share nothing but the
//! device: a small request that finds a free block touches no large block,
//! and the reverse. So from the first template step on, the large requests
//! go to the twin's large pool apart ([`vramscope_alloc::LargePool`]: the
//! same rules on the blocks of its segments and a short sorted list of free
//! ones, without the twin's statistics, history and address index) and the
//! small ones to its small pool apart ([`vramscope_alloc::SmallPool`], the
//! same rules on a plain list of free blocks); the large pool's allocated
//! and requested bytes are summed here. The small pool's work is memoised:
//! each step is cut into
//! chunks (one per layer where the template repeats with a period, the
//! layers' requests being the same), and a chunk's small requests, started
//! from a small pool whose free blocks are those of a start seen before and
//! freeing blocks at the same addresses, place every block as they did then
//! and leave the same free blocks (the placements are a function of these
//! alone). Such a chunk is not served again: its blocks' addresses and the
//! pool it leaves are taken from the first time, and only its large
//! requests are served. Allocated bytes of the small pool are its
//! blocks' rounded sizes (a small block is split whenever 512 bytes or more
//! remain, and every small size is a multiple of 512), so the peaks within
//! a chunk are sums over its requests, computed once per chunk.
//!
//! Large mallocs of a chunk whose blocks its later large requests free in
//! the reverse order, with no other large request between (a static
//! cache's repeated keys and values, an attention's scratch), are not made
//! where free blocks fit them: such a nest leaves the large pool as it was
//! ([`CachingAllocator::fit_for_a_moment`], [`LargePool::fit_for_a_moment`]),
//! so only the blocks' bytes, allocated until their frees, count. Where one
//! does not fit, the open ones are made then, in their order: the large
//! pool has served nothing since the first of them, so they take the blocks
//! they would have taken in their turn.
//!
//! A request that needs a new segment gets it from the allocator twin in
//! its turn ([`CachingAllocator::malloc_in_new_segment`]: the driver's
//! placement and the limits are the twin's), and the pool apart adds it; a
//! chunk that makes a small segment is served request by request and is not
//! memoised. Anything that would make the allocator look at the pools it
//! no longer holds (an allocation
//! that fails and frees cached blocks, garbage collection, an
//! out-of-memory) abandons the whole attempt, and the caller serves every
//! request on the allocator twin from the start ([`Aborted`]).

use std::collections::HashMap;

type Map<K, V> = FastMap<K, V>;
use std::ops::Range;

use vramscope_alloc::{
    get_allocation_size, inthash::FastMap, CachingAllocator, FreeBlock, Handle, LargeBlock,
    LargePool, Moment, SmallPool, StatType, SMALL_BUFFER, SMALL_SIZE,
};

use super::{Freed, LastRequest, Serving, Step, StepRequest, StepRule};
use crate::estimate::StepFigures;

/// The attempt to serve with the small pool apart was given up; the caller
/// serves every request on the allocator twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Aborted;

/// How many chunks were taken from an earlier one and how many were served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ApartCounts {
    pub reused: usize,
    pub served: usize,
    /// small segments made
    pub segments: usize,
    /// large blocks made for a moment, not on the twin
    pub moments: usize,
    /// instances of a changing chunk taken from its last one ([`Apart::patched`])
    pub patched: usize,
    /// chunks whose large requests were all made for a moment, taken from
    /// the last time ([`NestMemo`])
    pub nests_again: usize,
    /// chunks served and not memoised ([`MEMO_TRIES`])
    pub unmemoised: usize,
    /// memo entries dropped ([`SWEEP`])
    pub dropped: usize,
    /// blocks made for a moment whose fit was an earlier answer ([`Apart::fit`])
    pub fits_again: usize,
    /// chunk contents dropped, no chunk's last ([`Apart::let_go`])
    pub contents_dropped: usize,
}

/// The large requests of a chunk content with given bytes, all made for
/// a moment the last time (so the large pool was left as it was): the
/// count of the pool's changes then, the most allocated bytes noted at
/// them above the large pool's and the chunk's small bytes at its start
/// (`i64::MIN`: none), the offset where first, and the mallocs.
/// [`LargePool::fit_for_a_moment`] is a function of the pool's free
/// blocks, the size and the open blocks; with the pool unchanged since, no
/// block open at the chunk's start and the same content and bytes, every
/// request finds what it found then. (Noting the most at its first place
/// sets the highest allocated and where it was first reached as noting
/// each does.)
struct NestMemo {
    changes: u64,
    most: i64,
    at: u32,
    mallocs: usize,
}

impl NestMemo {
    /// From `larges`, all made for a moment, the bytes made for a moment
    /// after each being `moment_after`.
    fn of(changes: u64, larges: &[LargeAt], moment_after: &[i64]) -> NestMemo {
        let mut m = NestMemo {
            changes,
            most: i64::MIN,
            at: 0,
            mallocs: 0,
        };
        let mut moment = 0;
        let mut see = |bytes: i64, at: u32| {
            if bytes > m.most {
                m.most = bytes;
                m.at = at;
            }
        };
        for (la, &after) in larges.iter().zip(moment_after) {
            if la.gap_max != i64::MIN {
                see(la.gap_max + moment, la.gap_at);
            }
            moment = after;
            if la.malloc {
                see(la.small + moment, la.off);
            }
        }
        m.mallocs = larges.iter().filter(|l| l.malloc).count();
        m
    }
}

/// A block made since step `FROM`: in the large pool apart (its name
/// there), or in the small pool apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blk {
    Large(u32),
    Apart {
        addr: u64,
        size: u64,
        orig: u64,
    },
    /// a large block made and freed at once, not on the twin
    /// ([`CachingAllocator::fit_for_a_moment`]): its bytes
    Moment(u64),
    /// (not made, or freed within its chunk)
    None,
}

/// The most blocks made before a chunk that it frees, for the chunk to be
/// memoised.
const MAX_IN: usize = 6;

/// A chunk whose last this many memo entries were never taken makes no
/// more (but one in this many times it is served): most starts of a step's
/// first chunks come once, and keeping each one's state and entry costs
/// memory (new pages). A chunk not memoised is served again, as it was the
/// first time, so what is kept changes nothing but the work.
const MEMO_TRIES: u32 = 32;

/// Every this many steps, the memo entries neither made nor taken in the
/// last this many steps are dropped, and the states no entry names (but
/// the run's): a step's first layers start from a new state every step and
/// take their entries within it, and what is kept costs memory (new pages).
/// A chunk whose entry was dropped is served as it was the first time.
const SWEEP: usize = 32;

/// What a memoised chunk did: the state after it, its outputs' addresses
/// (in `memo_out`), the chunk that made it, and the last step it was made
/// or taken.
#[derive(Debug, Clone)]
struct MemoEntry {
    after: u32,
    out: Range<u32>,
    maker: u32,
    last: usize,
}

/// A chunk's content, the pool's state at its start and the addresses of
/// the blocks it frees that were made before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    content: u32,
    state: u32,
    ins: [u64; MAX_IN],
}

/// Odd constants, one for each word of a [`MemoKey`] (xxHash's and
/// MurmurHash3's).
const KEY_MUL: [u64; MAX_IN + 1] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x85eb_ca77_c2b2_ae63,
    0x27d4_eb2f_1656_67c5,
    0xff51_afd7_ed55_8ccd,
    0xc4ce_b9fe_1a85_ec53,
];

impl std::hash::Hash for MemoKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // (each word times its own constant, the products summed, then one
        // write: the multiplies run side by side, where a write a word
        // chains them)
        let mut x =
            ((u64::from(self.content) << 32) | u64::from(self.state)).wrapping_mul(KEY_MUL[0]);
        for (&a, &m) in self.ins.iter().zip(&KEY_MUL[1..]) {
            x = x.wrapping_add(a.wrapping_mul(m));
        }
        h.write_u64(x);
    }
}

/// A hash of a chunk's requests ([`Apart::content_ids`]).
fn ops_hash(ops: &[Op]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<vramscope_alloc::inthash::IntHasher>::default().hash_one(ops)
}

/// A hash of a pool's free blocks, word by word.
fn state_hash(f: &[FreeBlock]) -> u64 {
    use std::hash::Hasher;
    let mut h = vramscope_alloc::inthash::IntHasher::default();
    for b in f {
        h.write_u64((u64::from(b.size) << 32) | u64::from(b.segment));
        h.write_u64(b.addr);
    }
    h.finish()
}

/// A small-pool request of a chunk, or a large one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    /// a small malloc of this rounded size
    Malloc { size: u64 },
    /// a free of the chunk's input `i`, a small block of `size`
    FreeIn { i: u32, size: u64 },
    /// a free of the chunk's small malloc `local`
    FreeLocal { local: u32 },
    /// the template's request at this offset in the chunk, a large one;
    /// `nest`: a malloc whose block the chunk frees with no other large
    /// request between but mallocs whose blocks are freed before it (in the
    /// reverse order), or that free
    Large { off: u32, malloc: bool, nest: bool },
}

/// A large request of a chunk and the small pool's bytes before it.
#[derive(Debug, Clone, Copy)]
struct LargeAt {
    off: u32,
    malloc: bool,
    nest: bool,
    /// the most small bytes (from the chunk's start) after a small malloc
    /// since the previous large request, and the offset of the first such
    /// malloc (`i64::MIN`: none)
    gap_max: i64,
    gap_at: u32,
    /// the small bytes at this request
    small: i64,
}

/// A chunk's requests in its own terms, and what they do to the figures.
struct Content {
    ops: Vec<Op>,
    /// its small mallocs that outlive it, by local index
    outputs: Vec<u32>,
    /// the small allocated bytes it adds
    delta: i64,
    larges: Vec<LargeAt>,
    /// as `LargeAt` for the small mallocs after its last large request
    tail_max: i64,
    tail_at: u32,
}

impl Content {
    fn of(ops: Vec<Op>) -> Content {
        let mut sizes: Vec<u64> = Vec::new();
        let mut freed: Vec<bool> = Vec::new();
        let mut larges = Vec::new();
        let (mut cur, mut gap_max, mut gap_at) = (0i64, i64::MIN, 0u32);
        for (at, op) in ops.iter().enumerate() {
            match *op {
                Op::Malloc { size } => {
                    sizes.push(size);
                    freed.push(false);
                    cur += size as i64;
                    if cur > gap_max {
                        gap_max = cur;
                        gap_at = at as u32;
                    }
                }
                Op::FreeIn { size, .. } => {
                    cur -= size as i64;
                }
                Op::FreeLocal { local } => {
                    freed[local as usize] = true;
                    cur -= sizes[local as usize] as i64;
                }
                Op::Large { off, malloc, nest } => {
                    larges.push(LargeAt {
                        off,
                        malloc,
                        nest,
                        gap_max,
                        gap_at,
                        small: cur,
                    });
                    gap_max = i64::MIN;
                }
            }
        }
        let outputs = (0..sizes.len() as u32)
            .filter(|&l| !freed[l as usize])
            .collect();
        Content {
            outputs,
            delta: cur,
            larges,
            tail_max: gap_max,
            tail_at: gap_at,
            ops,
        }
    }
}

/// A chunk at one step: its content, the blocks made before it that it
/// frees (the step back, the template malloc's ring place, the bytes and
/// the rounded size), the template mallocs of its outputs (with their
/// sizes), and the requested bytes it adds to the small pool.
#[derive(Clone)]
struct Inst {
    content: u32,
    inputs: Vec<(usize, usize, u64, u64)>,
    outputs: Vec<(usize, u64, u64)>,
    /// for each op, its offset in the chunk
    offsets: Vec<u32>,
    req_delta: i64,
    /// its requests whose bytes change with the step
    varying: Vec<Varying>,
    /// its large requests in order, as [`Apart::large`] serves them, and
    /// [`Content::larges`] (one place for a chunk's few)
    larges: Vec<(Req, LargeAt)>,
    /// its content's [`Content::tail_max`], [`Content::tail_at`] and
    /// [`Content::delta`] (a reused chunk's figures without its content)
    tail: (i64, u32, i64),
}

/// A request of a chunk whose bytes change with the step: malloc `r` of
/// the step `back` steps before, its bytes and rounded size in an
/// instance, and what they enter there.
#[derive(Clone, Copy)]
struct Varying {
    back: usize,
    r: usize,
    bytes: u64,
    size: u64,
    role: Role,
}

#[derive(Clone, Copy)]
enum Role {
    /// a small malloc, output `out` of the chunk (`u32::MAX`: none)
    Malloc { out: u32 },
    /// the free of a small malloc of the chunk
    FreeLocal,
    /// the free of the chunk's input `i`
    FreeIn { i: u32 },
    /// a large request
    Large,
}

/// A cut of the template step.
struct Chunk {
    range: Range<usize>,
    /// its instance when no size in it changes with the step
    fixed: Option<Box<Inst>>,
    /// the content of its last instance
    last: Option<u32>,
    /// its last instance, when its sizes change with the step
    prev: Option<Box<Inst>>,
    /// with a fixed instance whose bytes do not change with the step: the
    /// id of its content and its large mallocs' bytes ([`Apart::nests`])
    nest_key: Option<u32>,
    /// the memo entries it made since one of them was last taken, and the
    /// times it was served ([`MEMO_TRIES`])
    since_hit: u32,
    served: u32,
}

/// The chunks of the template step.
struct Plan {
    chunks: Vec<Chunk>,
    /// each template request's malloc index (for mallocs)
    malloc_of: Vec<usize>,
    /// each template request, as [`Apart::large`] serves it
    reqs: Vec<Req>,
    /// each template malloc's place in the ring ([`Self::place`])
    places: Vec<u32>,
}

/// A template request in one place, as [`Apart::large`] serves it: the
/// template's step and its malloc's place in the ring ([`Plan::place`]),
/// one read for each large request.
#[derive(Debug, Clone, Copy)]
enum Req {
    /// a malloc at ring place `d`, of `size + slope * ahead` bytes
    /// ([`Step::Malloc`])
    Malloc { d: u32, size: u64, slope: i64 },
    /// malloc `r` at ring place `d`, a library's scratch
    /// ([`Serving::bytes_of`])
    Scratch { r: u32, d: u32 },
    /// a free of the malloc at ring place `d` of the step `back` steps
    /// before
    Free { back: u32, d: u32 },
}

/// The small pool apart, its memo, and the figures the twin no longer keeps.
pub(super) struct Apart {
    pool: SmallPool,
    /// the large pool apart, and its allocated and requested bytes
    large: LargePool,
    large_bytes: i64,
    large_req: i64,
    /// the states of the pool seen at chunk starts, and their ids
    states: Vec<Option<Vec<FreeBlock>>>,
    /// the ids of the states not dropped ([`Self::sweep`])
    kept_states: Vec<u32>,
    /// the ids of the states by [`state_hash`]
    state_ids: Map<u64, Vec<u32>>,
    /// the state the run is in (`None`: the pool has changed since), and the
    /// one `pool` holds
    state: Option<u32>,
    loaded: Option<u32>,
    contents: Vec<Content>,
    /// the ids of the contents by the hash of their requests
    content_ids: Map<u64, Vec<u32>>,
    /// for each content, the chunks whose last instance it is
    /// ([`Self::instance`]: one no chunk holds is dropped)
    holders: Vec<u32>,
    /// (content, state, input addresses) -> what the chunk did
    memo: FastMap<MemoKey, MemoEntry>,
    memo_out: Vec<u64>,
    /// the address and size of each small malloc of the chunk served last
    /// ([`Self::serve`]; one buffer for all)
    locals: Vec<(u64, u64)>,
    plan: Plan,
    /// the blocks of the last steps, each with its step: malloc `r` of step
    /// `k` at `d * slots + k % slots`, `d` its place ([`Plan::place`]: a
    /// block's malloc and its free in the next step side by side, and the
    /// few mallocs whose blocks outlive their chunk together)
    ring: Vec<(usize, Blk)>,
    slots: usize,
    before: HashMap<usize, Blk>,
    /// the small pool's allocated and requested bytes
    small: i64,
    small_req: i64,
    /// the highest allocated since the last reset of the peaks
    peak: i64,
    /// the bytes of the large blocks made for a moment, not on the twin,
    /// and not freed yet; each one's (step, template malloc, requested
    /// bytes), and the block found
    moment: i64,
    open: Vec<(usize, usize, u64)>,
    fits: Vec<Moment>,
    /// the answers of [`Self::fit`] that hold: (bytes, open blocks, answer)
    fit_memo: Vec<(u64, Vec<Moment>, Option<Moment>)>,
    /// the ids of (content, large mallocs' bytes) of the fixed chunks whose
    /// bytes do not change with the step, and each one's large requests the
    /// last time
    nest_keys: HashMap<(u32, Vec<u64>), u32>,
    nests: Vec<Option<NestMemo>>,
    /// the twin's counts of retries, out-of-memory errors and frees of
    /// segments when the attempt began
    marks: (i64, i64, i64),
    pub counts: ApartCounts,
}

fn marks(a: &CachingAllocator) -> (i64, i64, i64) {
    let s = a.stats();
    (s.num_alloc_retries, s.num_ooms, s.num_device_free)
}

/// The period of the template's layers: `(offset, period)` where request
/// `q` and `q + period` are the same for every `q` in the repeating stretch
/// that starts at `offset`.
fn period(tpl: &[Step], malloc_of: &[usize]) -> Option<(usize, usize)> {
    // each request, its frees by distance in mallocs
    let sig: Vec<(u8, u64, i64)> = tpl
        .iter()
        .enumerate()
        .map(|(q, s)| match *s {
            Step::Malloc { size, slope } => (0, size, slope),
            Step::Scratch { rule } => (1, rule as u64, 0),
            Step::Free { back, r } => (2, back as u64, malloc_of[q] as i64 - r as i64),
        })
        .collect();
    let n = sig.len();
    let same = |a: usize, b: usize| sig[a] == sig[b];
    // the longest stretch of three periods or more through the middle
    let mut best: Option<(usize, usize, usize)> = None; // (run, offset, period)
    for q0 in [n / 2, n / 3] {
        for p in 8..=n / 3 {
            if q0 + p >= n || !same(q0, q0 + p) {
                continue;
            }
            let mut a = q0;
            while a > 0 && same(a - 1, a - 1 + p) {
                a -= 1;
            }
            let mut b = q0;
            while b + p < n && same(b, b + p) {
                b += 1;
            }
            let run = b - a;
            if run >= 2 * p && best.is_none_or(|x| run > x.0) {
                best = Some((run, a, p));
                if 2 * run >= n {
                    // (its multiples repeat over less: the period found)
                    break;
                }
            }
        }
    }
    best.map(|(_, a, p)| (a, p))
}

impl Apart {
    /// The small pool apart from the twin `s` holds at the start of step
    /// `k`, and the template's chunks; `None` where the small pool is not
    /// plain ([`CachingAllocator::small_pool`]) or a block is not found.
    pub(super) fn start(s: &Serving, k: usize) -> Option<Apart> {
        let pool = s.alloc.small_pool(0)?;
        let large = s.alloc.large_pool(0)?;
        let large_ids: HashMap<u64, u32> = large.allocated_blocks().collect();
        // the small blocks now live, by address: (size, requested)
        let mut small_blocks: HashMap<u64, (u64, u64)> = HashMap::new();
        for seg in s.alloc.snapshot().iter().filter(|g| !g.is_large) {
            for b in seg.blocks.iter().filter(|b| b.allocated) {
                small_blocks.insert(b.address, (b.size, b.requested_size));
            }
        }
        let blk = |h: Handle| match small_blocks.get(&h.addr()) {
            Some(&(size, orig)) => Blk::Apart {
                addr: h.addr(),
                size,
                orig,
            },
            None => match large_ids.get(&h.addr()) {
                Some(&id) => Blk::Large(id),
                None => Blk::None,
            },
        };
        // (a power of two long: a step's slot by a mask, not a division)
        let slots = s.ring.len().next_power_of_two();
        let mallocs = s.ring.iter().map(|m| m.handles.len()).max().unwrap_or(0);
        let mut ring = vec![(usize::MAX, Blk::None); mallocs.max(s.malloc_q.len()) * slots];
        let plan = Plan::of(s)?;
        for m in s.ring.iter().filter(|m| !m.handles.is_empty()) {
            for (r, &h) in m.handles.iter().enumerate() {
                ring[plan.place(r) * slots + (m.step & (slots - 1))] = (m.step, blk(h));
            }
        }
        let before = s.before.iter().map(|(&j, &h)| (j, blk(h))).collect();
        let st = s.alloc.stats();
        let mut a = Apart {
            pool,
            large,
            large_bytes: st.allocated_bytes.get(StatType::LargePool).current,
            large_req: st.requested_bytes.get(StatType::LargePool).current,
            states: Vec::new(),
            kept_states: Vec::new(),
            state_ids: Map::default(),
            state: None,
            loaded: None,
            contents: Vec::new(),
            content_ids: Map::default(),
            holders: Vec::new(),
            memo: FastMap::default(),
            memo_out: Vec::new(),
            locals: Vec::new(),
            plan,
            ring,
            slots,
            before,
            small: st.allocated_bytes.get(StatType::SmallPool).current,
            small_req: st.requested_bytes.get(StatType::SmallPool).current,
            peak: st.allocated_bytes.all().peak,
            moment: 0,
            open: Vec::new(),
            fits: Vec::new(),
            fit_memo: Vec::new(),
            nest_keys: HashMap::new(),
            nests: Vec::new(),
            marks: marks(&s.alloc),
            counts: ApartCounts::default(),
        };
        // the chunks whose sizes do not change with the step
        let last_model = s.m.spans.len();
        for c in 0..a.plan.chunks.len() {
            let ahead = (k - last_model) as i64;
            if a.fixed(s, c, ahead) {
                let inst = a.instance(s, c, ahead)?;
                let range = a.plan.chunks[c].range.clone();
                if range_steady(s, range.clone()) {
                    // (its large mallocs' bytes, in order)
                    let bytes = a.contents[inst.content as usize]
                        .larges
                        .iter()
                        .filter(|l| l.malloc)
                        .map(|l| s.bytes_of(a.plan.malloc_of[range.start + l.off as usize], ahead))
                        .collect::<Option<Vec<u64>>>()?;
                    let n = a.nest_keys.len() as u32;
                    let id = *a.nest_keys.entry((inst.content, bytes)).or_insert(n);
                    a.nests.resize_with(a.nest_keys.len(), || None);
                    a.plan.chunks[c].nest_key = Some(id);
                }
                a.plan.chunks[c].fixed = Some(Box::new(inst));
            }
        }
        Some(a)
    }

    /// Whether chunk `c`'s small requests and sizes are those of every step
    /// from `ahead` on: no small size changes with the step, and no size
    /// that grows is small at `ahead` (a large one stays large).
    fn fixed(&self, s: &Serving, c: usize, ahead: i64) -> bool {
        let fixed = |r: usize, ahead: i64| match s.malloc_q.get(r).map(|&q| s.tpl[q]) {
            Some(Step::Malloc { slope: 0, .. }) => true,
            Some(Step::Malloc { slope, .. }) if slope > 0 => s
                .bytes_of(r, ahead)
                .is_some_and(|b| s.alloc.round_size(b) > SMALL_SIZE),
            _ => false,
        };
        self.plan.chunks[c].range.clone().all(|q| match s.tpl[q] {
            Step::Free { back, r } => fixed(r, ahead - back as i64),
            _ => fixed(self.plan.malloc_of[q], ahead),
        })
    }

    /// Chunk `c` at `ahead` steps after the model's last.
    fn instance(&mut self, s: &Serving, c: usize, ahead: i64) -> Option<Inst> {
        let range = self.plan.chunks[c].range.clone();
        let mut ops = Vec::with_capacity(range.len());
        let mut offsets = Vec::with_capacity(range.len());
        let mut inputs = Vec::new();
        let mut locals: Vec<(usize, u64, u64)> = Vec::new(); // (r, size, orig)
                                                             // the large mallocs not freed yet: (op, template malloc)
        let mut nest: Vec<(usize, usize)> = Vec::new();
        // (the chunk's mallocs are template mallocs `r0..`: by `r - r0`)
        let r0 = range
            .clone()
            .find(|&q| !matches!(s.tpl[q], Step::Free { .. }))
            .map_or(0, |q| self.plan.malloc_of[q]);
        let mut local_of: Vec<u32> = Vec::new();
        let mut req = 0i64;
        let mut varying = Vec::new();
        let varies = |r: usize| {
            !matches!(
                s.malloc_q.get(r).map(|&q| s.tpl[q]),
                Some(Step::Malloc { slope: 0, .. })
            )
        };
        for q in range.clone() {
            let off = (q - range.start) as u32;
            let op = match s.tpl[q] {
                Step::Malloc { .. } | Step::Scratch { .. } => {
                    let r = self.plan.malloc_of[q];
                    let bytes = s.bytes_of(r, ahead)?;
                    let size = s.alloc.round_size(bytes);
                    if varies(r) {
                        let role = match size <= SMALL_SIZE {
                            true => Role::Malloc {
                                out: locals.len() as u32,
                            },
                            false => Role::Large,
                        };
                        varying.push(Varying {
                            back: 0,
                            r,
                            bytes,
                            size,
                            role,
                        });
                    }
                    if size <= SMALL_SIZE {
                        if local_of.len() <= r - r0 {
                            local_of.resize(r - r0 + 1, u32::MAX);
                        }
                        local_of[r - r0] = locals.len() as u32;
                        locals.push((r, size, bytes));
                        req += bytes as i64;
                        Op::Malloc { size }
                    } else {
                        nest.push((ops.len(), r));
                        Op::Large {
                            off,
                            malloc: true,
                            nest: false,
                        }
                    }
                }
                Step::Free { back, r } => {
                    let bytes = s.bytes_of(r, ahead - back as i64)?;
                    let size = s.alloc.round_size(bytes);
                    let local = r
                        .checked_sub(r0)
                        .and_then(|i| local_of.get(i))
                        .filter(|&&l| back == 0 && l != u32::MAX);
                    if varies(r) {
                        let role = match local {
                            Some(_) => Role::FreeLocal,
                            None if size <= SMALL_SIZE => Role::FreeIn {
                                i: inputs.len() as u32,
                            },
                            None => Role::Large,
                        };
                        varying.push(Varying {
                            back,
                            r,
                            bytes,
                            size,
                            role,
                        });
                    }
                    match local {
                        Some(&l) => {
                            req -= locals[l as usize].2 as i64;
                            Op::FreeLocal { local: l }
                        }
                        None if size <= SMALL_SIZE => {
                            inputs.push((back, self.plan.place(r), bytes, size));
                            req -= bytes as i64;
                            Op::FreeIn {
                                i: inputs.len() as u32 - 1,
                                size,
                            }
                        }
                        None => {
                            // (the free of the last open malloc closes it;
                            // another free leaves the open ones out)
                            let closes = back == 0 && nest.last().is_some_and(|&(_, t)| t == r);
                            if closes {
                                if let Some((i, _)) = nest.pop() {
                                    if let Op::Large { nest: n, .. } = &mut ops[i] {
                                        *n = true;
                                    }
                                }
                            } else {
                                nest.clear();
                            }
                            Op::Large {
                                off,
                                malloc: false,
                                nest: closes,
                            }
                        }
                    }
                }
            };
            ops.push(op);
            offsets.push(off);
        }
        // (most often its last content: compared, not hashed)
        let last = self.plan.chunks[c].last;
        let id = match last.filter(|&l| self.contents[l as usize].ops == ops) {
            Some(id) => id,
            None => {
                let ids = self.content_ids.entry(ops_hash(&ops)).or_default();
                let id = match ids.iter().find(|&&i| self.contents[i as usize].ops == ops) {
                    Some(&id) => id,
                    None => {
                        let id = self.contents.len() as u32;
                        ids.push(id);
                        self.contents.push(Content::of(ops));
                        self.holders.push(0);
                        id
                    }
                };
                self.holders[id as usize] += 1;
                if let Some(l) = last {
                    self.let_go(l);
                }
                id
            }
        };
        self.plan.chunks[c].last = Some(id);
        let outs = &self.contents[id as usize].outputs;
        let outputs = outs
            .iter()
            .map(|&l| {
                let (r, size, bytes) = locals[l as usize];
                (self.plan.place(r), size, bytes)
            })
            .collect();
        // (a malloc's local index to its output's)
        for v in &mut varying {
            if let Role::Malloc { out } = &mut v.role {
                *out = outs
                    .iter()
                    .position(|&l| l == *out)
                    .map_or(u32::MAX, |j| j as u32);
            }
        }
        let content = &self.contents[id as usize];
        let larges = content
            .larges
            .iter()
            .map(|l| (self.plan.reqs[range.start + l.off as usize], *l))
            .collect();
        let tail = (content.tail_max, content.tail_at, content.delta);
        Some(Inst {
            content: id,
            inputs,
            outputs,
            offsets,
            req_delta: req,
            varying,
            larges,
            tail,
        })
    }

    /// A chunk's last content is no longer `id`: where no chunk's is, its
    /// requests and figures are dropped (a chunk's changing sizes grow with
    /// the step, so it does not come back; kept, each one's pages are new
    /// memory). Its id is not given again: a memo entry of it is never taken
    /// and goes at the next sweep ([`Self::sweep`]).
    fn let_go(&mut self, id: u32) {
        let n = &mut self.holders[id as usize];
        *n -= 1;
        if *n > 0 {
            return;
        }
        let h = ops_hash(&self.contents[id as usize].ops);
        if let Some(ids) = self.content_ids.get_mut(&h) {
            ids.retain(|&i| i != id);
            if ids.is_empty() {
                self.content_ids.remove(&h);
            }
        }
        self.contents[id as usize] = Content::of(Vec::new());
        self.counts.contents_dropped += 1;
    }

    /// Chunk `c`'s instance `inst` of an earlier step at `ahead` steps
    /// after the model's last, where none of its changing sizes rounds
    /// otherwise (then its content is the same: only the requested bytes
    /// change); `None` where one does.
    fn patched(&self, s: &Serving, mut inst: Box<Inst>, ahead: i64) -> Option<Box<Inst>> {
        for v in &mut inst.varying {
            let bytes = s.bytes_of(v.r, ahead - v.back as i64)?;
            if s.alloc.round_size(bytes) != v.size {
                return None;
            }
            let d = bytes as i64 - v.bytes as i64;
            v.bytes = bytes;
            match v.role {
                Role::Malloc { out } => {
                    inst.req_delta += d;
                    if let Some(o) = inst.outputs.get_mut(out as usize) {
                        o.2 = bytes;
                    }
                }
                Role::FreeLocal => inst.req_delta -= d,
                Role::FreeIn { i } => {
                    inst.req_delta -= d;
                    inst.inputs[i as usize].2 = bytes;
                }
                Role::Large => {}
            }
        }
        Some(inst)
    }

    /// The malloc at ring place `d` ([`Plan::place`]) of step `k` made `b`.
    #[inline]
    fn put(&mut self, k: usize, d: usize, b: Blk) {
        let i = d * self.slots + (k & (self.slots - 1));
        if i >= self.ring.len() {
            self.ring
                .resize((d + 1) * self.slots, (usize::MAX, Blk::None));
        }
        self.ring[i] = (k, b);
    }

    /// What the malloc at ring place `d` of step `k` made, if the ring
    /// still holds it.
    #[inline]
    fn made_in(&self, k: usize, d: usize) -> Option<Blk> {
        self.ring
            .get(d * self.slots + (k & (self.slots - 1)))
            .filter(|e| e.0 == k)
            .map(|e| e.1)
    }

    /// The pool in the state the run is in.
    fn pool(&mut self) -> &mut SmallPool {
        if self.state != self.loaded {
            if let Some(s) = self.state {
                // (kept: the run's state is never dropped, [`Self::sweep`])
                if let Some(f) = &self.states[s as usize] {
                    self.pool.set_free_blocks(f);
                }
            }
            self.loaded = self.state;
        }
        self.state = None;
        self.loaded = None;
        &mut self.pool
    }

    /// Drop the memo entries neither made nor taken since `window` steps
    /// before step `k`, and the states no kept entry names ([`SWEEP`]). The
    /// run's state is loaded into the pool first, so the run names none; an
    /// entry whose state after was dropped is not taken ([`Self::chunk`]).
    #[inline(never)]
    fn sweep(&mut self, k: usize, window: usize) {
        #[cfg(test)]
        if tests::ALWAYS_MEMO.get() {
            return;
        }
        self.pool();
        let n = self.memo.len();
        self.memo.retain(|_, e| e.last + window >= k);
        self.counts.dropped += n - self.memo.len();
        let mut named = vec![false; self.states.len()];
        for (key, e) in &self.memo {
            named[key.state as usize] = true;
            #[cfg(test)]
            if window == 0 {
                // (the entries' states after dropped too)
                continue;
            }
            named[e.after as usize] = true;
        }
        let mut kept = std::mem::take(&mut self.kept_states);
        kept.retain(|&id| {
            if named[id as usize] {
                return true;
            }
            if let Some(f) = self.states[id as usize].take() {
                let h = state_hash(&f);
                if let Some(ids) = self.state_ids.get_mut(&h) {
                    ids.retain(|&i| i != id);
                    if ids.is_empty() {
                        self.state_ids.remove(&h);
                    }
                }
            }
            false
        });
        self.kept_states = kept;
    }

    /// The id of the state the run is in, where it was kept.
    #[inline]
    fn find_state(&mut self) -> Option<u32> {
        match self.state {
            Some(_) => self.state,
            None => self.look_up_state(),
        }
    }

    /// [`Self::find_state`] where the run's state is not known: the pool's
    /// free blocks looked up.
    #[inline(never)]
    fn look_up_state(&mut self) -> Option<u32> {
        let f = self.pool.free_blocks();
        let id = self
            .state_ids
            .get(&state_hash(f))
            .and_then(|ids| {
                ids.iter()
                    .find(|&&i| self.states[i as usize].as_deref() == Some(f))
            })
            .copied();
        if id.is_some() {
            self.state = id;
            self.loaded = id;
        }
        id
    }

    /// The id of the state the pool is in, kept if it was not.
    fn settle(&mut self) -> u32 {
        if let Some(id) = self.find_state() {
            return id;
        }
        let f = self.pool.free_blocks();
        let id = self.states.len() as u32;
        self.states.push(Some(f.to_vec()));
        self.kept_states.push(id);
        self.state_ids.entry(state_hash(f)).or_default().push(id);
        self.state = Some(id);
        self.loaded = Some(id);
        id
    }

    /// Note the allocated bytes after a malloc at `at`.
    fn note(&mut self, s: &mut Serving, total: i64, at: StepRequest) {
        #[cfg(test)]
        if tests::CHUNK_MOST.get().is_none_or(|m| total > m.0) {
            tests::CHUNK_MOST.set(Some((total, at.step, at.request)));
        }
        if total > s.best_allocated {
            s.best_allocated = total;
            s.best_at = Some(at);
        }
        self.peak = self.peak.max(total);
    }

    /// The large pool's allocated bytes (with a block made for a moment).
    fn large_now(&self) -> i64 {
        self.large_bytes + self.moment
    }

    /// A large malloc of `bytes` on the large pool apart, or in a new
    /// segment the twin makes in its turn
    /// ([`CachingAllocator::malloc_in_new_segment`]).
    fn large_malloc(&mut self, s: &mut Serving, bytes: u64) -> Result<LargeBlock, Aborted> {
        let size = s.alloc.round_size(bytes);
        let b = match self.large.malloc(size, bytes) {
            Some(b) => b,
            None => {
                let h = s
                    .alloc
                    .malloc_in_new_segment(bytes, 0)
                    .map_err(|_| Aborted)?;
                let seg = get_allocation_size(size, s.alloc.config().large_segment_size);
                self.large
                    .add_segment(h.addr(), seg, size, bytes)
                    .ok_or(Aborted)?
            }
        };
        self.large_bytes += b.bytes as i64;
        self.large_req += bytes as i64;
        Ok(b)
    }

    /// A malloc of `bytes` at `at`, in the pool it belongs to; `Ok(true)` when
    /// it made a small segment.
    fn malloc(
        &mut self,
        s: &mut Serving,
        bytes: u64,
        at: StepRequest,
    ) -> Result<(Blk, bool), Aborted> {
        let size = s.alloc.round_size(bytes);
        let mut made = false;
        let b = if size <= SMALL_SIZE {
            let (addr, got) = match self.pool().malloc(size) {
                Some(x) => x,
                None => {
                    let h = s
                        .alloc
                        .malloc_in_new_segment(bytes, 0)
                        .map_err(|_| Aborted)?;
                    self.pool
                        .add_segment(h.addr(), SMALL_BUFFER, size)
                        .ok_or(Aborted)?;
                    self.counts.segments += 1;
                    made = true;
                    (h.addr(), size)
                }
            };
            if got != size {
                return Err(Aborted);
            }
            self.small += size as i64;
            self.small_req += bytes as i64;
            Blk::Apart {
                addr,
                size,
                orig: bytes,
            }
        } else {
            Blk::Large(self.large_malloc(s, bytes)?.id)
        };
        let total = self.small + self.large_now();
        self.note(s, total, at);
        Ok((b, made))
    }

    fn free(&mut self, b: Blk) -> Result<(), Aborted> {
        match b {
            Blk::Large(id) => {
                let (bytes, req) = self.large.free(id).ok_or(Aborted)?;
                self.large_bytes -= bytes as i64;
                self.large_req -= req as i64;
                Ok(())
            }
            Blk::Apart { addr, size, orig } => {
                self.pool().free(addr, size);
                self.small -= size as i64;
                self.small_req -= orig as i64;
                Ok(())
            }
            Blk::Moment(_) | Blk::None => Err(Aborted),
        }
    }

    fn figures(&self, s: &Serving) -> StepFigures {
        let st = s.alloc.stats();
        let reserved = st.reserved_bytes.all();
        StepFigures {
            allocated_bytes: self.small + self.large_now(),
            peak_allocated_bytes: self.peak,
            reserved_bytes: reserved.current,
            peak_reserved_bytes: reserved.peak,
            requested_bytes: self.small_req + self.large_req,
        }
    }

    fn end_step(&mut self, s: &mut Serving) {
        let f = self.figures(s);
        s.earlier_peaks = s.earlier_peaks.with(&f);
        s.steps.push(f);
        s.alloc.reset_peak_stats();
        self.peak = f.allocated_bytes;
    }

    /// Whether the twin has done nothing that looks at the small pool it no
    /// longer holds.
    fn check(&self, s: &Serving) -> Result<(), Aborted> {
        if marks(&s.alloc) == self.marks {
            Ok(())
        } else {
            Err(Aborted)
        }
    }

    /// Step `k`, `ahead` steps after the model's last, from the template.
    pub(super) fn template_step(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
    ) -> Result<(), Aborted> {
        if k.is_multiple_of(SWEEP) {
            self.sweep(k, SWEEP);
        }
        for c in 0..self.plan.chunks.len() {
            #[cfg(test)]
            if tests::SWEEP_EACH_CHUNK.get() {
                self.sweep(k, 0);
            }
            let start = self.plan.chunks[c].range.start;
            if start == s.forward_end {
                self.end_step(s);
            }
            let (inst, fixed) = match self.plan.chunks[c].fixed.take() {
                Some(i) => (i, true),
                None => {
                    let prev = self.plan.chunks[c].prev.take();
                    let inst = match prev.and_then(|p| self.patched(s, p, ahead)) {
                        Some(i) => {
                            self.counts.patched += 1;
                            i
                        }
                        None => Box::new(self.instance(s, c, ahead).ok_or(Aborted)?),
                    };
                    (inst, false)
                }
            };
            let r = self.chunk(s, k, ahead, (c, fixed), &inst);
            #[cfg(test)]
            tests::NOTES.with_borrow_mut(|n| {
                if let Some(n) = n {
                    n.push(tests::CHUNK_MOST.take());
                }
            });
            match fixed {
                true => self.plan.chunks[c].fixed = Some(inst),
                false => self.plan.chunks[c].prev = Some(inst),
            }
            r?;
        }
        self.check(s)
    }

    /// Chunk `c` of step `k` (`fixed`: its instance is the same every
    /// step).
    fn chunk(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
        (c, fixed): (usize, bool),
        inst: &Inst,
    ) -> Result<(), Aborted> {
        let start = self.plan.chunks[c].range.start;
        let cid = inst.content as usize;
        let mut ins = [u64::MAX; MAX_IN];
        for (i, &(back, r, bytes, in_size)) in inst.inputs.iter().enumerate() {
            let b = self
                .made_in(k.checked_sub(back).ok_or(Aborted)?, r)
                .ok_or(Aborted)?;
            match b {
                Blk::Apart { addr, size, orig } if size == in_size && orig == bytes => {
                    if i < MAX_IN {
                        ins[i] = addr;
                    }
                }
                _ => return Err(Aborted),
            }
        }
        let state = self.find_state();
        let mut key = MemoKey {
            content: inst.content,
            state: state.unwrap_or(u32::MAX),
            ins,
        };
        if inst.inputs.len() <= MAX_IN && state.is_some() {
            // (not where its state after was dropped)
            if let Some(e) = self
                .memo
                .get_mut(&key)
                .filter(|e| self.states[e.after as usize].is_some())
            {
                e.last = k;
                let (after, out, maker) = (e.after, e.out.clone(), e.maker);
                self.plan.chunks[maker as usize].since_hit = 0;
                self.counts.reused += 1;
                let nests = self.plan.chunks[c].nest_key.filter(|_| fixed);
                return self.reuse(s, k, ahead, (start, nests), inst, after, out);
            }
        }
        let ch = &mut self.plan.chunks[c];
        ch.served += 1;
        let memoable = inst.inputs.len() <= MAX_IN;
        let memoise =
            memoable && (ch.since_hit < MEMO_TRIES || ch.served.is_multiple_of(MEMO_TRIES));
        #[cfg(test)]
        let memoise = memoise || memoable && tests::ALWAYS_MEMO.get();
        if memoise {
            // (its start kept: the state before it is served)
            key.state = self.settle();
        } else if memoable {
            self.counts.unmemoised += 1;
        }
        self.counts.served += 1;
        let ops = std::mem::take(&mut self.contents[cid].ops);
        // (the buffer of the last chunk served)
        let mut locals = std::mem::take(&mut self.locals);
        locals.clear();
        let served = self.serve(s, k, ahead, start, inst, (&ops, &mut locals));
        self.contents[cid].ops = ops;
        let made = served?;
        // the outputs into the ring, and their addresses after the memo's
        // (kept there where the chunk is memoised)
        let outputs = std::mem::take(&mut self.contents[cid].outputs);
        let from = self.memo_out.len();
        for (&l, o) in outputs.iter().zip(&inst.outputs) {
            let (addr, size) = locals[l as usize];
            self.memo_out.push(addr);
            self.put(
                k,
                o.0,
                Blk::Apart {
                    addr,
                    size,
                    orig: o.2,
                },
            );
        }
        self.contents[cid].outputs = outputs;
        self.locals = locals;
        if memoise && !made {
            let after = self.settle();
            let e = MemoEntry {
                after,
                out: from as u32..self.memo_out.len() as u32,
                maker: c as u32,
                last: k,
            };
            self.memo.insert(key, e);
            self.plan.chunks[c].since_hit += 1;
        } else {
            self.memo_out.truncate(from);
        }
        Ok(())
    }

    /// A chunk's requests `ops` served one by one: the small ones on the
    /// pool apart (their sizes are the content's, their requested bytes the
    /// instance's), the large ones on the twin. The address and size of each
    /// small malloc are pushed to `locals`; whether a small segment was made.
    #[allow(clippy::too_many_arguments)]
    fn serve(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
        start: usize,
        inst: &Inst,
        (ops, locals): (&[Op], &mut Vec<(u64, u64)>),
    ) -> Result<bool, Aborted> {
        let mut made = false;
        let mut large = self.large_now();
        // (the index of the next large request)
        let mut j = 0;
        self.pool();
        for (op, &off) in ops.iter().zip(&inst.offsets) {
            match *op {
                Op::Malloc { size } => {
                    let q = start + off as usize;
                    let addr = match self.pool.malloc(size) {
                        Some((addr, got)) if got == size => addr,
                        Some(_) => return Err(Aborted),
                        None => {
                            let bytes = s.bytes_of(self.plan.malloc_of[q], ahead).ok_or(Aborted)?;
                            let h = s
                                .alloc
                                .malloc_in_new_segment(bytes, 0)
                                .map_err(|_| Aborted)?;
                            self.pool
                                .add_segment(h.addr(), SMALL_BUFFER, size)
                                .ok_or(Aborted)?;
                            self.counts.segments += 1;
                            made = true;
                            h.addr()
                        }
                    };
                    self.small += size as i64;
                    locals.push((addr, size));
                    let total = self.small + large;
                    if total > self.peak || total > s.best_allocated {
                        self.note(
                            s,
                            total,
                            StepRequest {
                                step: k,
                                request: q,
                            },
                        );
                    }
                }
                Op::FreeIn { i, size } => {
                    // (its block checked by [`Self::chunk`])
                    let (back, r, _, _) = inst.inputs[i as usize];
                    let Some(Blk::Apart { addr, .. }) = self.made_in(k - back, r) else {
                        return Err(Aborted);
                    };
                    self.pool.free(addr, size);
                    self.small -= size as i64;
                }
                Op::FreeLocal { local } => {
                    let (addr, size) = locals[local as usize];
                    self.pool.free(addr, size);
                    self.small -= size as i64;
                }
                Op::Large { malloc, nest, .. } => {
                    let q = start + off as usize;
                    self.large(s, k, ahead, inst.larges[j].0, nest)?;
                    j += 1;
                    large = self.large_now();
                    if malloc {
                        let total = self.small + large;
                        self.note(
                            s,
                            total,
                            StepRequest {
                                step: k,
                                request: q,
                            },
                        );
                    }
                }
            }
        }
        self.small_req += inst.req_delta;
        Ok(made)
    }

    /// A chunk whose small requests were served before from the same state
    /// (`nests`: its [`Chunk::nest_key`], where its instance is fixed).
    #[allow(clippy::too_many_arguments)]
    fn reuse(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
        (start, nests): (usize, Option<u32>),
        inst: &Inst,
        after: u32,
        out: Range<u32>,
    ) -> Result<(), Aborted> {
        let s0 = self.small;
        let n = inst.larges.len();
        // (a fixed chunk's large requests all made for a moment last time,
        // the pool unchanged since and nothing open: the same again)
        match nests.filter(|_| n > 0 && self.open.is_empty()) {
            Some(key) => self.nests(s, k, ahead, (start, s0), inst, key)?,
            None => {
                for l in &inst.larges {
                    self.reuse_large(s, k, ahead, (start, s0), l)?;
                }
            }
        }
        self.reuse_tail(s, k, (start, s0), inst, after, out)
    }

    /// A large request `(req, la)` of a reused chunk ([`Inst::larges`]; read
    /// where it lies, not copied), with the peaks before and at it.
    #[inline(always)]
    fn reuse_large(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
        (start, s0): (usize, i64),
        (req, la): &(Req, LargeAt),
    ) -> Result<(), Aborted> {
        if la.gap_max != i64::MIN {
            let total = s0 + la.gap_max + self.large_now();
            let at = StepRequest {
                step: k,
                request: start + la.gap_at as usize,
            };
            self.note(s, total, at);
        }
        let q = start + la.off as usize;
        self.large(s, k, ahead, *req, la.nest)?;
        if la.malloc {
            let total = s0 + la.small + self.large_now();
            self.note(
                s,
                total,
                StepRequest {
                    step: k,
                    request: q,
                },
            );
        }
        Ok(())
    }

    /// The large requests of a reused chunk `inst` whose
    /// [`Chunk::nest_key`] is `key`, nothing open: taken from the last time
    /// where the large pool has not changed since ([`NestMemo`]), else
    /// served and remembered where all were made for a moment (then only
    /// their most allocated is noted, once).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn nests(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
        (start, s0): (usize, i64),
        inst: &Inst,
        key: u32,
    ) -> Result<(), Aborted> {
        let cid = inst.content as usize;
        let changes = self.large.changes();
        #[cfg(test)]
        if tests::NO_NEST_MEMO.get() {
            self.nests[key as usize] = None;
        }
        if let Some(m) = self.nests[key as usize]
            .as_ref()
            .filter(|m| m.changes == changes)
        {
            let (most, at, mallocs) = (m.most, m.at, m.mallocs);
            if most != i64::MIN {
                let total = s0 + most + self.large_bytes;
                let at = StepRequest {
                    step: k,
                    request: start + at as usize,
                };
                self.note(s, total, at);
            }
            self.counts.moments += mallocs;
            self.counts.nests_again += 1;
            return Ok(());
        }
        let n = self.contents[cid].larges.len();
        let mut moment_after = Vec::with_capacity(n);
        for l in &inst.larges {
            self.reuse_large(s, k, ahead, (start, s0), l)?;
            moment_after.push(self.moment);
        }
        if self.large.changes() == changes && self.open.is_empty() {
            let larges = &self.contents[cid].larges;
            self.nests[key as usize] = Some(NestMemo::of(changes, larges, &moment_after));
        }
        Ok(())
    }

    /// The rest of [`Self::reuse`] after the large requests: the peak of
    /// the small mallocs after the last, the outputs, the figures.
    #[inline(always)]
    fn reuse_tail(
        &mut self,
        s: &mut Serving,
        k: usize,
        (start, s0): (usize, i64),
        inst: &Inst,
        after: u32,
        out: Range<u32>,
    ) -> Result<(), Aborted> {
        let (tail_max, tail_at, delta) = inst.tail;
        if tail_max != i64::MIN {
            let total = s0 + tail_max + self.large_now();
            let at = StepRequest {
                step: k,
                request: start + tail_at as usize,
            };
            self.note(s, total, at);
        }
        for (i, o) in inst.outputs.iter().enumerate() {
            let addr = self.memo_out[out.start as usize + i];
            self.put(
                k,
                o.0,
                Blk::Apart {
                    addr,
                    size: o.1,
                    orig: o.2,
                },
            );
        }
        self.small = s0 + delta;
        self.small_req += inst.req_delta;
        self.state = Some(after);
        Ok(())
    }

    /// The template's large request `req` of step `k`; `nest`: one of a nest
    /// (then a malloc is made for a moment, not on the twin, where
    /// [`CachingAllocator::fit_for_a_moment`] finds it a block).
    #[inline(always)]
    fn large(
        &mut self,
        s: &mut Serving,
        k: usize,
        ahead: i64,
        req: Req,
        nest: bool,
    ) -> Result<(), Aborted> {
        let (r, bytes) = match req {
            Req::Malloc { d, size, slope } => (
                d as usize,
                u64::try_from(size as i128 + slope as i128 * ahead as i128).ok(),
            ),
            Req::Scratch { r, d } => (d as usize, s.bytes_of(r as usize, ahead)),
            Req::Free { back, d } => {
                return self.large_free(s, k, (back as usize, d as usize), nest)
            }
        };
        let bytes = bytes.ok_or(Aborted)?;
        let moment = match nest {
            true => self.fit(s, bytes),
            false => None,
        };
        let b = match moment {
            Some(m) => {
                self.moment += m.bytes as i64;
                self.counts.moments += 1;
                self.open.push((k, r, bytes));
                self.fits.push(m);
                Blk::Moment(m.bytes)
            }
            None => {
                self.make_open(s)?;
                Blk::Large(self.large_malloc(s, bytes)?.id)
            }
        };
        self.put(k, r, b);
        Ok(())
    }

    /// The template's large free of malloc `r` of the step `back` steps
    /// before step `k` ([`Self::large`]).
    #[inline]
    fn large_free(
        &mut self,
        s: &mut Serving,
        k: usize,
        (back, r): (usize, usize),
        nest: bool,
    ) -> Result<(), Aborted> {
        let k0 = k.checked_sub(back).ok_or(Aborted)?;
        match self.made_in(k0, r) {
            // (the last open one)
            Some(Blk::Moment(m))
                if nest && self.open.last().is_some_and(|o| (o.0, o.1) == (k0, r)) =>
            {
                self.open.pop();
                self.fits.pop();
                self.moment -= m as i64;
                Ok(())
            }
            Some(b @ Blk::Large(_)) => {
                self.make_open(s)?;
                self.free(b)
            }
            _ => Err(Aborted),
        }
    }

    /// [`LargePool::fit_for_a_moment`] of `bytes` with the open blocks,
    /// remembered while no free block at or below the one it found came or
    /// went ([`LargePool::take_low`]; none found: while the free blocks stay
    /// the same): a static cache's repeated keys and values ask the same of
    /// every layer, a dynamic cache's attention scratch a block below its
    /// `cat`s'.
    fn fit(&mut self, s: &Serving, bytes: u64) -> Option<Moment> {
        if let Some(low) = self.large.take_low() {
            #[cfg(test)]
            let low = match tests::FIT_WHILE_SAME.get() {
                true => (0, 0),
                false => low,
            };
            self.fit_memo.retain(|e| e.2.is_some_and(|m| m.took < low));
        }
        if let Some(e) = self
            .fit_memo
            .iter()
            .find(|e| e.0 == bytes && e.1 == self.fits)
        {
            self.counts.fits_again += 1;
            return e.2;
        }
        let m = self
            .large
            .fit_for_a_moment(s.alloc.round_size(bytes), &self.fits);
        if self.fit_memo.len() == 8 {
            self.fit_memo.clear();
        }
        self.fit_memo.push((bytes, self.fits.clone(), m));
        m
    }

    /// Make the blocks made for a moment and not freed yet on the large
    /// pool, in their order (each takes the block it was found).
    #[inline]
    fn make_open(&mut self, s: &mut Serving) -> Result<(), Aborted> {
        match self.open.is_empty() {
            true => Ok(()),
            false => self.make_open_now(s),
        }
    }

    /// [`Self::make_open`] where blocks are open.
    #[inline(never)]
    fn make_open_now(&mut self, s: &mut Serving) -> Result<(), Aborted> {
        // (taken and given back: its buffer serves the next nest)
        let mut open = std::mem::take(&mut self.open);
        for (i, &(k, r, bytes)) in open.iter().enumerate() {
            let b = self.large_malloc(s, bytes)?;
            if b.addr != self.fits[i].took.1 {
                return Err(Aborted);
            }
            self.put(k, r, Blk::Large(b.id));
        }
        open.clear();
        self.open = open;
        self.fits.clear();
        self.moment = 0;
        Ok(())
    }

    /// A static cache's last step `k`, request by request.
    pub(super) fn last_step(
        &mut self,
        s: &mut Serving,
        k: usize,
        reqs: &[LastRequest],
        forward_end: usize,
    ) -> Result<(), Aborted> {
        let mut made = 0;
        for (q, r) in reqs.iter().enumerate() {
            if q == forward_end {
                self.end_step(s);
            }
            match *r {
                LastRequest::Malloc(bytes) => {
                    let (b, _) = self.malloc(
                        s,
                        bytes,
                        StepRequest {
                            step: k,
                            request: q,
                        },
                    )?;
                    self.put(k, self.plan.place(made), b);
                    made += 1;
                }
                LastRequest::Free { back, r } => {
                    let b = self
                        .made_in(k.checked_sub(back).ok_or(Aborted)?, self.plan.place(r))
                        .ok_or(Aborted)?;
                    self.free(b)?;
                }
            }
        }
        self.check(s)
    }

    /// `generate()`'s frees after its loop, whose last step is `last`, and
    /// the figures then.
    pub(super) fn end(
        &mut self,
        s: &mut Serving,
        last: usize,
        end: &[Freed],
    ) -> Result<StepFigures, Aborted> {
        for e in end {
            let b = match *e {
                Freed::InStep { back, r } => {
                    self.made_in(last.checked_sub(back).ok_or(Aborted)?, self.plan.place(r))
                }
                Freed::Before(j) => self.before.get(&j).copied(),
            };
            self.free(b.ok_or(Aborted)?)?;
        }
        self.check(s)?;
        Ok(self.figures(s))
    }
}

impl Plan {
    /// The template's chunks: one per period of its repeating stretch (a
    /// layer), the same length before and after it, and a cut where each
    /// iteration's forward returns.
    fn of(s: &Serving) -> Option<Plan> {
        let tpl = s.tpl;
        let mut malloc_of = Vec::with_capacity(tpl.len());
        let mut mallocs = 0;
        for t in tpl {
            malloc_of.push(match *t {
                Step::Free { .. } => mallocs,
                _ => {
                    mallocs += 1;
                    mallocs - 1
                }
            });
        }
        let n = tpl.len();
        let (a, p) = period(tpl, &malloc_of).unwrap_or((0, 64));
        let mut cuts: Vec<usize> = (0..=n)
            .filter(|&q| q >= a && (q - a) % p == 0 || q < a && (a - q) % p == 0)
            .collect();
        cuts.extend([0, n, s.forward_end.min(n)]);
        cuts.sort_unstable();
        cuts.dedup();
        // the mallocs whose blocks may outlive their chunk (freed in a later
        // step or chunk, or large) first in the ring, the others after them
        let chunk_of = |q: usize| cuts.partition_point(|&c| c <= q);
        let mut outlive = vec![false; mallocs];
        for (q, t) in tpl.iter().enumerate() {
            match *t {
                Step::Malloc { size, slope } => {
                    outlive[malloc_of[q]] |= slope != 0 || size > SMALL_SIZE
                }
                Step::Scratch { .. } => outlive[malloc_of[q]] = true,
                Step::Free { back, r } => {
                    let made = s.malloc_q.get(r).copied();
                    if let Some(o) = outlive.get_mut(r) {
                        *o |= back > 0 || made.is_none_or(|m| chunk_of(m) != chunk_of(q));
                    }
                }
            }
        }
        let mut places = vec![0u32; mallocs];
        let mut d = 0u32;
        u32::try_from(mallocs).ok()?;
        for first in [true, false] {
            for (r, _) in outlive.iter().enumerate().filter(|(_, &o)| o == first) {
                places[r] = d;
                d += 1;
            }
        }
        let place = |r: usize| places.get(r).map_or(r as u32, |&d| d);
        let reqs = tpl
            .iter()
            .zip(&malloc_of)
            .map(|(t, &r)| {
                Some(match *t {
                    Step::Malloc { size, slope } => Req::Malloc {
                        d: place(r),
                        size,
                        slope,
                    },
                    Step::Scratch { .. } => Req::Scratch {
                        r: u32::try_from(r).ok()?,
                        d: place(r),
                    },
                    Step::Free { back, r } => Req::Free {
                        back: u32::try_from(back).ok()?,
                        d: place(r),
                    },
                })
            })
            .collect::<Option<Vec<Req>>>()?;
        let chunks = cuts
            .windows(2)
            .map(|w| Chunk {
                range: w[0]..w[1],
                fixed: None,
                last: None,
                prev: None,
                nest_key: None,
                since_hit: 0,
                served: 0,
            })
            .collect();
        Some(Plan {
            chunks,
            malloc_of,
            reqs,
            places,
        })
    }

    /// Malloc `r`'s place in the ring: a permutation of the template's
    /// mallocs (`r` itself past them) that puts those whose blocks outlive
    /// their chunk first, so that a step's entries lie in a few pages.
    #[inline]
    fn place(&self, r: usize) -> usize {
        self.places.get(r).map_or(r, |&d| d as usize)
    }
}

/// Whether no malloc of the template's requests `range` changes its bytes
/// with the step.
fn range_steady(s: &Serving, range: Range<usize>) -> bool {
    s.tpl[range].iter().all(|t| match *t {
        Step::Malloc { slope, .. } => slope == 0,
        Step::Scratch { rule } => s
            .rules
            .get(rule)
            .is_some_and(|r| r.per_step.iter().all(|&p| p == 0)),
        Step::Free { .. } => true,
    })
}

impl Serving<'_> {
    /// The bytes of template malloc `r` at `ahead` steps after the model's
    /// last.
    pub(super) fn bytes_of(&self, r: usize, ahead: i64) -> Option<u64> {
        let q = self.malloc_q.get(r).copied()?;
        match self.tpl[q] {
            Step::Malloc { size, slope } => {
                u64::try_from(size as i128 + slope as i128 * ahead as i128).ok()
            }
            Step::Scratch { rule } => {
                let rule: &StepRule = self.rules.get(rule)?;
                rule.bytes_at(ahead, self.profile?)
            }
            Step::Free { .. } => None,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    /// Allocated bytes noted, and where: (bytes, step, request).
    pub type Most = (i64, usize, usize);

    thread_local! {
        /// The most allocated bytes noted on this thread since the last
        /// chunk of a template step, and where first: (bytes, step, request).
        pub static CHUNK_MOST: std::cell::Cell<Option<Most>> =
            const { std::cell::Cell::new(None) };
        /// Where set, each template step's chunk's [`CHUNK_MOST`] in turn.
        pub static NOTES: std::cell::RefCell<Option<Vec<Option<Most>>>> =
            const { std::cell::RefCell::new(None) };
        /// Whether every chunk served is memoised ([`super::MEMO_TRIES`])
        /// and no entry dropped ([`super::SWEEP`]).
        pub static ALWAYS_MEMO: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Whether the memo is swept before every chunk, of all but this
        /// step's entries ([`super::SWEEP`]).
        pub static SWEEP_EACH_CHUNK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Whether [`super::Apart::fit`]'s answers are kept only while the
        /// free blocks stay the same.
        pub static FIT_WHILE_SAME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        /// Whether [`super::NestMemo`]s are never taken.
        pub static NO_NEST_MEMO: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    use super::{LargeAt, NestMemo};

    /// Noting a [`NestMemo`]'s most once at its place leaves the highest
    /// allocated and where it was first reached as noting each request's
    /// bytes in turn (before each, the small mallocs since the last; at each
    /// malloc, with the bytes made for a moment after it) does.
    #[test]
    fn noting_a_nests_most_once_is_noting_each() {
        let mut rng = vramscope_testkit::XorShift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5000 {
            let n = 1 + rng.next() % 6;
            let (mut larges, mut after, mut moment) = (Vec::new(), Vec::new(), 0i64);
            for j in 0..n as u32 {
                let malloc = rng.next().is_multiple_of(2);
                moment = match malloc {
                    true => moment + (rng.next() % 4) as i64,
                    false => (moment - (rng.next() % 3) as i64).max(0),
                };
                // (small values: ties)
                let gap_max = match rng.next() % 3 {
                    0 => i64::MIN,
                    _ => (rng.next() % 8) as i64,
                };
                larges.push(LargeAt {
                    off: 2 * j + 1,
                    malloc,
                    nest: true,
                    gap_max,
                    gap_at: 2 * j,
                    small: (rng.next() % 8) as i64,
                });
                after.push(moment);
            }
            let best0 = (rng.next() % 12) as i64;
            let (mut best, mut at, mut m) = (best0, u32::MAX, 0);
            for (la, &a) in larges.iter().zip(&after) {
                if la.gap_max != i64::MIN && la.gap_max + m > best {
                    (best, at) = (la.gap_max + m, la.gap_at);
                }
                m = a;
                if la.malloc && la.small + m > best {
                    (best, at) = (la.small + m, la.off);
                }
            }
            let memo = NestMemo::of(0, &larges, &after);
            let once = match memo.most != i64::MIN && memo.most > best0 {
                true => (memo.most, memo.at),
                false => (best0, u32::MAX),
            };
            assert_eq!((best, at), once);
            assert_eq!(memo.mallocs, larges.iter().filter(|l| l.malloc).count());
        }
    }
}
