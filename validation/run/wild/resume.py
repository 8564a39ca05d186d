"""The names of a sweep's table not yet run: the entries whose rows no summary file holds.

    python validation/run/wild/resume.py KIND SUMMARY.jsonl...   (KIND: examples, programs, torchbench,
                                                                 tutorials, lightning)

prints the names, space-separated, in the table's order (for `KIND.py gpu CHECKOUT OUT NAME...`); a
summary file that does not exist counts as empty. `gpu_call.sh` passes the committed H200 summaries
(fixtures/run/summary_wild_KIND_h200.jsonl) and the call's own, so that a call goes on where the last one
stopped.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def names(kind):
    if kind == "examples":
        import sweep

        return [e[0] for e in sweep.EXAMPLES]
    if kind == "programs":
        import programs

        return [p[0] for p in programs.PROGRAMS]
    if kind == "torchbench":
        import torchbench

        return [m[0] for m in torchbench.MODELS]
    if kind == "tutorials":
        import tutorials

        return [t[0] for t in tutorials.TUTORIALS]
    if kind == "lightning":
        import lightning  # this folder's runner, first on sys.path

        return [p[0] for p in lightning.PROGRAMS]
    sys.exit(f"resume.py: unknown sweep {kind!r} (examples, programs, torchbench, tutorials, lightning)")


def main():
    kind, summaries = sys.argv[1], sys.argv[2:]
    done = set()
    for path in summaries:
        if os.path.exists(path):
            done |= {json.loads(line)["script"] for line in open(path) if line.strip()}
    print(" ".join(n for n in names(kind) if n not in done))


if __name__ == "__main__":
    main()
