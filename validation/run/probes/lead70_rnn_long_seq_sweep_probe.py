"""cuDNN's RNN workspaces and reserve past the twin's fitted range (`_rnn._fitted_uni` stops at 400
steps in training and 800 in inference): a grid of unidirectional, unpacked LSTMs and GRUs in float16
and float32 at 512 to 2,048 steps, for a rule over hidden size, input size and layers (session 70's
blind321/lj03 measured one 3-layer fp16 LSTM only). Measured with rnn_sweep.py's `measure`.

    python3 probes/lead70_rnn_long_seq_sweep_probe.py > OUT.jsonl     (from validation/run; < 6 min, < 20 GB)

One line a problem: the problem, then train_workspace, reserve, infer_workspace, backward_workspace
(or the error's type)."""

import itertools
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from rnn_sweep import measure

torch.manual_seed(70)
grid = itertools.product(
    ("lstm", "gru"), ("float16", "float32"), (256, 512, 1024), (64, 512), (1, 2), (512, 1024, 2048)
)
for mode, dtype, hidden, inp, layers, seq in grid:
    p = dict(mode=mode, dtype=dtype, input_size=inp, hidden_size=hidden, proj_size=0, num_layers=layers)
    p.update(bidirectional=False, batch=64, seq_length=seq, lengths=None, dropout=0.0)
    rec = {}
    try:
        measure(p, rec)
    except Exception as e:
        rec["error"] = type(e).__name__
    keys = ("train_workspace", "reserve", "infer_workspace", "backward_workspace", "error")
    print(json.dumps({**p, **{k: rec[k] for k in keys if k in rec}}), flush=True)
    torch.cuda.empty_cache()
