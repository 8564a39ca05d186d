"""GPU probe (session 61, blind270/jk01): cuDNN's workspace and reserve of unpacked *bidirectional*
LSTMs of small hidden size, which RNN.cpp's `get_algo` sends to CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H
(`use_rnn_persist_small_h`: LSTM hidden <= 192 forward, <= 128 backward; the number of directions is
not consulted). The twin fits only the unidirectional small-h problems (`_rnn._fitted_small_h`), so
timm's Sequencer2D (bidirectional LSTMs of hidden 48 and 96 over rows and columns) names its four
problems unmeasured. This measures jk01's four exactly, then a grid around them (hidden 32-192,
input 64-384, batch 64-8192, 16 and 32 steps, float16 and float32, one layer), with
validation/run/rnn_sweep.py's `measure` (the caching allocator's counters around
`torch._cudnn_rnn` and `aten._cudnn_rnn_backward`).

    python validation/run/probes/rnn_bidir_small_h_probe_s61.py OUT.jsonl [SECONDS]

One JSON line per problem in rnn_sweep.py's schema ("set": "jk01" or "grid")."""

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rnn_sweep


def problem(dtype, inp, hidden, batch, seq, tag):
    return dict(
        set=tag,
        mode="lstm",
        dtype=dtype,
        input_size=inp,
        hidden_size=hidden,
        proj_size=0,
        num_layers=1,
        bidirectional=True,
        batch=batch,
        seq_length=seq,
        lengths=None,
        dropout=0.0,
    )


def main():
    path = sys.argv[1]
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    todo = [
        problem("float16", 192, 48, 1536, 32, "jk01"),
        problem("float16", 384, 96, 768, 16, "jk01"),
        problem("float16", 192, 48, 8192, 32, "jk01"),
        problem("float16", 384, 96, 4096, 16, "jk01"),
    ]
    for dtype in ("float16", "float32"):
        for hidden in (32, 48, 64, 96, 128, 160, 192):
            for inp in (64, 192, 384):
                for batch in (64, 768, 1536, 4096, 8192):
                    for seq in (16, 32):
                        todo.append(problem(dtype, inp, hidden, batch, seq, "grid"))
    torch.cuda.init()
    t0 = time.monotonic()
    with open(path, "w", buffering=1) as f:
        props = torch.cuda.get_device_properties(0)
        meta = {"set": "meta", "torch": torch.__version__, "cudnn": torch.backends.cudnn.version()}
        meta.update(gpu=props.name, sms=props.multi_processor_count)
        f.write(json.dumps(meta) + "\n")
        done = 0
        for p in todo:
            if time.monotonic() - t0 > budget:
                break
            rec = dict(p, algo_fwd=rnn_sweep.algo(p, True), algo_bwd=rnn_sweep.algo(p, False))
            try:
                rnn_sweep.measure(p, rec)
            except Exception as e:  # recorded, not fatal
                rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            f.write(json.dumps(rec) + "\n")
            done += 1
    print(f"{done} of {len(todo)} measured in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
