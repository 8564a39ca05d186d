"""The measured table of cuDNN RNN workspaces and reserves for the twin, from ops_truth.py's records.

    python rnn_table.py GPU_OPS_DIR [TABLE.json] > python/vramscope/cudnn_rnn_h200.json

With TABLE.json (the table as it stands) its problems are kept in their order and the new ones appended
(a problem measured otherwise than the table says is reported on stderr and the table's figure kept).

GPU_OPS_DIR holds ops_truth.py's lines of each script on the GPU (validation/run/truth.sh). For every
`_cudnn_rnn` line (training) the reserve is its last new uint8 storage and the workspace what the op
requested beyond its new outputs and the contiguous copy of a non-contiguous input (`input.contiguous()`
in `_cudnn_rnn`, aten/src/ATen/native/cudnn/RNN.cpp); an inference line (no reserve) gives its workspace
alone. Each `_cudnn_rnn_backward` line requests two workspaces of one size (`_cudnn_rnn_backward_input`,
then `_cudnn_rnn_backward_weight`) beside what RNN.cpp allocates by name: the zeros of undefined
gradients, the contiguous copies of x (twice) and dy, dx, dhx, dcx and the zeroed dw. Under
inference_mode the dispatch mode sees the whole `lstm` / `gru` / `rnn_tanh` / `rnn_relu` op (no
autograd key, so its CompositeImplicitAutograd body runs below the mode) and not `_cudnn_rnn`: such a
line (the unpacked `.input` overload) is an inference problem whose workspace is what the op requested
beyond its new outputs (output, hy, cy) and the time-major copy of a batch-first input. A line whose
counts admit no such reading is reported on stderr and left out.
"""

import glob
import json
import os
import sys

MODES = {0: "rnn_relu", 1: "rnn_tanh", 2: "lstm", 3: "gru"}
SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "uint8": 1}


def nbytes(t):
    n = 1
    for s in t[0]:
        n *= s
    return n * SIZES[t[2]]


def contiguous(sizes, strides):
    expect = 1
    for s, st in zip(reversed(sizes), reversed(strides), strict=True):
        if s != 1 and st != expect:
            return False
        expect *= s
    return True


def transposed(t):
    """sizes and strides of t.transpose(0, 1)."""
    s, st = list(t[0]), list(t[1])
    s[0], s[1] = s[1], s[0]
    st[0], st[1] = st[1], st[0]
    return s, st


def seq_view(t, batch_first, packed):
    """The tensor as RNN.cpp's kernels see it: time-major."""
    if batch_first and not packed:
        return transposed(t)
    return t[0], t[1]


def copy_bytes(t, batch_first, packed):
    s, st = seq_view(t, batch_first, packed)
    return 0 if contiguous(s, st) else nbytes(t)


def key(a, input_t):
    mode, hidden, proj, layers, batch_first, _dropout, train, bidir, batch_sizes = (
        a[6],
        a[7],
        a[8],
        a[9],
        a[10],
        a[11],
        a[12],
        a[13],
        a[14],
    )
    packed = bool(batch_sizes)
    if packed:
        batch, seq = batch_sizes[0], len(batch_sizes)
    else:
        seq, batch = seq_view(input_t, batch_first, packed)[0][:2]
    return {
        "mode": MODES[mode],
        "dtype": input_t[2],
        "input_size": input_t[0][-1],
        "hidden_size": hidden,
        "proj_size": proj,
        "num_layers": layers,
        "bidirectional": bool(bidir),
        "batch": batch,
        "seq_length": seq,
        "batch_sizes": list(batch_sizes) if packed else None,
        "train": bool(train),
    }


def forward(rec):
    a = rec["args"]
    x = a[0]
    batch_first, batch_sizes = a[10], a[14]
    packed = bool(batch_sizes)
    k = key(a, x)
    new = rec["new"]
    copy = copy_bytes(x, batch_first, packed)
    ws = rec["requested"] - sum(new) - copy
    if not k["train"]:
        # inference: x copy (if any), output, hy, cy (LSTM), the workspace where cuDNN asks one
        if rec["count"] != len(new) + (1 if copy else 0) + (1 if ws > 0 else 0) or ws < 0:
            return None
        return k, ws, None
    # x copy (if any), output, hy, cy (LSTM), workspace, reserve; weights not in one flat buffer
    # (weight_buf undefined) come back as a new flat weight_buf after the reserve (RNN.cpp's _cudnn_rnn)
    expect = len(new) + 1 + (1 if copy else 0) + (1 if ws == 0 else 0)
    if rec["count"] != expect or ws < 0:
        return None
    return k, ws, new[-2] if a[3] is None else new[-1]


def backward(rec):
    a = rec["args"]
    x, w_buf, hx, cx, out, g_out, g_hy, g_cy = a[0], a[3], a[4], a[5], a[6], a[7], a[8], a[9]
    mode, batch_first, batch_sizes = a[10], a[14], a[18]
    packed = bool(batch_sizes)
    k = key([*a[:6], *a[10:20]], x)
    known, count = 0, 0
    if g_out is None:
        # zeros_like(output, LEGACY_CONTIGUOUS_MEMORY_FORMAT): contiguous in output's shape
        g_out = [out[0], contiguous_strides(out[0]), out[2], 0, out[4]]
        known, count = known + nbytes(out), count + 1
    if g_hy is None:
        known, count = known + nbytes(hx), count + 1
    if cx is not None and g_cy is None:
        known, count = known + nbytes(cx), count + 1
    xc = copy_bytes(x, batch_first, packed)
    dyc = copy_bytes(g_out, batch_first, packed)
    for b in (xc, dyc, xc):
        if b:
            known, count = known + b, count + 1
    # dx, dhx, dcx, dw
    for b in (nbytes(x), nbytes(hx), nbytes(cx) if cx is not None else 0, nbytes(w_buf)):
        if b:
            known, count = known + b, count + 1
    rest = rec["requested"] - known
    if rest < 0 or rest % 2:
        return None
    ws = rest // 2
    if rec["count"] != count + (2 if ws else 0) or MODES.get(mode) is None:
        return None
    return k, ws


WHOLE = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}


def whole(rec):
    """An inference_mode `lstm` / `gru` / `rnn_*` line (.input overload): (key, workspace) or None."""
    a = rec["args"]
    if len(a) != 9 or not isinstance(a[8], bool) or a[6]:
        return None  # the packed `.data` overload, or a training call
    x, hx = a[0], a[1]
    batch_first, bidir, layers = a[8], a[7], a[4]
    mode = WHOLE[rec["op"]]
    if mode == 2:
        h_t, c_t = hx
        hidden, proj = c_t[0][-1], (h_t[0][-1] if h_t[0][-1] != c_t[0][-1] else 0)
    else:
        hidden, proj = hx[0][-1], 0
    # the key's argument positions as _cudnn_rnn's: mode, hidden, proj, layers, batch_first, dropout,
    # train, bidirectional, batch_sizes
    k = key([None] * 6 + [mode, hidden, proj, layers, batch_first, a[5], False, bidir, None], x)
    new = rec["new"]
    copy = copy_bytes(x, batch_first, False)
    ws = rec["requested"] - sum(new) - copy
    if ws < 0 or rec["count"] != len(new) + (1 if copy else 0) + (1 if ws > 0 else 0):
        return None
    return k, ws


def contiguous_strides(sizes):
    st, step = [], 1
    for s in reversed(sizes):
        st.append(step)
        step *= s
    return list(reversed(st))


def main():
    table, states, kept = {}, set(), {}
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            old = json.load(f)
        for p in old["problems"]:
            k = {n: p[n] for n in p if n not in ("workspace", "reserve", "backward_workspace")}
            kept[json.dumps(k, sort_keys=True)] = p
        states.update(old["dropout_state_bytes"].values())
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
        for line in open(path):
            rec = json.loads(line)
            op = rec.get("op")
            if op == "_cudnn_rnn":
                if rec["args"][15] is not None:
                    states.add(nbytes(rec["args"][15]))
                got = forward(rec)
                if got is None:
                    print(f"{path}: unread _cudnn_rnn line", file=sys.stderr)
                    continue
                k, ws, reserve = got
                e = table.setdefault(json.dumps(k, sort_keys=True), dict(k))
                for name, v in (("workspace", ws), ("reserve", reserve)):
                    if v is not None and e.setdefault(name, v) != v:
                        print(f"{path}: {name} {v} != {e[name]} for one problem", file=sys.stderr)
            elif op in WHOLE:
                got = whole(rec)
                if got is None:
                    print(f"{path}: unread {op} line", file=sys.stderr)
                    continue
                k, ws = got
                e = table.setdefault(json.dumps(k, sort_keys=True), dict(k))
                if e.setdefault("workspace", ws) != ws:
                    print(f"{path}: workspace {ws} != {e['workspace']} for one problem", file=sys.stderr)
            elif op == "_cudnn_rnn_backward":
                got = backward(rec)
                if got is None:
                    print(f"{path}: unread _cudnn_rnn_backward line", file=sys.stderr)
                    continue
                k, ws = got
                e = table.setdefault(json.dumps(k, sort_keys=True), dict(k))
                if e.setdefault("backward_workspace", ws) != ws:
                    print(f"{path}: backward workspace {ws} != {e['backward_workspace']}", file=sys.stderr)
    for k, p in kept.items():
        e = table.pop(k, None)
        if e is not None and any(e.get(n, p[n]) != p[n] for n in p):
            print(f"measured otherwise than the table: {json.dumps(e, sort_keys=True)}", file=sys.stderr)
    doc = {
        "about": (
            "cuDNN RNN workspaces and training reserves (bytes) by whole problem, measured per op "
            "(validation/run/ops_truth.py, read by validation/run/rnn_table.py) on an H200 (sm_90, 132 SMs), "
            "torch 2.11.0+cu130, cuDNN 9.19; the H100 runs give the same. dropout_state_bytes: "
            "cudnnDropoutGetStatesSize there (_cudnn_init_dropout_state's buffer)."
        ),
        "dropout_state_bytes": {"132": max(states)} if states else {},
        # the table's problems in its order, then the new ones
        "problems": list(kept.values()) + [table[k] for k in sorted(table)],
    }
    # one problem a line
    lines = [json.dumps(p, sort_keys=True) for p in doc.pop("problems")]
    head = json.dumps(doc, indent=1)[:-2]
    sys.stdout.write(head + ',\n "problems": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")


if __name__ == "__main__":
    main()
