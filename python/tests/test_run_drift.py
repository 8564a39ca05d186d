"""validation/run_drift.py: `--list` takes the scripts exact in every phase of their latest answers
(an after file over the as-answered one), `--report` names a re-answered script that is no longer."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def _rec(script, allocated=0):
    """One phase line with the five figures."""
    return {
        "script": script,
        "phase": "phase0",
        "allocated": allocated,
        "peak_allocated": 512,
        "reserved": 2097152,
        "peak_reserved": 2097152,
        "requested": 512,
    }


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _drift(fixtures, *args):
    run = [sys.executable, str(ROOT / "validation" / "run_drift.py"), "--fixtures", str(fixtures), *args]
    return subprocess.run(run, capture_output=True, text=True, check=True).stdout


def test_list_takes_latest_answers(tmp_path):
    _write(tmp_path / "run_blind5_h200.jsonl", [_rec("a01"), _rec("a02"), _rec("a03")])
    # as answered: a01 exact, a02 and a03 off; the after file fixes a02 only
    _write(tmp_path / "answers_blind5_h200.jsonl", [_rec("a01"), _rec("a02", 512), _rec("a03", 512)])
    _write(tmp_path / "answers_blind5_after_h200.jsonl", [_rec("a02")])
    assert _drift(tmp_path, "--list").split("\n")[:-1] == ["blind5 h200 a01", "blind5 h200 a02"]


def test_report_names_a_drifted_script(tmp_path):
    _write(tmp_path / "run_blind5_h100.jsonl", [_rec("a01"), _rec("a02")])
    out = tmp_path / "out.jsonl"
    extra = {"set": "5", "gpu": "h100", "exit": 0}
    _write(out, [_rec("a01") | extra, _rec("a02", 1024) | extra])
    text = _drift(tmp_path, str(out), "--report")
    assert "blind5 a02 (h100): 0 of 1 phases exact" in text
    assert "allocated       gpu              0 twin          1,024 diff         +1,024" in text
    assert "a01" not in text
    assert "2 answered, 1 not exact in every phase" in text
