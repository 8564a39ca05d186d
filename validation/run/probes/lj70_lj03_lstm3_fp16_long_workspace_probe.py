"""cuDNN's workspace and reserve of blind321/lj03's 3-layer LSTM (input 60, hidden 384, no dropout,
unpacked, unidirectional), which the twin names unmeasured: `_rnn._fitted_uni` stops at 400 steps in
training and 800 in inference. lj03 runs it in float16 (autocast's `_cudnn_rnn` cast to half, also under
bf16 autocast) at batch 256 x 937 steps in training and 256 x 1174 in inference; the H100 peaked
3,785,177,600 bytes above the twin in training. Measured with rnn_sweep.py's `measure` (torch._cudnn_rnn
training then inference, aten._cudnn_rnn_backward, the allocator's cumulative requested bytes around
each call): lj03's problems first, then a grid around them (batch 64/256 x 128/256/400/401/512/800/937/
1174 steps) for a rule past 400 steps.

    python3 probes/lj70_lj03_lstm3_fp16_long_workspace_probe.py     (from validation/run; < 40 s, < 10 GB)

One line a problem: batch, seq, train_workspace, reserve, infer_workspace, backward_workspace."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from rnn_sweep import measure

torch.manual_seed(70)
problems = [(256, 937), (256, 1174)]
for b in (64, 256):
    for s in (128, 256, 400, 401, 512, 800, 937, 1174):
        if (b, s) not in problems:
            problems.append((b, s))
for b, s in problems:
    p = dict(mode="lstm", dtype="float16", input_size=60, hidden_size=384, proj_size=0, num_layers=3)
    p.update(bidirectional=False, batch=b, seq_length=s, lengths=None, dropout=0.0)
    rec = {}
    try:
        measure(p, rec)
    except Exception as e:
        rec["error"] = type(e).__name__
    keys = ("train_workspace", "reserve", "infer_workspace", "backward_workspace", "error")
    print(json.dumps({"batch": b, "seq": s, **{k: rec[k] for k in keys if k in rec}}), flush=True)
    torch.cuda.empty_cache()
