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
