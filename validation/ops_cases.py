"""Measure forward and backward of single ops and modules on a real GPU, for the eager twin's fixtures.

    python3 ops_cases.py CASE[,CASE...] OUTDIR

CASE is NAME:DTYPE (DTYPE fp32 or bf16), or `env`. Each case (one fresh process per
case: `ops_cases.sh` runs them) builds its module with `device="cuda", dtype=...`,
creates its inputs (and the upstream gradient for `out.backward(grad)`), then
`empty_cache(); reset_peak_memory_stats()`, emits `inputs`, runs the forward, emits
`forward`, runs the backward, emits `backward`. Figures are the probe's five:
memory_allocated, max_memory_allocated, memory_reserved, reserved peak, requested.
Memory history is recorded from the `inputs` step on; OUTDIR/CASE.trace.json keeps a
compact copy of the trace (action, address, size, innermost frames) and
OUTDIR/CASE.pickle the snapshot.
"""
import gc
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

B, S, D, H, FF, V = 4, 128, 256, 8, 1024, 1000


def stats():
    s = torch.cuda.memory_stats()
    return dict(allocated=torch.cuda.memory_allocated(), peak=torch.cuda.max_memory_allocated(),
                reserved=torch.cuda.memory_reserved(), peak_reserved=s.get("reserved_bytes.all.peak", 0),
                requested=s.get("requested_bytes.all.current", 0))


def fresh():
    gc.collect(); torch.cuda.synchronize(); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()


LINES = []


def emit(case, step, **extra):
    torch.cuda.synchronize()
    d = dict(case=case, step=step, **stats()); d.update(extra)
    LINES.append(json.dumps(d))


def build(name, dt):
    """Module, inputs (list), upstream grad maker, and a forward closure."""
    kw = dict(device="cuda", dtype=dt)
    rg = dict(device="cuda", dtype=dt, requires_grad=True)
    if name == "linear2d":
        m = nn.Linear(D, 2 * D, **kw); x = torch.randn(B * S, D, **rg)
        return m, lambda: m(x)
    if name == "linear3d":
        m = nn.Linear(D, 2 * D, **kw); x = torch.randn(B, S, D, **rg)
        return m, lambda: m(x)
    if name in ("gelu", "relu", "sigmoid", "silu", "dropout"):
        m = dict(gelu=nn.GELU(), relu=nn.ReLU(), sigmoid=nn.Sigmoid(), silu=nn.SiLU(), dropout=nn.Dropout(0.1))[name]
        x = torch.randn(B, S, D, **rg)
        return m, lambda: m(x)
    if name == "layernorm":
        m = nn.LayerNorm(D, **kw); x = torch.randn(B, S, D, **rg)
        return m, lambda: m(x)
    if name == "embedding":
        m = nn.Embedding(V, D, **kw); idx = torch.randint(0, V, (B, S), device="cuda")
        return m, lambda: m(idx)
    if name == "mse":
        m = nn.MSELoss(); x = torch.randn(B, S, D, **rg); t = torch.randn(B, S, D, device="cuda", dtype=dt)
        return m, lambda: m(x, t)
    if name == "ce":
        m = nn.CrossEntropyLoss(); x = torch.randn(B * S, V, **rg); t = torch.randint(0, V, (B * S,), device="cuda")
        return m, lambda: m(x, t)
    if name == "seq":
        m = nn.Sequential(nn.Linear(D, FF, **kw), nn.GELU(), nn.Linear(FF, D, **kw)); x = torch.randn(B, S, D, **rg)
        return m, lambda: m(x)
    if name in ("mha_w", "mha_now"):
        m = nn.MultiheadAttention(D, H, batch_first=True, **kw); x = torch.randn(B, S, D, **rg)
        nw = name == "mha_w"
        return m, lambda: m(x, x, x, need_weights=nw)[0]
    if name == "mha_fast":
        m = nn.MultiheadAttention(D, H, batch_first=True, **kw).eval(); x = torch.randn(B, S, D, **kw)
        return m, lambda: m(x, x, x, need_weights=False)[0]
    if name in ("enc_post", "enc_pre"):
        m = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True, norm_first=name == "enc_pre", **kw)
        x = torch.randn(B, S, D, **rg)
        return m, lambda: m(x)
    if name in ("enc_fast", "enc_fast_pre"):
        m = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True, norm_first=name == "enc_fast_pre", **kw).eval()
        x = torch.randn(B, S, D, **kw)
        return m, lambda: m(x)
    raise SystemExit(f"unknown case {name}")


def run_case(case, outdir):
    name, dts = case.split(":")
    dt = dict(fp32=torch.float32, bf16=torch.bfloat16)[dts]
    torch.manual_seed(0)
    m, fwd = build(name, dt)
    nograd = name.endswith("_fast") or name.endswith("_fast_pre")
    # the upstream gradient for out.backward(grad) is made before the measurement starts
    grad = None
    if not nograd and name not in ("mse", "ce"):
        shape = dict(linear2d=(B * S, 2 * D), linear3d=(B, S, 2 * D)).get(name, (B, S, D))
        grad = torch.randn(shape, device="cuda", dtype=dt)
    fresh()
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    emit(case, "inputs")
    if nograd:
        with torch.no_grad():
            out = fwd()
        emit(case, "forward")
    else:
        out = fwd(); emit(case, "forward")
        if grad is None:
            out.backward()
        else:
            out.backward(grad)
        emit(case, "backward")
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = []
    for e in snap["device_traces"][0]:
        fr = [f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in e.get("frames", [])[:3]]
        trace.append([e["action"], e["addr"], e["size"], e.get("stream", 0), fr])
    with open(os.path.join(outdir, case.replace(":", "_") + ".trace.json"), "w") as f:
        json.dump(trace, f)
    import pickle
    with open(os.path.join(outdir, case.replace(":", "_") + ".pickle"), "wb") as f:
        pickle.dump(snap, f)


def main():
    cases, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    torch.cuda.init()
    for case in cases.split(","):
        if case == "env":
            LINES.append(json.dumps(dict(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(),
                cap=torch.cuda.get_device_capability(), total=torch.cuda.get_device_properties(0).total_memory,
                fastpath=torch.backends.mha.get_fastpath_enabled())))
            continue
        try:
            run_case(case, outdir)
        except Exception as e:  # keep the sweep going; the failure is in the output
            LINES.append(json.dumps(dict(case=case, error=repr(e))))
    with open(os.path.join(outdir, cases.replace(":", "_").replace(",", "+") + ".jsonl"), "w") as f:
        f.write("\n".join(LINES) + "\n")


if __name__ == "__main__":
    main()
