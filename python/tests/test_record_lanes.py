"""validation/run/record_lanes.py: blind scripts dealt into lanes whose largest peaks fit the GPU together."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "record_lanes", ROOT / "validation" / "run" / "record_lanes.py"
)
record_lanes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record_lanes)


def test_lanes_are_equal_runs_of_the_largest_first_within_the_memory():
    sizes = {"a": 30, "b": 29, "c": 21, "d": 20, "e": 10, "f": 9, "g": 3, "h": 2}
    # four lanes of two would need 30 + 21 + 10 + 3 = 64: over 60, so three lanes of three
    assert record_lanes.deal(sizes, 60, 4) == [["a", "b", "c"], ["d", "e", "f"], ["g", "h"]]
    assert record_lanes.deal(sizes, 64, 4) == [["a", "b"], ["c", "d"], ["e", "f"], ["g", "h"]]
    assert record_lanes.deal(sizes, 1000, 1) == [list("abcdefgh")]


def test_a_script_larger_than_the_memory_is_refused():
    with pytest.raises(ValueError, match="a peaks at 30 bytes, more than the 20 given"):
        record_lanes.deal({"a": 30, "b": 1}, 20, 4)


def test_a_plan_of_a_committed_set_names_every_script_once():
    p = subprocess.run(
        [sys.executable, str(ROOT / "validation" / "run" / "record_lanes.py"), "plan", "80", "blind286"],
        capture_output=True,
        text=True,
        check=True,
    )
    named = [path for line in p.stdout.splitlines() for path in line.split()[1:]]
    assert sorted(named) == sorted(
        f"blind286/{f.name}" for f in (ROOT / "validation" / "run" / "blind286").glob("*.py")
    )
    assert "lanes' largest peaks add to" in p.stderr


def test_each_lane_records_with_its_own_cold_inductor_cache(tmp_path):
    """record_lanes.sh hands record.sh a fresh INDUCTOR_CACHE_ROOT per lane (record.sh makes it each
    script's TORCHINDUCTOR_CACHE_DIR), so no process loads another's autotuned Triton configs."""
    work = tmp_path / "run"
    work.mkdir()
    (work / "record_lanes.sh").write_text((ROOT / "validation" / "run" / "record_lanes.sh").read_text())
    # a stand-in record.sh: notes the cache root its lane was given
    (work / "record.sh").write_text('mkdir -p "$1"; echo "${INDUCTOR_CACHE_ROOT:-}" > "$1/root.txt"\n')
    plan = tmp_path / "plan.txt"
    plan.write_text("lane0 a.py\nlane1 b.py\n")
    subprocess.run(["bash", str(work / "record_lanes.sh"), str(tmp_path / "out"), str(plan)], check=True)
    roots = [(tmp_path / "out" / lane / "root.txt").read_text().strip() for lane in ("lane0", "lane1")]
    assert all(roots) and roots[0] != roots[1]
    assert not any(os.path.exists(r) for r in roots)  # removed after the run


def test_every_validation_script_name_fits_its_record_file():
    # record.sh writes OUTDIR/NAME.jsonl, NAME.out, NAME.err: a file name is at most 255 bytes (NAME_MAX
    # on Linux), so a stem over 249 bytes makes the script fail on the GPU before its first phase
    # (blind348/mm02, session 78)
    scripts = list((ROOT / "validation" / "run").glob("**/*.py"))
    assert len(scripts) > 1000
    too_long = [str(p) for p in scripts if len((p.stem + ".jsonl").encode()) > 255]
    assert too_long == []
