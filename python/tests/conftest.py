"""Shared helpers of the Python tests: run `vramscope run` in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"


def run_script(script, *args, extra=(), env=None, timeout=600):
    """`python -m vramscope run --quiet --json - SCRIPT ARGS`: (status, stdout lines, report)."""
    cmd = [sys.executable, "-m", "vramscope", "run", "--quiet", "--json", "-", *extra, str(script), *args]
    e = dict(os.environ)
    e.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)
    out = p.stdout
    # the report is the last JSON document on stdout (the script prints before it)
    start = out.rfind('\n{\n  "schema"')
    start = 0 if out.startswith('{\n  "schema"') else start + 1
    report = json.loads(out[start:]) if start >= 0 and '"schema"' in out else None
    lines = out[: start if start > 0 else 0].splitlines()
    return p.returncode, lines, report, p.stderr


def calls_inline() -> bool:
    """Whether CPython runs a Python-to-Python call inline, with no frame-evaluation hook (PEP 523)
    installed: a call through the hook (`_PyEval_Vector`) keeps each argument on the caller's stack
    for the call's duration, so a temporary argument outlives the callee's frame (F.normalize's
    `input` then dies after its `denom`)."""

    def probe(x):
        return sys.getrefcount(x)

    o = object()
    return probe(o) - sys.getrefcount(o) == 1


def _unhook(set_eval_frame):
    set_eval_frame(None)  # from the run-only callback the shim set: counted down


def _run_default(frame, cache_entry, frame_state):
    from torch._dynamo.types import ConvertFrameReturn

    return ConvertFrameReturn(apply_to_code=False)


def restore_default_frame_evaluation() -> None:
    """Take out dynamo's frame-evaluation shim that a compile error left installed. A callback that
    raises returns with the thread's callback None, set directly ("we intentionally DO NOT re-enable
    custom behavior", dynamo__custom_eval_frame in torch/csrc/dynamo/eval_frame_cpp.cpp), so the
    `set_eval_frame(None)` of `compile_wrapper`'s `finally` sees no callback to drop and
    `active_dynamo_threads` stays 1: every later call goes through the shim, for the rest of the
    process (PyTorch 2.11; a fresh process, as on the GPU, has none). Count it down once: set a
    callback (counted up), then call `_unhook`, which the shim runs with the run-only callback
    `False` it sets directly (its code's recursive action), so its `set_eval_frame(None)` counts
    down, and after it the shim sets our callback back directly, which the last
    `set_eval_frame(None)` counts down again (at 0 a no-op)."""
    from torch._C._dynamo import eval_frame

    for _ in range(4):
        if calls_inline() or eval_frame.get_eval_frame_callback() is not None:
            return
        skip = eval_frame._FrameAction.SKIP
        strategy = eval_frame._FrameExecStrategy(skip, eval_frame._FrameAction.RUN_ONLY)
        eval_frame.set_code_exec_strategy(_unhook.__code__, strategy)
        eval_frame.set_eval_frame(_run_default)
        _unhook(eval_frame.set_eval_frame)
        eval_frame.set_eval_frame(None)


@pytest.fixture(autouse=True)
def _default_frame_evaluation():
    """Each test starts as in a fresh process: no dynamo frame-evaluation shim left installed by an
    earlier test's compile error (test_capture.py's
    `test_torch_compile_raises_where_pytorch_refuses_the_graph` made
    `test_normalize_frees_a_temporary_input_before_its_norm` free `[4, 256]`)."""
    yield
    if "torch._dynamo" in sys.modules:
        restore_default_frame_evaluation()


@pytest.fixture
def tmp_script(tmp_path):
    """Write a script into a temporary folder and return its path."""

    def write(text: str, name: str = "script.py") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def counted(fn):
    """`fn()` and what it changed in the twin's allocation count and requested bytes."""
    import torch

    keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
    before = torch.cuda.memory_stats()
    out = fn()
    after = torch.cuda.memory_stats()
    return out, tuple(after[k] - before[k] for k in keys)


def probe_events(name, tag):
    """The GPU's alloc/free events of one case (`tag: ... events +A -F ...`) of a probe's output
    `validation/run/probes/NAME`, as (action, bytes) pairs."""
    text = (ROOT / "validation" / "run" / "probes" / name).read_text()
    line = next(x for x in text.splitlines() if x.startswith(tag + ":"))
    sizes = line.split(" events ")[1].split()
    return [("alloc" if s[0] == "+" else "free_requested", int(s[1:])) for s in sizes]


def extra_allocations(setup, op, gpu: str = "h100"):
    """Allocations and requested bytes `op(*setup())` makes on a simulated `gpu` beyond the new
    storages it returns."""
    import vramscope

    with vramscope.capture(gpu=gpu):
        args = setup()
        out, (count, req) = counted(lambda: op(*args))
        outs = out if isinstance(out, tuple) else (out,)
        new = [t.untyped_storage().nbytes() for t in outs if t is not None]
    return count - len(new), req - sum(new)
