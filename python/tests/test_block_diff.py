"""validation/run/block_diff.py: blocks rebuilt from a trace as the caching allocator splits them."""

from __future__ import annotations

import pickle
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "validation" / "run"))

import block_diff

MB = 1 << 20


def _history(path, entries):
    trace = [dict(e, stream=0, frames=[]) for e in entries]
    with open(path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [trace]}, f)
    return path


def test_a_rest_too_small_to_split_stays_in_the_block(tmp_path):
    # CUDACachingAllocator.cpp `should_split`: a large-pool rest of 1 MiB or less stays in the block;
    # a small-pool (2 MiB segment) rest of 512 bytes or more is split off
    base, small = 1 << 32, 1 << 33
    path = _history(
        tmp_path / "h.pickle",
        [
            {"action": "segment_alloc", "addr": base, "size": 20 * MB},
            {"action": "alloc", "addr": base, "size": 8 * MB},
            {"action": "alloc", "addr": base + 8 * MB, "size": 11 * MB - 100},
            {"action": "free_completed", "addr": base, "size": 8 * MB},
            {"action": "alloc", "addr": base, "size": 7 * MB},
            {"action": "segment_alloc", "addr": small, "size": 2 * MB},
            {"action": "alloc", "addr": small, "size": MB},
            {"action": "alloc", "addr": small + MB, "size": MB - 600},
        ],
    )
    out, state, _ = block_diff.replay(path)
    blocks = [block for _, _, block, e in out if e["action"] == "alloc"]
    # 11 MiB - 100 rounds to 11 MiB, a 1 MiB rest: kept; 7 MiB of the freed 8 MiB: 1 MiB kept;
    # in the small pool MiB - 600 rounds to MiB - 512 and its 512-byte rest is split off
    assert blocks == [8 * MB, 12 * MB, 8 * MB, MB, MB - 512]
    assert out[-1][1] == 20 * MB + 2 * MB - 512
    assert [b[0] for b in block_diff.free_blocks(state)] == [512]


def test_place_names_the_first_allocation_taken_from_another_segment(tmp_path, capsys):
    # two equal free segments: the allocator takes the lower address, so where the driver put them
    # decides which one a request lands in; sizes alone (diff) cannot tell
    low, high = 1 << 32, 1 << 33

    def history(name, first, second):
        return _history(
            tmp_path / name,
            [
                {"action": "segment_alloc", "addr": first, "size": 20 * MB},
                {"action": "segment_alloc", "addr": second, "size": 20 * MB},
                {"action": "alloc", "addr": min(first, second), "size": 8 * MB},
                {"action": "alloc", "addr": min(first, second) + 8 * MB, "size": 4 * MB},
            ],
        )

    gpu, twin = history("g.pickle", low, high), history("t.pickle", high, low)
    block_diff.place(str(gpu), str(gpu), 5)
    assert capsys.readouterr().out == "same places throughout\n"
    block_diff.place(str(gpu), str(twin), 1)
    out = capsys.readouterr().out
    assert out.startswith("GPU entry 2 / twin 2: alloc of 8,388,608: segment #0 + 0 / #1 + 0")
    assert out.count("\n") == 1


def test_life_names_an_allocation_freed_later_not_frees_reordered_between_allocations(tmp_path, capsys):
    # the GPU frees b before c is made, the twin after; a and d are freed in another order between
    # the same two allocations, which leaves the allocator as it was: not a lifetime difference
    base = 1 << 32
    a, b, c, d = (base + k * MB for k in range(4))

    def history(name, frees_before_c, frees_after_c):
        entries = [{"action": "segment_alloc", "addr": base, "size": 20 * MB}]
        entries += [{"action": "alloc", "addr": x, "size": MB} for x in (a, b, d)]
        entries += [{"action": "free_requested", "addr": x, "size": MB} for x in frees_before_c]
        entries += [{"action": "alloc", "addr": c, "size": MB}]
        entries += [{"action": "free_requested", "addr": x, "size": MB} for x in frees_after_c]
        return _history(tmp_path / name, entries)

    gpu = history("gpu.pickle", [a, d, b], [c])
    twin = history("twin.pickle", [d, a], [b, c])
    block_diff.life(gpu, twin, 5)
    out = capsys.readouterr().out.splitlines()
    assert (
        len(out) == 1
        and out[0].startswith("allocation 1 of 1,048,576")
        and "freed after allocation 3 / 4" in out[0]
    )


def test_cross_tells_a_segment_count_that_follows_the_addresses_from_one_that_follows_the_requests(
    tmp_path, capsys
):
    # the same small-pool requests on both sides; the twin made its first 2 MiB segment above the
    # second, the GPU below it. After x is freed two 1 MiB free blocks tie and w takes the lower
    # address (BlockComparatorSize): the GPU's leaves two 1 MiB holes when y is freed, the twin's one
    # 2 MiB hole (free_block merges), and three 640 KiB requests need a third segment on the GPU only
    low, high, third = 1 << 32, 1 << 33, 1 << 34
    k640 = 640 << 10

    def history(name, first, second, places):
        x, y, z, w, p1, p2, p3 = places
        entries = [
            {"action": "segment_alloc", "addr": first, "size": 2 * MB},
            {"action": "alloc", "addr": x, "size": MB},
            {"action": "alloc", "addr": y, "size": MB},
            {"action": "segment_alloc", "addr": second, "size": 2 * MB},
            {"action": "alloc", "addr": z, "size": MB},
            {"action": "free_completed", "addr": x, "size": MB},
            {"action": "alloc", "addr": w, "size": MB},
            {"action": "free_completed", "addr": y, "size": MB},
            {"action": "alloc", "addr": p1, "size": k640},
            {"action": "alloc", "addr": p2, "size": k640},
        ]
        if p3 == third:
            entries.append({"action": "segment_alloc", "addr": third, "size": 2 * MB})
        entries.append({"action": "alloc", "addr": p3, "size": k640})
        return str(_history(tmp_path / name, entries))

    gpu = history("g.pickle", low, high, (low, low + MB, high, low, low + MB, high + MB, third))
    twin = history(
        "t.pickle", high, low, (high, high + MB, low, low + MB, high, high + k640, high + 2 * k640)
    )
    requests, bases = block_diff.small_requests(block_diff.load_trace(gpu))
    taken, made = block_diff.best_fit(requests, bases)
    assert made == [1, 3, 7] and taken[3][:2] == (0, 0)
    block_diff.cross(gpu, twin)
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "GPU: 7 small allocations, 7 where best fit over its own segments puts them, 3 segments",
        "twin: 7 small allocations, 7 where best fit over its own segments puts them, 2 segments",
        "GPU's requests over the twin's segment addresses: 2 segments",
        "twin's requests over the GPU's segment addresses: 3 segments",
    ]
    assert out[4].startswith(
        "the GPU's requests first take another block at small allocation 4: segment #0 + 0"
    )
    assert out[5:] == [
        "    segment #0: GPU +0 MiB, twin +0 MiB from the first small segment",
        "    segment #1: GPU +4096 MiB, twin -4096 MiB from the first small segment",
    ]


def test_allocs_compares_blocks_whatever_the_order_of_the_frees_between(tmp_path, capsys):
    # blind341/md05's H100 and twin histories free a step's tensors in another order (the first
    # comparison stops there) on streams numbered by pointer on the GPU; the allocations alone show
    # where a block first differs
    base = 1 << 32

    def history(name, stream, frees, third):
        entries = [
            {"action": "segment_alloc", "addr": base, "size": 20 * MB},
            {"action": "alloc", "addr": base, "size": 8 * MB},
            {"action": "alloc", "addr": base + 8 * MB, "size": 4 * MB},
        ]
        entries += [
            {"action": "free_completed", "addr": base + 8 * MB * k, "size": (8 - 4 * k) * MB} for k in frees
        ]
        entries.append({"action": "alloc", "addr": base, "size": third})
        trace = [dict(e, stream=stream, frames=[]) for e in entries]
        with open(tmp_path / name, "wb") as f:
            pickle.dump({"segments": [], "device_traces": [trace]}, f)
        return tmp_path / name

    gpu = history("gpu.pickle", 0x55D0, [0, 1], 7 * MB)
    twin = history("twin.pickle", 0x7F00, [1, 0], 7 * MB)
    block_diff.diff(gpu, twin, 3)
    assert "the sequences part" in capsys.readouterr().out
    block_diff.diff_allocs(gpu, twin, 3)
    assert "same blocks throughout" in capsys.readouterr().out
    # with the 4 MiB tensor still live, 7 MiB of the freed 8 leaves a 1 MiB rest, kept in the block
    block_diff.diff_allocs(gpu, history("other.pickle", 0x7F00, [0], 7 * MB), 3)
    assert "allocation 2 (GPU entry 5 / twin 4): 7,340,032 on stream 0: block 7,340,032 / 8,388,608" in (
        capsys.readouterr().out
    )
