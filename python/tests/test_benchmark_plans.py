"""validation/run/benchmark_plans.py: cuDNN benchmark mode's timed plans in a script's own GPU run
against a run-benchmark sweep of its problems (session 75's H100 records)."""

from __future__ import annotations

import json
import sys
import tarfile

from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "validation" / "run"))

import benchmark_plans

TRUTH = FIXTURES / "run" / "truth_misses_s75_h100.tar.xz"


def _member(name: str) -> str:
    with tarfile.open(TRUTH) as tar:
        (m,) = [m.name for m in tar.getmembers() if m.name.endswith(".jsonl") and f"/{name}_" in m.name]
    return f"{TRUTH}:{m.rsplit('/', 1)[1]}"


def test_ma01_in_script_plans_against_the_four_worker_sweep():
    """blind338/ma01's H100 run and the 4-worker sweep of blind338's problems time another plan for 18 of
    the 85 calls they share; the largest gap a wgrad of the dilation-36 ASPP branch."""
    script = benchmark_plans.script_plans(benchmark_plans._lines(_member("ma01")))
    swept = benchmark_plans.sweep_plans(str(FIXTURES / "run" / "cudnn_benchmark_sweep_blind338_h100.tar.xz"))
    agree, diff = benchmark_plans.compare(script, swept)
    assert (agree, len(diff)) == (67, 18)
    by_name = {benchmark_plans._name(op, args): (s, w) for op, args, s, w in diff}
    key = "wgrad|bfloat16|[4, 2048, 64, 64]|[256, 2048, 3, 3]|[1, 1]|[36, 36]|[36, 36]"
    assert by_name[key] == (18_875_679, 1_280)


def test_script_plans_take_the_calls_that_find_the_plan_cached(tmp_path):
    """A forward's second call and a backward's first split call (bias sizes dropped, the one-op output
    mask), each less its outputs; a forward's first call (the search) is not taken."""
    x = [[2, 3, 8, 8], [192, 64, 8, 1], "float32", 0, "cuda"]
    w = [[4, 3, 3, 3], [27, 9, 3, 1], "float32", 0, "cuda"]
    g = [[2, 4, 6, 6], [144, 36, 6, 1], "float32", 0, "cuda"]
    fwd = [x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1]
    bwd = [g, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, False, False]]
    recs = [
        {"op": "convolution", "args": fwd, "new": [1152], "count": 3, "requested": 1152 + 5000 + 272},
        {"op": "convolution", "args": fwd, "new": [1152], "count": 2, "requested": 1152 + 272},
        {"op": "convolution_backward[0]", "args": bwd, "new": [1536], "count": 2, "requested": 1536 + 131},
    ]
    path = tmp_path / "ops.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    plans = benchmark_plans.script_plans(benchmark_plans._lines(str(path)))
    dgrad_args = [*bwd[:3], None, *bwd[4:-1], [True, False, False]]
    assert plans == {("forward", json.dumps(fwd)): 272, ("dgrad", json.dumps(dgrad_args)): 131}
