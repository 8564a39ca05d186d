"""cuDNN's packed unidirectional LSTM/GRU training workspace past 400 steps. The twin's forms
(`_rnn._fitted_uni`, docs/cudnn-rnn.md) hold for packed training to 400 steps and for packed inference
to 1,024; past 400 the training workspace is named unmeasured: the H100 chunk probe
(fixtures/run/probes/rn71_rnn_wavefront_chunk_probe_h100_v2.jsonl, float32, input 256, hidden 512,
batch 32 over 512 and 1,024 steps) has 8 of its 16 packed training problems above the linear form
max(a, f) (one layer) or a (more layers), by 1 to 34 MB; the one-layer ones by E * h * T / 2 exactly,
the two-layer ones otherwise. This grid reads where and how:

- `one`: one layer, equal lengths, batch 32, steps 256 to 2,048: the steps where the excess starts,
  and whether it is E * T * h / 2 (float32 and float16 both) or 2 * T * h bytes;
- `spread`: max length 640 and 1,024 with short others (one long sequence, halves, a linear spread),
  1 and 2 layers: whether the switch follows the longest sequence or the tokens per sequence;
- `coef`: one layer at 768 and 1,024 steps, hidden 256/1,024, input 128/1,024, batch 1/8/64;
- `layers`: 2 and 3 layers, batch 8 and 32, 320 to 2,048 steps, then 2 layers at 768 and 1,024 steps
  with hidden 256/1,024, input 128/1,024, batch 1/64: the multi-layer form.

LSTM and GRU, float32 and float16 throughout, no dropout, at most 65,536 tokens (< 6 GB).

    python3 probes/rn72_rnn_packed_long_training_probe.py [SECONDS]     (from validation/run; < 60 s)

Measured with rnn_sweep.py's `measure` (torch._cudnn_rnn training then inference,
aten._cudnn_rnn_backward, the allocator's cumulative requested bytes around each call). It stops
measuring at SECONDS (default 50; a line "stopped" says where). One line a problem: the part, the
problem (`lengths` the descending lengths where not all equal, `tokens` their sum), train_workspace,
reserve, infer_workspace, backward_workspace (or the error's type)."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from rnn_sweep import measure

KEYS = ("train_workspace", "reserve", "infer_workspace", "backward_workspace", "error")
MODES_DTYPES = [(m, d) for m in ("lstm", "gru") for d in ("float32", "float16")]
TOKENS = 65536


def problem(part, mode, dtype, i, h, layers, b, s, lengths=None):
    return dict(
        part=part,
        mode=mode,
        dtype=dtype,
        input_size=i,
        hidden_size=h,
        num_layers=layers,
        bidirectional=False,
        batch=b,
        seq_length=s,
        lengths=lengths or [s] * b,
    )


def spreads(b, s):
    """descending lengths with the longest s: one long and the rest 64, halves, a linear spread"""
    yield "one_long", [s] + [64] * (b - 1)
    yield "halves", [s] * (b // 2) + [s // 2] * (b - b // 2)
    yield "linear", [s - j * (s - 16) // b for j in range(b)]


def problems():
    for s in (256, 320, 384, 400, 416, 448, 480, 500, 512, 544, 640, 768, 1024, 2048):
        for mode, dtype in MODES_DTYPES:
            yield problem("one", mode, dtype, 256, 512, 1, 32, s)
    for s in (1024, 640):
        for layers in (1, 2):
            for mode, dtype in MODES_DTYPES:
                for _, lengths in spreads(32, s):
                    yield problem("spread", mode, dtype, 256, 512, layers, 32, s, lengths)
    for s in (1024, 768):
        for i, h, b in ((256, 256, 32), (256, 1024, 32), (128, 512, 32), (1024, 512, 32), (256, 512, 1)):
            for mode, dtype in MODES_DTYPES:
                yield problem("coef", mode, dtype, i, h, 1, b, s)
        for b in (8, 64):
            for mode, dtype in MODES_DTYPES:
                yield problem("coef", mode, dtype, 256, 512, 1, b, s)
    for layers in (2, 3):
        for s in (320, 400, 448, 512, 640, 768, 1024, 2048):
            for b in (32, 8):
                for mode, dtype in MODES_DTYPES:
                    yield problem("layers", mode, dtype, 256, 512, layers, b, s)
    for s in (1024, 768):
        for i, h, b in (
            (256, 256, 32),
            (256, 1024, 32),
            (128, 512, 32),
            (1024, 512, 32),
            (256, 512, 1),
            (256, 512, 64),
        ):
            for mode, dtype in MODES_DTYPES:
                yield problem("layers", mode, dtype, i, h, 2, b, s)


torch.manual_seed(72)
budget = float(sys.argv[1]) if len(sys.argv) > 1 else 50.0
start = time.monotonic()
for n, p in enumerate(problems()):
    if time.monotonic() - start > budget:
        print(json.dumps({"stopped": n}), flush=True)
        break
    if sum(p["lengths"]) > TOKENS:
        continue
    p.update(proj_size=0, dropout=0.0)
    rec = {}
    try:
        measure(p, rec)
    except Exception as e:
        rec["error"] = type(e).__name__
    line = {k: p[k] for k in ("part", "mode", "dtype", "input_size", "hidden_size", "num_layers")}
    line.update(batch=p["batch"], seq_length=p["seq_length"], tokens=sum(p["lengths"]))
    if len(set(p["lengths"])) > 1:
        line["lengths"] = p["lengths"]
    line.update({k: rec[k] for k in KEYS if k in rec})
    print(json.dumps(line), flush=True)
    torch.cuda.empty_cache()
