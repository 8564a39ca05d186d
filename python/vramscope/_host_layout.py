"""Where a process's host mappings lie around its CUDA context when OpenMP's worker pool started
before the context (a model built on the host whose `trunc_normal_` runs `erfinv_` over more than
32,768 elements), and where the context then goes: docs/driver-placement.md, rule 17 (session 62).

`Capture._map_pool_layout` lays it out at the context's creation (`DriverVa::host_map_at`);
these are the rule's steps, in MiB over one address space, checked against the H100 maps of
`validation/run/probes/jj04_omp_pool_maps_s62.py` (`fixtures/run/probes/jj04_omp_pool_maps_s62_h100.txt`,
`python/tests/test_host_layout.py`)."""

from __future__ import annotations

import itertools

#: a thread's stack: 8 MiB and a 4 KiB guard page (glibc's `allocate_stack`, the default
#: RLIMIT_STACK), mapped as host memory is (rule 15)
STACK = 8 + 4 / 1024
#: glibc's HEAP_MAX_SIZE on 64-bit (2 * DEFAULT_MMAP_THRESHOLD_MAX = 64 MiB, malloc/arena.c):
#: `new_heap` maps twice that and keeps the aligned half
HEAP = 64.0
#: the CUDA context's mappings, in the order it makes them (the H100's maps, control and pool
#: alike: session 62): a library of 2.19 MiB of file segments and 13.34 MiB of zeroed data (one
#: span), a driver thread's stack, the driver's 18.05 MiB reservation with 20 shared pages mapped
#: into its top (18.13 MiB; rule 7 each); the driver thread's arena (rule 15); a 32 MiB chunk of
#: shared files (rules 3 and 1); a 1 and a 2 MiB mapping (rule 7); then its 512 MiB range
CONTEXT_HOST = (2.192 + 13.336, STACK, 18.131)
CONTEXT_SMALL = (1.0, 2.0)
CONTEXT_CHUNK = 32.0
CONTEXT_RANGE = 512.0
#: the context's range ends 96 MiB over its anchor B (rule 4)
CONTEXT_ABOVE_ANCHOR = 96.0
#: a chunk takes a released range at least this much larger than itself (rule 3's `GAP_SLACK`)
GAP_SLACK = 32.0
_EPS = 1e-6


def _up(x: float, a: float) -> float:
    return -(-x // a) * a


def _down(x: float, a: float) -> float:
    return (x // a) * a


class AddressSpace:
    """The part of a process's address space below its mappings' top, in MiB: mmap places top-down
    (the kernel's `unmapped_area_topdown`: the highest free range that holds the request, at its
    top, else directly below the lowest mapping)."""

    def __init__(self, mappings):
        #: (lo, hi, name), any order
        self.maps = [tuple(m) for m in mappings]
        #: glibc's `aligned_heap_area`: where `new_heap` tries first (set when its last 128 MiB
        #: mapping came aligned)
        self.heap_hint: float | None = None

    def lowest(self) -> float:
        return min(lo for lo, _, _ in self.maps)

    def free_ranges(self):
        """The free ranges between mappings, highest first."""
        spans = sorted((lo, hi) for lo, hi, _ in self.maps)
        out = []
        for (_, a), (b, _) in itertools.pairwise(spans):
            if b - a > _EPS:
                out.append((a, b))
        return out[::-1]

    def is_free(self, lo: float, hi: float) -> bool:
        return all(hi <= a + _EPS or lo >= b - _EPS for a, b, _ in self.maps)

    def where(self, length: float) -> float:
        """Where mmap(length) goes (rule 7): the top of the highest free range that holds it."""
        for a, b in self.free_ranges():
            if b - a >= length - _EPS:
                return b - length
        return self.lowest() - length

    def map(self, length: float, name: str) -> float:
        lo = self.where(length)
        self.maps.append((lo, lo + length, name))
        return lo

    def chunk(self, length: float, name: str) -> float:
        """A 32 MiB granular chunk (rules 3 and 1): the highest 32 MiB aligned address with room in
        the highest free range at least `GAP_SLACK` larger, else directly below the lowest mapping,
        aligned down."""
        for a, b in self.free_ranges():
            if b - a >= length + GAP_SLACK - _EPS:
                lo = _down(b - length, 32.0)
                break
        else:
            lo = _down(self.lowest(), 32.0) - length
        self.maps.append((lo, lo + length, name))
        return lo

    def arena(self, name: str, hint: bool = True) -> float:
        """A thread's glibc arena (`new_heap`, malloc/arena.c): the hinted 64 MiB if free and
        aligned, else mmap(128 MiB) top-down, of which the 64 MiB aligned part at or above its
        start is kept; a mapping that came aligned leaves the hint at its upper half."""
        at = self.heap_hint
        if hint and at is not None:
            self.heap_hint = None
            if self.is_free(at, at + HEAP) and at % HEAP == 0:
                self.maps.append((at, at + HEAP, name))
                return at
        p1 = self.where(2 * HEAP)
        p2 = _up(p1, HEAP)
        if abs(p2 - p1) < _EPS:
            self.heap_hint = p2 + HEAP
        self.maps.append((p2, p2 + HEAP, name))
        return p2


def pool_before_context(
    space: AddressSpace, workers: int, packed: int = 0, shared: int | None = None
) -> tuple[list[float], list[float]]:
    """OpenMP's pool starting on the host before the context (libgomp's `gomp_team_start`): the
    workers' stacks one after another (rule 7), then each worker's arena at its first `malloc`:
    `shared` of them (all `workers` where None), those that took a share of a parallel loop before
    the context (`at::parallel_for` splits a loop into one share a grain, so a loop of two grains
    gives one worker a share: blind299/kn03's H100 maps hold one arena).
    The workers enter `new_heap` together, before any of them sets glibc's hint (the H100's maps:
    no arena in the 64 MiB its neighbour gave back), so each 128 MiB mapping goes directly below the
    last arena and the arenas lie 128 MiB apart, the 64 MiB between them free; the last aligned
    mapping leaves the hint at the lowest arena + 64 MiB for the next thread's arena.

    Which worker finds the hint is a race (blind290/ke05's processes on the H100 and H200 lay the
    arenas out differently, session 67): `packed` (a validation setting) makes the first `packed`
    arenas one after another, each trying the hint first (`new_heap`'s `aligned_heap_area`), so
    they pair up: a 128 MiB mapping that came aligned leaves the 64 MiB it gave back, which the
    next takes (ke05's maps probe: 9 packed, 6 apart)."""
    stacks = [space.map(STACK, f"stack {k}") for k in range(workers)]
    arenas = []
    hint = None
    for k in range(workers if shared is None else shared):
        if k >= packed:
            space.heap_hint = None
        tried = space.heap_hint
        arenas.append(space.arena(f"arena {k}", hint=k < packed))
        if space.heap_hint is not None:
            hint = space.heap_hint
        elif tried is not None:
            hint = None  # (taken)
    space.heap_hint = hint
    return stacks, arenas


def context(space: AddressSpace) -> float:
    """The CUDA context's creation: its mappings in order (`CONTEXT_HOST`, the driver thread's
    arena, the files' chunk, `CONTEXT_SMALL`), then its 512 MiB range directly below the lowest
    mapping, 32 MiB aligned (rules 1 and 4). Its anchor B (the range's top - 96 MiB)."""
    for k, length in enumerate(CONTEXT_HOST):
        space.map(length, f"context {k}")
    space.arena("context arena")
    space.chunk(CONTEXT_CHUNK, "context files")
    for k, length in enumerate(CONTEXT_SMALL):
        space.map(length, f"context small {k}")
    top = _down(space.lowest(), 32.0)
    space.maps.append((top - CONTEXT_RANGE, top, "context"))
    return top - CONTEXT_ABOVE_ANCHOR
