"""cuDNN's unpacked multi-layer RNN training workspace: the wavefront's chunk of steps. Session 71
(`_rnn._wavefront_steps`): every unidirectional unpacked training workspace of 2 to 4 layers measured
so far is max(a, f) with f = c0 + roundup(8B, 32) + E * (B * L * fb*h + B * k*h + T * (2h + 2i +
max(h, i))) and k = min(S, c * L + max(c, 8)), c a chunk of steps that cuDNN picks from the batch,
the steps and the layers (32 at batch 1, 16 at batch 3 and 8, 8 from 136 steps at batch 13 to 256,
4 or 2 below 121 steps). The twin knows c only where no measurement disagrees (batch 13-256, 136+
steps). This grid reads c over batch x steps x layers: a float16 GRU of 256 over 256 inputs, whose
training workspace is always f (f - a = E * (3h * (T - min(T, 256B)) + B*h*k) > 0), so each line's
`k` = (train_workspace - f without k) / (E * B * h) gives c. Then 32 problems past the twin's other
step limits: bidirectional LSTM and GRU over 512 and 1,024 steps (the twin's forms, fitted to 400,
have no limit) and packed unidirectional ones (the twin stops at 400 / 800 steps), and 9 unpacked
ones past the twin's 2,048 steps (blind289/kd03's GRU over 3,000, LSTM and GRU over 4,096).

    python3 probes/rn71_rnn_wavefront_chunk_probe.py [SECONDS]     (from validation/run; < 60 s, < 6 GB)
    python3 probes/rn71_rnn_wavefront_chunk_probe.py 50 gaps     (< 20 s, < 8 GB)

`gaps` measures only the grid's GRU between and past the chunks the first run read (batch 9, 17-19,
97-104, 1,536-4,096; 48 to 128 steps, 121-127 among them; 2 and 3 layers).

Measured with rnn_sweep.py's `measure` (torch._cudnn_rnn training then inference,
aten._cudnn_rnn_backward, the allocator's cumulative requested bytes around each call). It stops
measuring at SECONDS (default 50; a line "stopped" says where). One line a problem: the problem,
train_workspace, reserve, infer_workspace, backward_workspace (or the error's type), and for the
grid `k`."""

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from rnn_sweep import measure

BATCHES = (1, 2, 3, 4, 6, 8, 10, 12, 13, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024)
STEPS = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 112, 120, 128, 136, 160, 200, 256, 512, 1024, 2048)
KEYS = ("train_workspace", "reserve", "infer_workspace", "backward_workspace", "error")


def f_without_k(b, s, layers, h=256, i=256, es=2):
    """`_fitted_uni`'s unpacked GRU training form f without its B * k*h term."""
    weights = 3 * h * (i + h) + (layers - 1) * 3 * h * (2 * h)
    c0 = 256 + es * weights + 8 * 1048576 * layers
    return c0 + -(-8 * b // 32) * 32 + es * (b * layers * 5 * h + b * s * (2 * h + 2 * i + max(h, i)))


#: `gaps`: the batches and steps between the measured chunks' rows (`_rnn._WAVEFRONT_CHUNKS`), and past them
GAP_BATCHES = (9, 17, 18, 19, 97, 98, 100, 102, 104, 1536, 2048, 4096)
GAP_STEPS = (48, 64, 100, 120, 121, 124, 127, 128)


def grid(layers, batches=BATCHES, steps=STEPS, tokens=131072):
    for s in steps:
        for b in batches:
            if b * s <= tokens:
                yield dict(
                    mode="gru",
                    dtype="float16",
                    input_size=256,
                    hidden_size=256,
                    num_layers=layers,
                    bidirectional=False,
                    batch=b,
                    seq_length=s,
                    lengths=None,
                )


def extras():
    rng = random.Random(71)
    for mode in ("lstm", "gru"):
        for dtype in ("float16", "float32"):
            for layers in (1, 2):
                for s in (512, 1024):
                    yield dict(
                        mode=mode,
                        dtype=dtype,
                        input_size=256,
                        hidden_size=512,
                        num_layers=layers,
                        bidirectional=True,
                        batch=32,
                        seq_length=s,
                        lengths=None,
                    )
    for mode in ("lstm", "gru"):
        for layers in (1, 2):
            for s in (512, 1024):
                yield dict(
                    mode=mode,
                    dtype="float32",
                    input_size=256,
                    hidden_size=512,
                    num_layers=layers,
                    bidirectional=False,
                    batch=32,
                    seq_length=s,
                    lengths=[s] * 32,
                )
                lengths = sorted([s] + [rng.randint(1, s) for _ in range(31)], reverse=True)
                yield dict(
                    mode=mode,
                    dtype="float32",
                    input_size=256,
                    hidden_size=512,
                    num_layers=layers,
                    bidirectional=False,
                    batch=32,
                    seq_length=s,
                    lengths=lengths,
                )


def longer():
    """past the twin's 2,048 unpacked steps: blind289/kd03's GRU (1,024 inputs, 512 hidden, fp32, batch 4)
    over 3,000 steps (its inference is named unmeasured), then LSTM and GRU over 4,096"""
    yield dict(
        mode="gru",
        dtype="float32",
        input_size=1024,
        hidden_size=512,
        num_layers=1,
        bidirectional=False,
        batch=4,
        seq_length=3000,
        lengths=None,
    )
    for mode in ("lstm", "gru"):
        for dtype in ("float16", "float32"):
            for layers in (1, 2):
                yield dict(
                    mode=mode,
                    dtype=dtype,
                    input_size=256,
                    hidden_size=512,
                    num_layers=layers,
                    bidirectional=False,
                    batch=16,
                    seq_length=4096,
                    lengths=None,
                )


def problems():
    if "gaps" in sys.argv[2:]:
        for layers in (2, 3):
            yield from grid(layers, GAP_BATCHES, GAP_STEPS, 262144)
        return
    yield from grid(2)
    yield from extras()
    yield from longer()
    yield from grid(3)
    yield from grid(4)


torch.manual_seed(71)
budget = float(sys.argv[1]) if len(sys.argv) > 1 else 50.0
start = time.monotonic()
for n, p in enumerate(problems()):
    if time.monotonic() - start > budget:
        print(json.dumps({"stopped": n}), flush=True)
        break
    p.update(proj_size=0, dropout=0.0)
    rec = {}
    try:
        measure(p, rec)
    except Exception as e:
        rec["error"] = type(e).__name__
    line = {k: p[k] for k in ("mode", "dtype", "input_size", "hidden_size", "num_layers", "bidirectional")}
    line.update(batch=p["batch"], seq_length=p["seq_length"], packed=p["lengths"] is not None)
    if p["lengths"] is not None and len(set(p["lengths"])) > 1:
        line["tokens"] = sum(p["lengths"])
        line["lengths"] = p["lengths"]
    line.update({k: rec[k] for k in KEYS if k in rec})
    if (
        "train_workspace" in rec
        and not p["bidirectional"]
        and p["lengths"] is None
        and p["hidden_size"] == 256
    ):
        b = p["batch"]
        line["k"] = (rec["train_workspace"] - f_without_k(b, p["seq_length"], p["num_layers"])) / (
            2 * b * 256
        )
    print(json.dumps(line), flush=True)
    torch.cuda.empty_cache()
