"""The seed probe (fixtures/seeds/seeds_probe.py), unmodified, under `vramscope run`,
against the H100's own figures (fixtures/seeds/seeds_h100.jsonl)."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, run_script

TRUTH = [json.loads(line) for line in (FIXTURES / "seeds" / "seeds_h100.jsonl").read_text().splitlines()]
CASES = sorted({t["case"] for t in TRUTH if "case" in t})
KEYS = ("allocated", "peak", "reserved", "peak_reserved", "requested")


@pytest.mark.parametrize("case", CASES)
def test_seed_case(case):
    status, lines, _report, err = run_script(FIXTURES / "seeds" / "seeds_probe.py", case)
    assert status == 0, err
    got = [json.loads(line) for line in lines if line.startswith('{"case"')]
    want = [t for t in TRUTH if t.get("case") == case]
    assert [g["step"] for g in got] == [w["step"] for w in want]
    for g, w in zip(got, want, strict=True):
        for k in KEYS:
            assert g[k] == w[k], f"{case} {w['step']} {k}: twin {g[k]}, GPU {w[k]}"
