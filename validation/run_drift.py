"""Drift survey: re-answer blind scripts whose latest answers are exact in every phase, and list those
that no longer are.

    python validation/run_drift.py --list [fixtures/run]
    python validation/run_drift.py OUT.jsonl [--sample K] [--newest N] [--seed S] [SET/SCRIPT ...]

`--list` prints, one a line, `blindN GPU SCRIPT` for every script exact in all five figures of every
phase of its latest answers (the tally's choice, validation/run_blind_tally.py: the set's after file
over its as-answered file). Otherwise the scripts named (`blind290/ke02` or a unique prefix of the
stem), or a sample of K of the exact ones (`--newest N` sets give two thirds of it, the older sets the
rest, spread one script a set in turn), are answered one at a time with `vramscope run --gpu GPU`
(validation/run_answers.py's `answer`; the set's GPU) and appended to OUT.jsonl as they finish; a
script already in OUT.jsonl is not answered again. Then each answered script is compared with its
set's GPU run, and those not exact in every phase are printed with the first differing phase's five
figures (GPU, twin, twin - GPU).
"""

import argparse
import json
import os
import random
import re
import sys
import time

from run_answers import KEYS, answer
from run_blind_tally import sets
from run_compare import compare, fixture, load

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "run")


def latest(fx, s, g):
    """The set's latest answers: its after file over its as-answered file (run_blind_tally.py's rule)."""
    answered = load(os.path.join(fx, f"answers_blind{s}_{g}.jsonl"))
    if s == "21":
        answered.update(load(os.path.join(fx, "answers_blind21b_h200.jsonl")))
    after = fixture(os.path.join(fx, f"answers_blind{'4' if s == '4b' else s}_after_{g}.jsonl"))
    return {**answered, **load(after)} if after else answered


def exact_scripts(fx):
    """[(set, gpu, script)] exact in every phase of their latest answers, oldest set first."""
    out = []
    for s, g in sets(fx):
        if not fixture(os.path.join(fx, f"answers_blind{s}_{g}.jsonl")):
            continue
        gpu = load(os.path.join(fx, f"run_blind{s}_{g}.jsonl"))
        raised = {k for k, rs in gpu.items() if any(r.get("exception") for r in rs)}
        for script, n, ex, *_ in compare(gpu, latest(fx, s, g)):
            if ex == n and script not in raised:
                out.append((s, g, script))
    return out


def path_of(s, script):
    """The script's file: validation/run/blindN/SCRIPT.py (blind4b's live in blind4)."""
    return os.path.join(HERE, "run", f"blind{re.match(r'[0-9]+', s).group()}", script + ".py")


def sample(exact, k, newest, seed):
    """k of `exact`: two thirds from the newest `newest` sets, the rest from the older ones; within each
    part the sets are visited in turn (a shuffled order), taking one random script a visit."""
    rng = random.Random(seed)
    order = sorted({s for s, _, _ in exact}, key=lambda s: (int(re.match(r"[0-9]+", s).group()), s))
    new = set(order[-newest:])
    picked = []
    for part, want in ((new, round(2 * k / 3)), (set(order) - new, k - round(2 * k / 3))):
        by_set = {}
        for row in exact:
            if row[0] in part:
                by_set.setdefault(row[0], []).append(row)
        for rows in by_set.values():
            rng.shuffle(rows)
        keys = sorted(by_set)
        rng.shuffle(keys)
        got = 0
        while got < want and any(by_set.values()):
            for s in keys:
                if by_set[s] and got < want:
                    picked.append(by_set[s].pop())
                    got += 1
    return picked


def named(exact, names):
    """The rows of `exact` named `blindN/PREFIX` (a unique prefix of the script's stem)."""
    out = []
    for name in names:
        s, prefix = name.removeprefix("blind").split("/", 1)
        rows = [r for r in exact if r[0] == s and r[2].startswith(prefix)]
        if len(rows) != 1:
            sys.exit(f"{name}: {len(rows)} exact scripts match")
        out += rows
    return out


def done(out):
    """{(set, script): [lines]} already in OUT.jsonl."""
    got = {}
    if os.path.exists(out):
        for line in open(out):
            r = json.loads(line)
            got.setdefault((r["set"], r["script"]), []).append(r)
    return got


def report(fx, got):
    """Print the answered scripts not exact in every phase against their set's GPU run."""
    drifted = 0
    for s, script in sorted(got, key=lambda k: (int(re.match(r"[0-9]+", k[0]).group()), k)):
        lines = got[(s, script)]
        g = lines[0]["gpu"]
        gpu = {script: load(os.path.join(fx, f"run_blind{s}_{g}.jsonl"))[script]}
        ((_, n, ex, *_),) = compare(gpu, {script: lines})
        if ex == n:
            continue
        drifted += 1
        print(f"blind{s} {script[:60]} ({g}): {ex} of {n} phases exact")
        if any(r.get("error") for r in lines) or len(lines) != n:
            print("    failed or phases differ:", lines[-1].get("error", "")[-300:].replace("\n", " | "))
            continue
        for x, y in zip(gpu[script], lines, strict=True):
            if any(x[k] != y[k] for k in KEYS):
                print(f"    phase {x['phase']}")
                for k in KEYS:
                    print(f"      {k:<15} gpu {x[k]:>14,} twin {y[k]:>14,} diff {y[k] - x[k]:>+14,}")
                break
    print(f"{len(got)} answered, {drifted} not exact in every phase")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--fixtures", default=FIXTURES)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--newest", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", action="store_true", help="only compare what OUT.jsonl holds")
    a = ap.parse_args()
    exact = exact_scripts(a.fixtures)
    if a.list:
        for s, g, script in exact:
            print(f"blind{s} {g} {script}")
        print(f"{len(exact)} scripts exact in every phase of their latest answers", file=sys.stderr)
        return
    got = done(a.out)
    if not a.report:
        todo = named(exact, a.names) + (sample(exact, a.sample, a.newest, a.seed) if a.sample else [])
        for s, g, script in todo:
            if (s, script) in got:
                continue
            os.environ["GPU"] = g
            t = time.time()
            try:
                lines = answer(path_of(s, script), name=script)
            except Exception as e:  # a timeout: recorded as a failed answer
                lines = [{"script": script, "phase": "end", "exit": -1, "error": repr(e)}]
            for r in lines:
                r.update(set=s, gpu=g, seconds=round(time.time() - t, 1))
            with open(a.out, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in lines)
            got[(s, script)] = lines
            print(f"blind{s} {script[:50]} {g} {time.time() - t:.0f}s exit {lines[-1]['exit']}", flush=True)
    report(a.fixtures, got)


if __name__ == "__main__":
    main()
