"""The validation scripts of validation/run/, unmodified, under `vramscope run`:
every phase as the twin answered it (fixtures/run/answers_h100.jsonl, a
snapshot: regenerate with `python validation/run_answers.py
fixtures/run/answers_h100.jsonl`), and, for the scripts the twin gets within
the acceptance tolerance of the H100's recording (fixtures/run/run_h100.jsonl),
that tolerance held."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, ROOT, run_script

KEYS = ("allocated", "peak_allocated", "reserved", "peak_reserved", "requested")
ALLOC_TOL, RESERVED_TOL = 0.005, 0.02


def _load(name):
    out: dict[str, list] = {}
    for line in (FIXTURES / "run" / name).read_text().splitlines():
        r = json.loads(line)
        if "phase" in r:
            out.setdefault(r["script"], []).append(r)
    return out


GPU = _load("run_h100.jsonl")
ANSWERS = _load("answers_h100.jsonl")
SCRIPTS = sorted(p.stem for p in (ROOT / "validation" / "run").glob("[0-9][0-9]_*.py"))


def _rel(a, b):
    return abs(a - b) / b if b else float(a != 0)


def _within(got, gpu):
    return len(got) == len(gpu) and all(
        _rel(g["peak_allocated"], w["peak_allocated"]) <= ALLOC_TOL
        and _rel(g["peak_reserved"], w["peak_reserved"]) <= RESERVED_TOL
        for g, w in zip(got, gpu, strict=True)
    )


def test_every_script_was_recorded_on_the_gpu():
    assert SCRIPTS and set(SCRIPTS) <= set(GPU)


@pytest.mark.parametrize("script", SCRIPTS)
def test_validation_script(script):
    _status, _lines, report, err = run_script(ROOT / "validation" / "run" / f"{script}.py")
    want = ANSWERS[script]
    if want[-1].get("error"):
        assert report is None or report["phases"][-1]["name"] == "end", err
        return
    assert report is not None, err
    got = [dict(name=p["name"], **{k: p[k] for k in KEYS}) for p in report["phases"]]
    assert [g["name"] for g in got] == [w["phase"] for w in want]
    for g, w in zip(got, want, strict=True):
        for k in KEYS:
            assert g[k] == w[k], f"{script} {w['phase']} {k}: now {g[k]}, answers file {w[k]}"
    if _within(want, GPU[script]):
        assert _within(got, GPU[script])
