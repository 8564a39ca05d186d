"""Totals over every blind set of validation/run/blindN/ on the GPU it ran on (an H200, or an H100).

    python validation/run_blind_tally.py [fixtures/run]

One line per set (`run_blindN_h200.jsonl`): its scripts and phases, then as
answered (`answers_blindN_h200.jsonl`, blind21's u03 from
`answers_blind21b_h200.jsonl`; each file or its `.xz`) and latest (`answers_blindN_after_h200.jsonl`
where the set has one, else as answered; blind4b's d07/d08 are answered in
blind4's after file): scripts within 0.5% peak allocated / 2% peak reserved in
every phase, and phases exact in all five figures. A script that raised on the
GPU counts as a miss. Then the totals, and the scripts not exact in every
phase of their latest answers.
A set answered (`answers_blindN_h200.jsonl` or its `.xz`) whose GPU run is not recorded yet is
listed as awaiting the GPU, outside the totals.
A set the device ran on an H100 (`run_blindN_h100.jsonl`, no H200 run) is tallied against the twin's
H100 answers: `answers_blindN_h100.jsonl`, the as-answered commit's package with only the GPU changed,
and `answers_blindN_after_h100.jsonl` for latest (else as answered: an H200 after file does not stand
for it; a compiled script's kernels can differ between the two GPUs' answers).
"""

import os
import re
import sys

from run_compare import ALLOC_TOL, RESERVED_TOL, compare, fixture, load


def sets(fixtures):
    """The sets with a GPU run, each with the GPU it ran on (`h200` where it has both)."""
    names = (re.match(r"run_blind(\d+b?)_(h200|h100)\.jsonl$", f) for f in os.listdir(fixtures))
    found = {}
    for m in filter(None, names):
        if found.get(m.group(1)) != "h200":
            found[m.group(1)] = m.group(2)
    return sorted(found.items(), key=lambda s: (int(re.match(r"\d+", s[0]).group()), s[0]))


def awaiting(fixtures):
    """Sets answered blind (`answers_blindN_h200.jsonl` or `_h100`) whose GPU run is not recorded yet,
    each with the GPU it was answered for (blind21b's answers are blind21's u03, tallied with blind21)."""
    names = (re.match(r"answers_blind(\d+b?)_(h200|h100)\.jsonl(\.xz)?$", f) for f in os.listdir(fixtures))
    ran = {s for s, _ in sets(fixtures)} | {"21b"}
    found = {}
    for m in filter(None, names):
        if m.group(1) not in ran and found.get(m.group(1)) != "h200":
            found[m.group(1)] = m.group(2)
    return sorted(found.items(), key=lambda s: (int(re.match(r"\d+", s[0]).group()), s[0]))


def tally(gpu, twin):
    """(scripts within, phases exact, [(script, phases, exact)] not exact in every phase)."""
    raised = {s for s, rs in gpu.items() if any(r.get("exception") for r in rs)}
    within = exact = 0
    misses = []
    for script, n, ex, ea, er, _ in compare(gpu, twin):
        exact += ex
        within += ea is not None and ea <= ALLOC_TOL and er <= RESERVED_TOL and script not in raised
        if ex < n or script in raised:
            misses.append((script, n, ex))
    return within, exact, misses


def main():
    fx = (
        sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures", "run")
    )
    path = lambda name: os.path.join(fx, name)  # noqa: E731
    total = [0] * 6
    misses, tallied = [], []
    for s, g in sets(fx):
        if not fixture(path(f"answers_blind{s}_{g}.jsonl")):
            print(
                f"blind{s}: recorded on an {g.upper()}, no answers_blind{s}_{g}.jsonl yet:"
                " left out of the totals"
            )
            continue
        tallied.append(s)
        gpu = load(path(f"run_blind{s}_{g}.jsonl"))
        answered = load(path(f"answers_blind{s}_{g}.jsonl"))
        if s == "21":
            answered.update(load(path("answers_blind21b_h200.jsonl")))
        after = path(f"answers_blind{'4' if s == '4b' else s}_after_{g}.jsonl")
        latest = (
            {**answered, **load(after)} if fixture(after) else answered
        )  # an after file may hold only the scripts it fixed
        w0, e0, _ = tally(gpu, answered)
        w1, e1, miss = tally(gpu, latest)
        phases = sum(len(r) for r in gpu.values())
        for i, v in enumerate((len(gpu), phases, w0, e0, w1, e1)):
            total[i] += v
        which = "after" if fixture(after) else "as answered"
        on = "" if g == "h200" else f" (on an {g.upper()})"
        print(
            f"blind{s:<4} {len(gpu):>3} scripts {phases:>3} phases{on}: "
            f"as answered {w0:>2} within, {e0:>3} exact; latest ({which}) {w1:>2} within, {e1:>3} exact"
        )
        misses += [(s, *m) for m in miss]
    n, p, w0, e0, w1, e1 = total
    dirs = len({re.match(r"\d+", s).group() for s in tallied})  # blind4b is blind4's d07, d08
    print(
        f"{dirs} sets, {n} scripts, {p} phases: as answered {w0} within, {e0} phases exact; "
        f"latest {w1} within, {e1} phases exact "
        f"({100 * ALLOC_TOL}% peak allocated, {100 * RESERVED_TOL}% peak reserved)"
    )
    print(f"{len(misses)} scripts not exact in every phase of their latest answers:")
    for s, script, n, ex in misses:
        print(f"  blind{s} {script} {ex} of {n}")
    for s, g in awaiting(fx):
        answered = load(path(f"answers_blind{s}_{g}.jsonl"))
        phases = sum(len(r) for r in answered.values())
        print(
            f"blind{s}: {len(answered)} scripts, {phases} phases answered,"
            f" awaiting the GPU (no run_blind{s}_{g}.jsonl)"
        )


if __name__ == "__main__":
    main()
