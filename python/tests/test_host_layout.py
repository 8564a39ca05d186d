"""Rule 17 (docs/driver-placement.md, session 62): OpenMP's pool started on the host before the CUDA
context, against the H100's maps of blind269/jj04 (`validation/run/probes/jj04_omp_pool_maps_s62.py`)
with the pool (15 workers) and without it (OMP_NUM_THREADS=1, the control)."""

import pathlib
import pickle
import re

import pytest
from conftest import run_script
from vramscope import _host_layout as hl

FIX = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "run" / "probes"
#: the maps print offsets from B; B is 32 MiB mod 64 MiB in both processes (its arenas lie at
#: B+96+64k): any such base gives the same layout
BASE = 64.0 * 1000 + 32.0
#: the maps print MiB with two decimals
TOL = 0.02
LINE = re.compile(r"^\s*B\s+([+-][\d.]+) len\s+([\d.]+) gap\s+[\d.]+ (\S+) (\S+)")


def _views(name):
    views, cur = {}, None
    for line in (FIX / name).read_text().splitlines():
        if line.startswith("== ("):
            cur = views.setdefault(line[4], [])
        elif cur is not None and (m := LINE.match(line)):
            lo, length = float(m[1]), float(m[2])
            if _near(length, 63.871):
                # an arena's PROT_NONE part (its first 0.129 MiB print apart, or merged with a
                # mapping below): the arena, 64 MiB on a 64 MiB boundary
                lo, length = round(lo - 0.129), 64.0
            elif _near(length, 0.129):
                continue
            cur.append((BASE + lo, BASE + lo + length, f"{m[3]} {m[4]}"))
    return views


def _near(a, b):
    return abs(a - b) <= TOL


def _new(before, after):
    """The mappings of `after` that start where none of `before` starts (by their low ends)."""
    starts = [lo for lo, _, _ in before]
    return sorted(lo - BASE for lo, _, _ in after if not any(_near(lo, s) for s in starts))


def test_the_pool_s_arenas_lie_128_mib_apart_below_its_stacks():
    a = _views("jj04_omp_pool_maps_s62_h100.txt")["a"]
    # the tensors made before the pool: the mapping above the 15 stacks
    earlier = next(m for m in a if m[2].endswith("tensor") and _near(m[0], BASE + 2115.46))
    space = hl.AddressSpace([earlier])
    stacks, arenas = hl.pool_before_context(space, 15)
    assert all(_near(s - BASE, 2115.46 - (k + 1) * hl.STACK) for k, s in enumerate(stacks))
    assert [round(x - BASE) for x in arenas] == [1888 - 128 * k for k in range(15)]
    observed = sorted(lo - BASE for lo, hi, kind in a if hi - lo == 64.0)
    assert [round(x) for x in observed if x < 1900] == sorted(1888 - 128 * k for k in range(15))
    # glibc's hint: the lowest arena's mapping came aligned, its upper half is tried next
    assert space.heap_hint == arenas[-1] + hl.HEAP


def test_the_context_goes_below_the_pool_s_lowest_arena_and_its_mappings_into_the_gaps():
    views = _views("jj04_omp_pool_maps_s62_h100.txt")
    a, b = views["a"], views["b"]
    # the arenas print as a 0.129 MiB rw-p and a 63.871 MiB ---p part: one 64 MiB mapping
    space = hl.AddressSpace(a)
    space.heap_hint = BASE + 96 + hl.HEAP
    anchor = hl.context(space)
    assert _near(anchor, BASE)
    predicted = {name: lo - BASE for lo, _, name in space.maps if not name.startswith(("rw", "--", "r-"))}
    assert _near(predicted["context 0"], 1584.46)  # the library, its data above it
    assert _near(predicted["context 1"], 1576.46)  # the driver thread's stack
    assert _near(predicted["context 2"], 1485.87)  # the 18.05 MiB reservation and 20 pages
    assert _near(predicted["context arena"], 160.0)
    assert _near(predicted["context files"], 1344.0)
    assert _near(predicted["context small 0"], 1954.38)
    assert _near(predicted["context small 1"], 1952.38)
    assert _near(predicted["context"], -416.0)
    new = _new(a, b)
    for lo in (1584.46, 1576.46, 1485.87, 160.0, 1344.0, 1952.38, -416.0):
        assert any(_near(lo, x) for x in new), lo


def test_without_a_pool_the_same_mappings_put_the_context_under_the_tensors():
    a, b = (_views("jj04_omp_pool_maps_omp1_s62_h100.txt")[v] for v in "ab")
    space = hl.AddressSpace(a)
    anchor = hl.context(space)
    assert _near(anchor, BASE)
    predicted = {name: lo - BASE for lo, _, name in space.maps if name.startswith("context")}
    assert _near(predicted["context 0"], 251.69)
    assert _near(predicted["context 1"], 243.68)
    assert _near(predicted["context 2"], 225.55)
    assert _near(predicted["context arena"], 160.0)
    assert _near(predicted["context files"], 128.0)
    # (the 1 MiB mapping lies outside the probe's view in this process: not checked)
    assert _near(predicted["context small 1"], 126.0)
    assert _near(predicted["context"], -416.0)
    new = _new(a, b)
    for lo in (251.69, 243.68, 225.55, 160.0, 128.0, 126.0, -416.0):
        assert any(_near(lo, x) for x in new), lo


def test_a_pool_started_on_the_host_puts_the_first_chunks_in_its_gaps(tmp_script, tmp_path):
    # rule 17 end to end: a tensor made, `trunc_normal_` (erfinv_ over 4M elements) starts OpenMP's
    # pool before the context, a later 10 MiB tensor. The stacks' phase is the median (32 MiB): the
    # lowest arena at B+96, the others 128 MiB apart up to B+1888, the later tensor and the
    # context's library in the top gap (B+1952..B+1984), its stack and reservation in the gap
    # B+1824..1888, its arena in B+160..224 (glibc's hint), its files' chunk at B+1728. The first
    # 20 MiB segment takes the context's hole (B+72); the next two each a 32 MiB chunk at the top
    # of the highest gap with room for it and its slack (rule 3): B+1600, then B+1472.
    # Without the rule (the pool not laid out) they lay below the context.
    snap = tmp_path / "snap.pickle"
    script = tmp_script(
        f"""
import torch
w = torch.empty(4 << 20)
torch.nn.init.trunc_normal_(w)
v = torch.empty(10 << 20, dtype=torch.uint8)
x = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
y = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
z = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.memory._dump_snapshot({str(snap)!r})
"""
    )
    status, _, _, err = run_script(script)
    assert status == 0, err
    segs = pickle.loads(snap.read_bytes())["segments"]
    base = min(s["address"] for s in segs) - (72 << 20)
    assert sorted(((s["address"] - base) >> 20, s["total_size"] >> 20) for s in segs) == [
        (72, 20),
        (1472, 20),
        (1600, 20),
    ]


def test_one_share_makes_one_arena_under_the_stacks_as_blind299_kn03_s_h100_maps_show():
    # kn03's only parallel CPU loops before `.to()` were 49,152-element `zeros` (two grains: one
    # worker's share); its H100 maps before `.to()` (qa69_kn03_host_layout_h100_2.txt) hold the 15
    # stacks under the weights and a single arena below them, at align_up(S - 128 MiB, 64 MiB)
    lines = (FIX / "qa69_kn03_host_layout_h100_2.txt").read_text().splitlines()
    host = re.compile(r"^\s*host B\s+([+-][\d.]+) len\s+([\d.]+) gap\s+[\d.]+ (\S+) (\S+)")
    maps = [(float(m[1]), float(m[2]), m[3], m[4]) for line in lines if (m := host.match(line))]
    weights = next(lo for lo, _, prot, kind in maps if prot == "rw-p" and kind == "w")
    stacks_seen = sorted(
        lo for lo, length, prot, _ in maps if prot == "rw-p" and _near(length, 8.0) and lo < weights
    )
    arenas_seen = [
        lo for lo, length, prot, _ in maps if prot == "---p" and _near(length, 63.871) and lo < weights
    ]
    # (this process's B, 0x7fecfc000000, is 0 MiB mod 64 MiB)
    base = 64.0 * 1000
    space = hl.AddressSpace([(base + weights, base + weights + 296.512, "weights")])
    stacks, arenas = hl.pool_before_context(space, 15, shared=1)
    # (each stack's 4 KiB guard lies under it)
    assert len(stacks_seen) == 15
    assert all(_near(s - base + 4 / 1024, x) for s, x in zip(sorted(stacks), stacks_seen, strict=True))
    assert [round(a - base) for a in arenas] == [round(a - 0.129) for a in arenas_seen] == [256]


def test_the_pool_s_arenas_are_its_workers_shares_before_the_context(tmp_script):
    # rule 17 with one worker's share (a fill of 49,152 elements: two grains) before the context:
    # one arena under the stacks, none in the 64 MiB gaps rule 17 leaves for 15. The context's
    # range lies under that arena (B+96..B+128 its files' chunk, B+128..B+192 its arena) and no
    # released range above it holds a 20 MiB chunk with its slack (B+192..B+229.87 is the widest):
    # the second and third segments go below the range (rule 1: B-448, B-480), where 15 arenas put
    # them in the gaps between arenas (B+1472 and B+1600, 1,400 and 1,528 MiB above the first)
    body = """
import torch
w = torch.empty(4 << 20)
torch.empty(SHARE).fill_(1.0)
v = torch.empty(10 << 20, dtype=torch.uint8)
x = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
y = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
z = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
segs = sorted(s["address"] for s in torch.cuda.memory_snapshot())
print("from the lowest", [(a - segs[0]) >> 20 for a in segs])
"""
    seen = {}
    for share in (49152, 4 << 20):
        status, lines, _, err = run_script(tmp_script(body.replace("SHARE", str(share))))
        assert status == 0, err
        seen[share] = [line for line in lines if line.startswith("from the lowest")]
    # (B-480, B-448, B+72 with one share; B+72, B+1472, B+1600 with every worker's)
    assert seen == {49152: ["from the lowest [0, 32, 552]"], 4 << 20: ["from the lowest [0, 1400, 1528]"]}


def test_arenas_packed_by_glibc_s_hint_as_blind290_ke05_s_h100_maps_show():
    # blind290/ke05 (convnext_base built on the host; `nb67_ke05_host_maps_probe.py`, session 67):
    # the H100 process's 15 arenas lie 9 packed (the workers that took glibc's hint, pairing up)
    # and 6 128 MiB apart; `packed` (the VRAMSCOPE_ARENAS_PACKED setting) lays that out
    views = _views("nb67_ke05_host_maps_probe_h100.txt")
    a = views["a"]
    earlier = next(m for m in a if m[2].endswith("teacher") and _near(m[0], BASE + 1587.88))
    space = hl.AddressSpace([earlier])
    stacks, arenas = hl.pool_before_context(space, 15, packed=9)
    assert _near(min(stacks) - BASE, 1467.82)
    observed = sorted(round(lo - BASE) for lo, hi, _ in a if hi - lo == 64.0 and lo - BASE < 1500)
    assert observed == [96, 224, 352, 480, 608, 736, 864, 928, 992, 1056, 1120, 1184, 1248, 1312, 1376]
    assert sorted(round(x - BASE) for x in arenas) == observed
    # the context's mappings then go where that process's maps put them
    anchor = hl.context(space)
    assert _near(anchor, BASE)
    predicted = {name: lo - BASE for lo, _, name in space.maps if name.startswith("context")}
    new = _new(a, views["b"])
    for name, lo in (
        ("context 0", 1452.29),  # the library (NVML's file and 13.34 MiB of data)
        ("context 1", 1444.29),  # the driver thread's stack, in the top gap
        ("context 2", 845.87),  # the reservation, in the gap B+800..864
        ("context arena", 160.0),  # glibc's hint from the lowest arena
        ("context files", 704.0),  # the next gap with room for 32 MiB and its slack
    ):
        assert _near(predicted[name], lo), name
        assert any(_near(lo, x) for x in new), name
    # (its range merges with the driver's pool below it and its top's pages in that view: B-422..B+96)
    assert _near(predicted["context"], -416.0)
    # all 15 apart (the setting unset, jj04's maps) puts the arenas elsewhere
    _, apart = hl.pool_before_context(hl.AddressSpace([earlier]), 15)
    assert sorted(round(x - BASE) for x in apart) != observed


def test_the_arenas_packed_setting_takes_a_count_of_arenas(monkeypatch):
    from vramscope import _capture

    monkeypatch.delenv("VRAMSCOPE_ARENAS_PACKED", raising=False)
    assert _capture._arenas_packed() == 0
    monkeypatch.setenv("VRAMSCOPE_ARENAS_PACKED", "9")
    assert _capture._arenas_packed() == 9
    for bad in ("16", "-1", "nine"):
        monkeypatch.setenv("VRAMSCOPE_ARENAS_PACKED", bad)
        with pytest.raises(ValueError, match="VRAMSCOPE_ARENAS_PACKED"):
            _capture._arenas_packed()


def test_the_stacks_phase_setting_moves_a_freed_host_range_s_chunk(tmp_script):
    # rule 17's draw (session 69, blind299/kn03): an 80 MiB tensor made before the pool lies directly
    # above its stacks, so its top is at 65,536 + phase + 15 stacks (120.06) + 80.004 MiB in the
    # layout's frame, and the arenas under the stacks (64 MiB aligned) put B at the same place for
    # every phase in (0, 64). Freed, it takes the next 32 MiB chunk at the highest 32 MiB boundary
    # with room (rule 3): B+2144 up to a phase of 55.94 MiB, B+2176 above it
    script = tmp_script(
        """
import torch
w = torch.empty(20 << 20)
torch.nn.init.trunc_normal_(w)
x = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
del w
y = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
segs = sorted(s["address"] for s in torch.cuda.memory_snapshot())
print("above", (segs[1] - segs[0] + (72 << 20)) >> 20)
"""
    )
    seen = {}
    for phase in (None, "50", "57"):
        status, lines, _, err = run_script(script, env={"VRAMSCOPE_STACKS_PHASE": phase or ""})
        assert status == 0, err
        seen[phase] = [line for line in lines if line.startswith("above")]
    assert seen == {None: ["above 2144"], "50": ["above 2144"], "57": ["above 2176"]}


def test_the_stacks_phase_setting_takes_mib_modulo_64(monkeypatch):
    from vramscope import _capture

    monkeypatch.delenv("VRAMSCOPE_STACKS_PHASE", raising=False)
    assert _capture._stacks_phase() == 32.0
    monkeypatch.setenv("VRAMSCOPE_STACKS_PHASE", "43.4")
    assert _capture._stacks_phase() == 43.4
    for bad in ("64", "-1", "half"):
        monkeypatch.setenv("VRAMSCOPE_STACKS_PHASE", bad)
        with pytest.raises(ValueError, match="VRAMSCOPE_STACKS_PHASE"):
            _capture._stacks_phase()


def test_the_pool_without_tensors_setting_lays_out_the_pool_with_no_tensor_mapped(tmp_script):
    # rule 17's pool started before the context (a 524,288-element `trunc_normal_`: 15 workers take
    # a share), with its only host tensor freed before the context: rule 11 maps nothing, so the
    # pool is not laid out and the 20 MiB segments lie under the context; with the setting the
    # gaps between the arenas are released ranges above it, which rule 3 gives the chunks
    # (blind350/mo05's H100 history: segments 4 to 20 at B+576 to B+968, 128 MiB apart; session 79)
    script = tmp_script(
        """
import torch
w = torch.empty(16 << 15, dtype=torch.bfloat16)
torch.nn.init.trunc_normal_(w)
del w
s = torch.empty(1000, device="cuda")
x = [torch.empty(20 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
segs = {s["address"]: s["total_size"] for s in torch.cuda.memory_snapshot()}
lo = min(a for a, n in segs.items() if n == 2 << 20)
print("large", sorted((a - lo) >> 20 for a, n in segs.items() if n > 2 << 20))
"""
    )
    seen = {}
    for on in (None, "0", "1"):
        status, lines, _, err = run_script(script, env={"VRAMSCOPE_POOL_WITHOUT_TENSORS": on or ""})
        assert status == 0, err
        seen[on] = [line for line in lines if line.startswith("large")]
    assert seen == {
        None: ["large [-478, -446, 74]"],
        "0": ["large [-478, -446, 74]"],
        "1": ["large [74, 1474, 1602]"],
    }


def test_the_pool_without_tensors_setting_takes_0_or_1(monkeypatch):
    from vramscope import _capture

    monkeypatch.delenv("VRAMSCOPE_POOL_WITHOUT_TENSORS", raising=False)
    assert _capture._pool_without_tensors() is False
    monkeypatch.setenv("VRAMSCOPE_POOL_WITHOUT_TENSORS", "1")
    assert _capture._pool_without_tensors() is True
    for bad in ("2", "yes"):
        monkeypatch.setenv("VRAMSCOPE_POOL_WITHOUT_TENSORS", bad)
        with pytest.raises(ValueError, match="VRAMSCOPE_POOL_WITHOUT_TENSORS"):
            _capture._pool_without_tensors()
