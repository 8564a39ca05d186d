"""cuDNN's workspace and reserve of blind304/ks05's 2-layer float16 GRU (input 96, hidden 1024, no
dropout, unpacked), which `_rnn._fitted_uni` leaves out (unpacked GRUs of 2+ layers over 7 steps without
dropout: "a workspace not linear in B and T"), measured with rnn_sweep.py's `measure` (torch._cudnn_rnn
training then inference, aten._cudnn_rnn_backward, the allocator's cumulative requested bytes around each
call): ks05's training problem (batch 256, 64 steps), its inference problem (256 x 256), and a small grid
around them (batch 64/128/256 x 16/64/128 steps; float32 too) for the table and a rule.

    python3 probes/ks68_gru2_fp16_rnn_workspace_probe.py     (from validation/run; < 30 s, < 4 GB)

One line a problem: dtype, batch, seq, train_workspace, reserve, infer_workspace, backward_workspace."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from rnn_sweep import measure

torch.manual_seed(68)
problems = []
for dtype in ("float16", "float32"):
    for b in (64, 128, 256):
        for s in (16, 64, 128, 256):
            problems.append((dtype, b, s))
for dtype, b, s in problems:
    p = dict(mode="gru", dtype=dtype, input_size=96, hidden_size=1024, proj_size=0, num_layers=2)
    p.update(bidirectional=False, batch=b, seq_length=s, lengths=None, dropout=0.0)
    rec = {}
    try:
        measure(p, rec)
    except Exception as e:
        rec["error"] = type(e).__name__
    keys = ("train_workspace", "reserve", "infer_workspace", "backward_workspace", "error")
    print(json.dumps({"dtype": dtype, "batch": b, "seq": s, **{k: rec[k] for k in keys if k in rec}}))
