"""Session 68 (helper kp): the caching allocator's alloc/free events (memory history, sizes in bytes,
in order) of the blind301 phases that miss by a few blocks on the H100, to diff against the twin's
(plain `python3`, one GPU, < 60 s, < 8 GB). Each case runs the blind script's own source, read from
validation/run/blind301/, with its loop counts shortened as listed (sizes unchanged), in this one
process; the phase boundaries are the scripts' own `torch.cuda.reset_peak_memory_stats()` calls,
at each of which the phase's events are printed (for the phases named) and recording restarts.

- kp01 phase 3 (Monte-Carlo q-EI; as answered after the solve_triangular fix: peak +1,024 bytes):
  fit 2 steps, EI restarts 2, q-EI 2, refit 1.
- kp02 phases 1 and 2 (ADVI: peak +2,560; von Mises MAP: +512): ADVI 2 steps, MAP 2 steps.
- kp04 phase 3 (RSA and whitened lstsq: peak +38,279,680, reserved +106,954,752): SVCCA over
  the diagonal layer pairs only.
"""

import gc
import glob
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [
    (
        "kp01",
        {3},
        [
            ("loss = fit(gp, x, y, 40, 0.05)", "loss = fit(gp, x, y, 2, 0.05)"),
            ("for _ in range(30):", "for _ in range(2):"),
            ("for _ in range(20):", "for _ in range(2):"),
            ("loss = fit(gp, x, y, 10, 0.02)", "loss = fit(gp, x, y, 1, 0.02)"),
        ],
    ),
    (
        "kp02",
        {1, 2},
        [
            ("N, G, P, S, STEPS = 262144, 512, 16, 16, 40", "N, G, P, S, STEPS = 262144, 512, 16, 16, 2"),
            ("for _step in range(60):", "for _step in range(2):"),
        ],
    ),
    ("kp04", {3}, [("        for lb in LAYERS:", "        for lb in (la,):")]),
]

original_reset = torch.cuda.reset_peak_memory_stats
state = {}


def events():
    snap = torch.cuda.memory._snapshot()
    out = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            out.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            out.append(f"-{e['size']}")
    return out


def reset_and_dump(*args, **kwargs):
    ev = events()
    torch.cuda.memory._record_memory_history(enabled=None)
    if state["phase"] in state["wanted"]:
        print(
            f"PHASE {state['tag']} phase{state['phase']}: peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        print(f"EVENTS {state['tag']} phase{state['phase']}: {' '.join(ev)}")
    state["phase"] += 1
    original_reset(*args, **kwargs)
    torch.cuda.memory._record_memory_history(max_entries=1000000)


torch.cuda.reset_peak_memory_stats = reset_and_dump
for tag, wanted, subs in CASES:
    path = glob.glob(os.path.join(HERE, "..", "blind301", f"{tag}_*.py"))[0]
    src = open(path).read()
    for old, new in subs:
        assert old in src, (tag, old)
        src = src.replace(old, new)
    state.update(tag=tag, wanted=wanted, phase=0)
    original_reset()
    torch.cuda.memory._record_memory_history(max_entries=1000000)
    namespace = {"__name__": "__main__", "__file__": path}
    exec(compile(src, path, "exec"), namespace)
    torch.cuda.memory._record_memory_history(enabled=None)
    namespace.clear()
    gc.collect()
    torch.cuda.empty_cache()
