"""cuDNN's workspace and reserve of blind312/la05's 2-layer GRUs (SampleRNN's frame tiers: input 1024,
hidden 1024, no dropout, unpacked), which the twin names unmeasured: `_rnn._fitted_uni` leaves out
unpacked GRUs of 2+ layers over 7 steps without dropout in training, and inference past 800 steps.
la05 trains them in float16 (autocast's cast) at batch 64 x 64 and 64 x 256 steps and evaluates them in
float32 at 32 x 256 and 32 x 1024. Measured with rnn_sweep.py's `measure` (torch._cudnn_rnn training
then inference, aten._cudnn_rnn_backward, the allocator's cumulative requested bytes around each call),
la05's four problems first, then a small grid around them (batch 32/64/128 x 16/64/256 steps and 32 x 1024,
both dtypes) for the table and a rule.

    python3 probes/la69_la05_gru_workspace_probe.py     (from validation/run; < 40 s, < 8 GB)

One line a problem: dtype, batch, seq, train_workspace, reserve, infer_workspace, backward_workspace."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from rnn_sweep import measure

torch.manual_seed(69)
problems = [("float16", 64, 64), ("float16", 64, 256), ("float32", 32, 256), ("float32", 32, 1024)]
for dtype in ("float16", "float32"):
    for b in (32, 64, 128):
        for s in (16, 64, 256, 1024):
            if (dtype, b, s) not in problems and (s < 1024 or b == 32):
                problems.append((dtype, b, s))
for dtype, b, s in problems:
    p = dict(mode="gru", dtype=dtype, input_size=1024, hidden_size=1024, proj_size=0, num_layers=2)
    p.update(bidirectional=False, batch=b, seq_length=s, lengths=None, dropout=0.0)
    rec = {}
    try:
        measure(p, rec)
    except Exception as e:
        rec["error"] = type(e).__name__
    keys = ("train_workspace", "reserve", "infer_workspace", "backward_workspace", "error")
    print(json.dumps({"dtype": dtype, "batch": b, "seq": s, **{k: rec[k] for k in keys if k in rec}}))
