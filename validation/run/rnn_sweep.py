"""Measure cuDNN's RNN workspace and training reserve over a sweep of problems, on a GPU.

    python rnn_sweep.py OUT.jsonl [SECONDS] [uni|proj]

For each problem it calls `torch._cudnn_rnn` (training, then inference) and `aten._cudnn_rnn_backward`
directly with contiguous inputs and the flat weight buffer of a module made on the GPU, reading the
caching allocator's cumulative counters (`allocation.all.allocated`, `requested_bytes.all.allocated`)
around each call. What a call requested beyond the storages it returned is cuDNN's workspace
(aten/src/ATen/native/cudnn/RNN.cpp: `_cudnn_rnn` allocates output, hy, cy, the workspace and the
reserve; `_cudnn_rnn_backward` dx, dhx, dcx, the zeroed dw and two workspaces of one size, one in
`_cudnn_rnn_backward_input` and one in `_cudnn_rnn_backward_weight`). The reserve is the returned
uint8 tensor's size.

Problems come in two sets, written in one interleaved order: "fit" (a grid around base problems, one
factor at a time, each with eighteen batch/length shapes, packed and unpacked) and "holdout" (random
problems over the same domain, for checking formulas fitted on the fit set only). With `uni` both sets
are unidirectional: the fit set varies layers, hidden and input sizes around base problems, each on a
grid of batches by lengths (unpacked) and of batches by length spreads (packed). With `proj` every
problem is an LSTM with projections (uni- and bidirectional, float32 and float16), fit and holdout
problems shuffled together. The sweep stops at
SECONDS (default 90) of measuring. A first line names the GPU and versions ("set": "meta"), then one JSON
line per problem:

    {"set", "mode", "dtype", "input_size", "hidden_size", "proj_size", "num_layers", "bidirectional",
     "batch", "seq_length", "lengths" (packed: the descending sequence lengths; else null), "dropout",
     "algo_fwd", "algo_bwd" (RNN.cpp's get_algo, replayed), "train_workspace", "reserve",
     "infer_workspace", "backward_workspace", "counts" ([train, infer, backward] allocations), "error"}
"""

import json
import random
import sys
import time

import torch
import torch.nn as nn

MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def counters():
    s = torch._C._cuda_memoryStats(0)
    return s["allocation"]["all"]["allocated"], s["requested_bytes"]["all"]["allocated"]


def algo(p, forward):
    """RNN.cpp's get_algo (0 standard, 1 persist static, 3 persist static small h), replayed for sm_90 with
    132 SMs."""
    if p["proj_size"] or p["lengths"] is not None:
        return 0
    h, mode = p["hidden_size"], p["mode"]
    rnn = mode in ("rnn_relu", "rnn_tanh")
    if forward and (h <= 384 if rnn else h <= 192):
        return 3
    if not forward and (h <= 256 if rnn else h <= 128):
        return 3
    if p["dtype"] == "float16":
        b = p["batch"]
        common = p["num_layers"] == 1 and h <= 1024 and not p["bidirectional"] and h % 128 == 0
        common = common and p["input_size"] % 128 == 0
        if common and mode != "gru" and b % 8 == 0 and b <= 128 and (mode == "lstm" or b < 96 or h < 896):
            return 1
    return 0


_modules = {}
_states = {}


def module(p):
    key = (p["mode"], p["dtype"], p["input_size"], p["hidden_size"], p["proj_size"], p["num_layers"])
    key = (*key, p["bidirectional"])
    if key not in _modules:
        if len(_modules) >= 400:  # the proj sweep's shuffled order comes back to its configurations
            _modules.clear()
        kw = dict(num_layers=p["num_layers"], bidirectional=p["bidirectional"], device="cuda")
        kw["dtype"] = DTYPES[p["dtype"]]
        if p["mode"] == "lstm":
            m = nn.LSTM(p["input_size"], p["hidden_size"], proj_size=p["proj_size"], **kw)
        elif p["mode"] == "gru":
            m = nn.GRU(p["input_size"], p["hidden_size"], **kw)
        else:
            m = nn.RNN(p["input_size"], p["hidden_size"], nonlinearity=p["mode"][4:], **kw)
        _modules[key] = m
    return _modules[key]


def new_storages(inputs, outputs):
    held = {t.untyped_storage()._cdata for t in inputs if isinstance(t, torch.Tensor)}
    seen, new = set(), []
    for t in outputs:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if s._cdata not in held and s._cdata not in seen and s.nbytes() > 0:
                seen.add(s._cdata)
                new.append(s.nbytes())
    return new


def measure(p, rec):
    """Fill rec with the problem's sizes, forward ones first."""
    m = module(p)
    dtype = DTYPES[p["dtype"]]
    mode = MODES[p["mode"]]
    weights = list(m._flat_weights)
    stride0 = 5 if p["proj_size"] else 4
    wbuf = torch.empty(0, dtype=dtype, device="cuda").set_(weights[0].untyped_storage())
    dirs = 2 if p["bidirectional"] else 1
    out_size = p["proj_size"] or p["hidden_size"]
    b, s = p["batch"], p["seq_length"]
    if p["lengths"] is not None:
        lengths = p["lengths"]
        batch_sizes = [sum(1 for n in lengths if n > t) for t in range(s)]
        x = torch.zeros(sum(lengths), p["input_size"], dtype=dtype, device="cuda")
    else:
        batch_sizes = []
        x = torch.zeros(s, b, p["input_size"], dtype=dtype, device="cuda")
    hx = torch.zeros(p["num_layers"] * dirs, b, out_size, dtype=dtype, device="cuda")
    cx = torch.zeros(p["num_layers"] * dirs, b, p["hidden_size"], dtype=dtype, device="cuda")
    cx = cx if p["mode"] == "lstm" else None
    state = None
    if p["dropout"]:
        if p["dropout"] not in _states:
            _states[p["dropout"]] = torch._cudnn_init_dropout_state(
                p["dropout"], True, 0, dtype=torch.uint8, device="cuda"
            )
        state = _states[p["dropout"]]
    args = (mode, p["hidden_size"], p["proj_size"], p["num_layers"], False, p["dropout"])
    counts = rec["counts"] = []
    for train in (True, False):
        c0, r0 = counters()
        out = torch._cudnn_rnn(
            x, weights, stride0, wbuf, hx, cx, *args, train, p["bidirectional"], batch_sizes, state
        )
        c1, r1 = counters()
        new = new_storages([x, wbuf, hx, cx, state], out)
        rec["train_workspace" if train else "infer_workspace"] = r1 - r0 - sum(new)
        counts.append([c1 - c0, len(new)])
        if train:
            rec["reserve"] = out[3].numel()
            y, hy, cy, reserve = out[0], out[1], out[2], out[3]
        del out
    gy, ghy = torch.zeros_like(y), torch.zeros_like(hy)
    gcy = torch.zeros_like(cy) if cx is not None else None
    c0, r0 = counters()
    out = torch.ops.aten._cudnn_rnn_backward(
        x,
        weights,
        stride0,
        wbuf,
        hx,
        cx,
        y,
        gy,
        ghy,
        gcy,
        *args,
        True,
        p["bidirectional"],
        batch_sizes,
        state,
        reserve,
        [True, True, cx is not None, True],
    )
    c1, r1 = counters()
    flat = [out[0], out[1], out[2], *out[3]]
    new = new_storages([x, wbuf, hx, cx, y, gy, ghy, gcy, reserve], flat)
    rest = r1 - r0 - sum(new)
    rec["backward_workspace"] = rest // 2 if rest % 2 == 0 else -rest
    counts.append([c1 - c0, len(new)])


def lengths_of(rng, b, s, lo):
    """descending lengths, the first s, the rest uniform in [lo, s]"""
    ls = [s] + [rng.randint(lo, s) for _ in range(b - 1)]
    return sorted(ls, reverse=True)


def with_batch(rng, p, max_seq, packed_p):
    """`p` with a random batch (1-128) and length (1-`max_seq`), packed with probability `packed_p`
    (the held-out problems' common tail; the draws in the order the recorded sweeps made them)."""
    b, s = rng.randint(1, 128), rng.randint(1, max_seq)
    p.update(batch=b, seq_length=s, lengths=None)
    if rng.random() < packed_p:
        p["lengths"] = lengths_of(rng, b, s, rng.randint(1, s))
    return p


def shapes(rng):
    """(batch, seq, lengths) of the fit set"""
    out = [(32, 50, None), (8, 50, None), (32, 13, None), (1, 1, None), (64, 100, None), (5, 7, None)]
    out += [(100, 7, None), (3, 200, None), (1, 17, [17])]
    out.append((8, 50, lengths_of(rng, 8, 50, 1)))
    out.append((64, 13, lengths_of(rng, 64, 13, 5)))
    out.append((100, 7, lengths_of(rng, 100, 7, 1)))
    out.append((32, 50, [50] * 32))
    out.append((32, 50, lengths_of(rng, 32, 50, 25)))
    out.append((32, 50, lengths_of(rng, 32, 50, 25)))
    out.append((16, 30, lengths_of(rng, 16, 30, 1)))
    out.append((64, 100, lengths_of(rng, 64, 100, 50)))
    out.append((33, 20, lengths_of(rng, 33, 20, 1)))
    return out


def fit_configs(mode, dtype):
    base = dict(mode=mode, dtype=dtype, input_size=256, hidden_size=512, proj_size=0, num_layers=2)
    base.update(bidirectional=True, dropout=0.0)
    full = dtype == "float32"
    hiddens = [256, 768, 1024, 300, 1000, 384, 640, 64, 128, 160, 200] if full else [256, 1024, 300, 128]
    inputs = [32, 80, 100, 500, 1000, 1] if full else [80]
    layers = [1, 3, 4] if full else [1, 3]
    out = [base]
    out += [{**base, "hidden_size": h} for h in hiddens]
    out += [{**base, "input_size": i} for i in inputs]
    out += [{**base, "num_layers": n} for n in layers]
    out.append({**base, "bidirectional": False})
    out.append({**base, "bidirectional": False, "num_layers": 1})
    out.append({**base, "bidirectional": False, "num_layers": 3, "hidden_size": 256})
    out.append({**base, "dropout": 0.25})
    if full:
        out.append({**base, "dropout": 0.25, "num_layers": 3, "bidirectional": False})
    if mode == "lstm":
        out += [{**base, "proj_size": 128}, {**base, "proj_size": 256, "num_layers": 3}]
        if full:
            out.append({**base, "proj_size": 100, "bidirectional": False, "hidden_size": 300})
    return out


def holdout(rng):
    mode = rng.choice(list(MODES))
    dtype = rng.choice(["float32", "float32", "bfloat16", "float16"])
    hidden = rng.randint(16, 1100)
    p = dict(mode=mode, dtype=dtype, input_size=rng.randint(1, 1100), hidden_size=hidden, proj_size=0)
    p.update(num_layers=rng.randint(1, 4), bidirectional=rng.random() < 0.5)
    p["dropout"] = 0.3 if p["num_layers"] > 1 and rng.random() < 0.3 else 0.0
    if mode == "lstm" and rng.random() < 0.4 and hidden > 1:
        p["proj_size"] = rng.randint(1, hidden - 1)
    return with_batch(rng, p, 400, 0.6)


def problems(seed=31):
    rng = random.Random(seed)
    grid = []
    for dtype in ("float32", "bfloat16", "float16"):
        for mode in MODES:
            for c in fit_configs(mode, dtype):
                for b, s, ls in shapes(rng):
                    grid.append({"set": "fit", **c, "batch": b, "seq_length": s, "lengths": ls})
    n_hold = len(grid) // 6
    hold = [{"set": "holdout", **holdout(rng)} for _ in range(n_hold)]
    out, h = [], 0
    for i, p in enumerate(grid):
        out.append(p)
        if i % 6 == 5 and h < len(hold):
            out.append(hold[h])
            h += 1
    return out + hold[h:]


def uni_shapes(rng):
    """(batch, seq, lengths) of the unidirectional fit set: batches by lengths, unpacked, then packed
    batches with lengths spread from all equal to 1..S"""
    out = [(b, s, None) for b in (1, 3, 8, 32, 64, 128) for s in (2, 7, 50, 200)]
    out += [(1, 1, None), (32, 1, None)]
    for b, s in ((1, 30), (4, 40), (8, 50), (16, 30), (32, 50), (64, 20), (100, 7), (128, 60)):
        lo = rng.choice([1, max(1, s // 2), s])
        out.append((b, s, lengths_of(rng, b, s, lo)))
    for b, s, lo in ((32, 50, 1), (32, 50, 45), (64, 100, 90), (3, 200, 1), (64, 13, 13), (50, 120, 1)):
        out.append((b, s, lengths_of(rng, b, s, lo)))
    return out


def uni_configs(mode, dtype):
    base = dict(mode=mode, dtype=dtype, input_size=256, hidden_size=512, proj_size=0, num_layers=2)
    base.update(bidirectional=False, dropout=0.0)
    full = dtype == "float32"
    rnn = mode.startswith("rnn")
    out = [{**base, "num_layers": n} for n in (1, 2, 3, 4)]
    hiddens = [64, 128, 256, 300, 640, 1024] if full and not rnn else [256, 1024]
    inputs = [40, 1000, 2000] if full and not rnn else [1000]
    for n in (1, 2) if full and not rnn else (2,):
        out += [{**base, "num_layers": n, "hidden_size": h} for h in hiddens]
        out += [{**base, "num_layers": n, "input_size": i} for i in inputs]
    if full:
        out += [{**base, "dropout": 0.25}, {**base, "num_layers": 3, "dropout": 0.25, "input_size": 100}]
    if mode == "lstm" and full:
        out += [{**base, "proj_size": 128}, {**base, "num_layers": 1, "proj_size": 200}]
    return out


def uni_holdout(rng):
    mode = rng.choice(["lstm", "lstm", "gru", "gru", "rnn_tanh", "rnn_relu"])
    dtype = rng.choice(["float32", "float32", "float16"])
    hidden = rng.randint(16, 1100)
    p = dict(mode=mode, dtype=dtype, input_size=rng.randint(1, 1100), hidden_size=hidden, proj_size=0)
    p.update(num_layers=rng.randint(1, 4), bidirectional=False)
    p["dropout"] = 0.3 if p["num_layers"] > 1 and rng.random() < 0.3 else 0.0
    if mode == "lstm" and rng.random() < 0.15 and hidden > 1:
        p["proj_size"] = rng.randint(1, hidden - 1)
    return with_batch(rng, p, 300, 0.5)


def uni_problems(seed=32):
    rng = random.Random(seed)
    grid = []
    order = [(m, "float32") for m in ("lstm", "gru", "rnn_tanh")]
    order += [(m, "float16") for m in ("lstm", "gru", "rnn_tanh")]
    for mode, dtype in order:
        for c in uni_configs(mode, dtype):
            for b, s, ls in uni_shapes(rng):
                grid.append({"set": "fit", **c, "batch": b, "seq_length": s, "lengths": ls})
    hold = [{"set": "holdout", **uni_holdout(rng)} for _ in range(len(grid) // 5)]
    out, h = [], 0
    for i, p in enumerate(grid):
        out.append(p)
        if i % 5 == 4 and h < len(hold):
            out.append(hold[h])
            h += 1
    return out + hold[h:]


def proj_configs(dtype):
    """projected LSTMs: base (input 256, hidden 512, proj 128, 2 layers) varied one factor at a time,
    unidirectional and bidirectional"""
    base = dict(mode="lstm", dtype=dtype, input_size=256, hidden_size=512, proj_size=128, num_layers=2)
    base.update(bidirectional=False, dropout=0.0)
    out = []
    for bi in (False, True):
        b = {**base, "bidirectional": bi}
        if dtype == "float16":
            out += [b, {**b, "num_layers": 1}, {**b, "input_size": 1000}, {**b, "dropout": 0.25}]
            continue
        out += [{**b, "num_layers": n} for n in (1, 2, 3)] + ([{**b, "num_layers": 4}] if not bi else [])
        for n in (1, 2):
            out += [{**b, "num_layers": n, "proj_size": p} for p in (32, 256, 511)]
            out += [{**b, "num_layers": n, "input_size": i} for i in (40, 700, 1000, 2000)]
        out += [{**b, "hidden_size": 1024, "proj_size": 256, "input_size": 512}, {**b, "hidden_size": 256}]
        out += [{**b, "hidden_size": 128, "proj_size": 64}, {**b, "num_layers": 1, "hidden_size": 300}]
        out += [{**b, "dropout": 0.25}, {**b, "num_layers": 3, "dropout": 0.25, "input_size": 100}]
    return out


def proj_shapes(rng):
    """(batch, seq, lengths): batches by lengths unpacked, a one-step batch, then packed spreads"""
    out = [(b, s, None) for b in (1, 8, 32, 128) for s in (2, 7, 50, 200)]
    out += [(32, 1, None), (3, 50, None), (8, 300, None)]
    for b, s in ((1, 30), (8, 50), (32, 50), (100, 7)):
        out.append((b, s, lengths_of(rng, b, s, rng.choice([1, max(1, s // 2), s]))))
    for b, s, lo in ((32, 50, 1), (64, 100, 90), (3, 200, 1), (50, 120, 1)):
        out.append((b, s, lengths_of(rng, b, s, lo)))
    return out


def proj_holdout(rng):
    dtype = rng.choice(["float32", "float32", "float16"])
    hidden = rng.randint(16, 1100)
    p = dict(mode="lstm", dtype=dtype, input_size=rng.randint(1, 1500), hidden_size=hidden)
    p.update(proj_size=rng.randint(1, hidden - 1), num_layers=rng.randint(1, 4))
    p["bidirectional"] = rng.random() < 0.35
    p["dropout"] = 0.3 if p["num_layers"] > 1 and rng.random() < 0.3 else 0.0
    return with_batch(rng, p, 300, 0.5)


def proj_problems(seed=33):
    rng = random.Random(seed)
    grid = []
    for dtype in ("float32", "float16"):
        for c in proj_configs(dtype):
            for b, s, ls in proj_shapes(rng):
                grid.append({"set": "fit", **c, "batch": b, "seq_length": s, "lengths": ls})
    hold = [{"set": "holdout", **proj_holdout(rng)} for _ in range(len(grid) // 4)]
    # interleaved at random so that a sweep stopped early still covers every configuration
    out = grid + hold
    rng.shuffle(out)
    return out


def main():
    path = sys.argv[1]
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 90.0
    torch.cuda.init()
    kind = sys.argv[3] if len(sys.argv) > 3 else "bi"
    todo = {"uni": uni_problems, "proj": proj_problems}.get(kind, problems)()
    print(
        f"{len(todo)} problems; torch {torch.__version__} cudnn {torch.backends.cudnn.version()}", flush=True
    )
    t0 = time.monotonic()
    done = 0
    with open(path, "w", buffering=1) as f:
        props = torch.cuda.get_device_properties(0)
        meta = {"set": "meta", "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
        meta.update(
            gpu=props.name, sms=props.multi_processor_count, allow_tf32=torch.backends.cudnn.allow_tf32
        )
        f.write(json.dumps(meta) + "\n")
        for p in todo:
            if time.monotonic() - t0 > budget:
                break
            rec = dict(p, algo_fwd=algo(p, True), algo_bwd=algo(p, False))
            try:
                measure(p, rec)
            except Exception as e:  # a problem cuDNN refuses is recorded, not fatal
                rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            f.write(json.dumps(rec) + "\n")
            done += 1
    torch.cuda.synchronize()
    print(f"{done} of {len(todo)} measured in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
