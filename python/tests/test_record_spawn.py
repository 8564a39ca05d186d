"""validation/run/record.py on a script whose CUDA work runs in a rank started by mp.spawn: the rank's
phases are recorded in the child (on a machine without a GPU the figures are null, the lines still come)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT

SPAWNS = """
import torch, torch.multiprocessing as mp

def worker(rank, n):
    for _ in range(n):
        try:
            torch.cuda.reset_peak_memory_stats()
        except Exception:
            pass  # no GPU here: the record is written before PyTorch's own call

if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=1)
"""


def test_record_writes_the_spawned_rank_s_phases(tmp_path):
    # before, only the parent's `end` came (null figures: the parent never touches CUDA) and the
    # rank's two phase boundaries were lost with its process
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNS)
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, OUT_JSONL=str(out))
    p = subprocess.run(
        [sys.executable, str(ROOT / "validation" / "run" / "record.py"), str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["script"], r["phase"]) for r in lines] == [
        ("spawns", "phase0"),
        ("spawns", "phase1"),
        ("spawns", "end"),
    ]
