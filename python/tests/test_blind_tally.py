"""validation/run_blind_tally.py: a set answered blind whose GPU run is not recorded yet is listed
as awaiting the GPU and left out of the totals."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys

from conftest import ROOT


def _write(path, rows, xz=False):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if xz:
        with lzma.open(str(path) + ".xz", "wt") as f:
            f.write(text)
    else:
        path.write_text(text)


def _rec(script):
    """One phase line with the five figures."""
    return {
        "script": script,
        "phase": "phase0",
        "allocated": 0,
        "peak_allocated": 512,
        "reserved": 2097152,
        "peak_reserved": 2097152,
        "requested": 512,
    }


def _tally(fixtures):
    """What run_blind_tally.py prints for the fixtures in `fixtures`."""
    run = [sys.executable, str(ROOT / "validation" / "run_blind_tally.py"), str(fixtures)]
    return subprocess.run(run, capture_output=True, text=True, check=True).stdout


def test_answered_set_without_gpu_run_is_awaiting(tmp_path):
    rec = _rec("x01")
    _write(tmp_path / "run_blind5_h200.jsonl", [rec])
    _write(tmp_path / "answers_blind5_h200.jsonl", [rec], xz=True)
    _write(
        tmp_path / "answers_blind7_h200.jsonl", [rec | {"script": "y01"}, rec | {"script": "y02"}], xz=True
    )
    out = _tally(tmp_path)
    assert "1 sets, 1 scripts, 1 phases: as answered 1 within, 1 phases exact" in out
    assert "blind7: 2 scripts, 2 phases answered, awaiting the GPU (no run_blind7_h200.jsonl)" in out
    assert "blind5:" not in out


def test_set_answered_for_an_h100_without_gpu_run_is_awaiting(tmp_path):
    rec = _rec("x01")
    _write(tmp_path / "run_blind5_h100.jsonl", [rec])
    _write(tmp_path / "answers_blind5_h100.jsonl", [rec], xz=True)
    _write(tmp_path / "answers_blind8_h100.jsonl", [rec | {"script": "z01"}], xz=True)
    out = _tally(tmp_path)
    assert "1 sets, 1 scripts, 1 phases" in out
    assert "blind8: 1 scripts, 1 phases answered, awaiting the GPU (no run_blind8_h100.jsonl)" in out
    assert "blind5:" not in out


def test_compare_without_a_gpu_run_says_it_awaits_the_gpu(tmp_path):
    _write(tmp_path / "answers_blind7_h200.jsonl", [{"script": "y01", "phase": "phase0"}], xz=True)
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "validation" / "run_compare.py"),
            str(tmp_path / "run_blind7_h200.jsonl"),
            str(tmp_path / "answers_blind7_h200.jsonl"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1 and "no GPU run recorded" in p.stderr


def test_a_set_run_on_an_h100_is_tallied_against_the_twins_h100_answers(tmp_path):
    rec = _rec("z01")
    _write(tmp_path / "run_blind9_h100.jsonl", [rec])
    _write(tmp_path / "answers_blind9_h200.jsonl", [rec | {"peak_allocated": 4096}], xz=True)
    _write(tmp_path / "answers_blind9_h100.jsonl", [rec], xz=True)
    _write(tmp_path / "run_blind10_h100.jsonl", [rec])
    _write(tmp_path / "answers_blind10_h200.jsonl", [rec], xz=True)
    out = _tally(tmp_path)
    # blind9 against its H100 answers (exact), not its H200 ones (8x over)
    assert "blind9      1 scripts   1 phases (on an H100): as answered  1 within,   1 exact" in out
    assert "blind10: recorded on an H100, no answers_blind10_h100.jsonl yet: left out of the totals" in out
    assert "1 sets, 1 scripts, 1 phases: as answered 1 within, 1 phases exact" in out
    assert "awaiting" not in out


def test_an_h100_sets_latest_answers_are_its_h100_after_file_not_its_h200_one(tmp_path):
    rec = _rec("z01")
    _write(tmp_path / "run_blind9_h100.jsonl", [rec])
    _write(tmp_path / "answers_blind9_h100.jsonl", [rec | {"peak_allocated": 4096}], xz=True)
    _write(tmp_path / "answers_blind9_after_h200.jsonl", [rec], xz=True)
    out = _tally(tmp_path)
    assert "as answered  0 within,   0 exact; latest (as answered)  0 within,   0 exact" in out
    _write(tmp_path / "answers_blind9_after_h100.jsonl", [rec], xz=True)
    out = _tally(tmp_path)
    assert "as answered  0 within,   0 exact; latest (after)  1 within,   1 exact" in out


def test_an_after_file_with_only_the_scripts_it_fixed_keeps_the_others_as_answered(tmp_path):
    x, y = _rec("x01"), _rec("y01")
    _write(tmp_path / "run_blind9_h100.jsonl", [x, y])
    _write(tmp_path / "answers_blind9_h100.jsonl", [x, y | {"peak_allocated": 4096}], xz=True)
    _write(tmp_path / "answers_blind9_after_h100.jsonl", [y], xz=True)
    out = _tally(tmp_path)
    assert "as answered  1 within,   1 exact; latest (after)  2 within,   2 exact" in out
