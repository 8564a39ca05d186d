"""A nanoGPT training run recorded with torch.cuda.memory._record_memory_history,
dumped with torch.cuda.memory._dump_snapshot: real snapshots of a chosen size
for `vramscope inspect` at scale (issue #36).

    python3 record.py --out run.pickle --target-mb 50 [--max-entries N | --wrap]
        [--streams 1|2|3] [--oom-at STEP] [--stacks all|python] [--depth N]

`--target-mb` sizes the run: after a few warm-up steps the script dumps an
in-memory snapshot to learn the entries per step and the pickle's bytes per
entry, then trains for as many steps as the target asks. With `--wrap` the
ring buffer holds the target's entries and the run makes twice as many
(`--wrap-ratio`), so the trace starts in the middle of the run. `--streams 2` copies each batch
on a side stream (record_stream), `--streams 3` also flattens gradients into
25 MiB buckets on a third stream, as DDP's reducer does. `--oom-at F` runs a
forward at 256 times the batch at that fraction of the run, which runs out of memory (the
per-process fraction bounds the process) inside the trace, and training goes
on. Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for expandable
segments. `--depth N` runs each step under N more Python frames (N distinct
functions, each calling the next), as a framework's deep call stack would:
more bytes per entry, for files of several GB in the time of a GPU call.
`--wrapped-out W --wrapped-keep F` also writes, from the same dump, the
snapshot a ring buffer of F times the trace's entries would have given:
the same segments and the trace's last entries (`_record_memory_history`'s
`max_entries` keeps the newest, oldest first: c10's `RingBuffer::getEntries`
rotates at its next slot), so a wrapped and a complete trace of one run.
Prints one JSON line of what it did.
"""

import argparse
import io
import json
import math
import os
import pickle
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--target-mb", type=float, required=True)
p.add_argument("--wrap", action="store_true")
p.add_argument("--wrap-ratio", type=float, default=2.0, help="with --wrap: the run's entries over the ring buffer's")
p.add_argument("--streams", type=int, default=1)
p.add_argument("--oom-at", type=float, default=-1, help="fraction of the run (0..1) at which to OOM")
p.add_argument("--stacks", default="all", choices=["all", "python"])
p.add_argument("--layers", type=int, default=6)
p.add_argument("--embd", type=int, default=256)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--block", type=int, default=128)
p.add_argument("--vocab", type=int, default=4096)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--fraction", type=float, default=0.04)
p.add_argument("--max-seconds", type=float, default=150.0)
p.add_argument("--depth", type=int, default=0, help="Python frames added under each step")
p.add_argument("--wrapped-out", help="also write the trace's last --wrapped-keep of entries here")
p.add_argument("--wrapped-keep", type=float, default=0.5)
a = p.parse_args()

torch.manual_seed(0)
SMOKE = os.environ.get("SMOKE") == "1"  # a few steps on the CPU, nothing recorded
dev = torch.device("cpu" if SMOKE else "cuda")
if not SMOKE:
    torch.cuda.set_per_process_memory_fraction(a.fraction)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(a.embd, 3 * a.embd)
        self.c_proj = nn.Linear(a.embd, a.embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(a.embd, dim=2)
        q, k, v = (t.view(B, T, a.heads, C // a.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(a.embd)
        self.attn = Attn()
        self.ln_2 = nn.LayerNorm(a.embd)
        self.fc = nn.Linear(a.embd, 4 * a.embd)
        self.proj = nn.Linear(4 * a.embd, a.embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.embd)
        self.wpe = nn.Embedding(a.block, a.embd)
        self.h = nn.ModuleList([Block() for _ in range(a.layers)])
        self.ln_f = nn.LayerNorm(a.embd)
        self.lm_head = nn.Linear(a.embd, a.vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
params = [q for q in model.parameters()]
side = torch.cuda.Stream() if a.streams >= 2 and not SMOKE else None
comm = torch.cuda.Stream() if a.streams >= 3 and not SMOKE else None
BUCKET = 25 * 2**20  # DDP's default bucket_cap_mb


def batch(b):
    if side is None:
        x = torch.randint(a.vocab, (b, a.block + 1), device=dev)
    else:
        host = torch.randint(a.vocab, (b, a.block + 1)).pin_memory()
        with torch.cuda.stream(side):
            x = host.to(dev, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
    return x[:, :-1], x[:, 1:]


def buckets():
    cur = torch.cuda.current_stream()
    comm.wait_stream(cur)
    with torch.cuda.stream(comm):
        group, size = [], 0
        for q in params:
            group.append(q.grad)
            size += q.grad.numel() * q.grad.element_size()
            if size >= BUCKET:
                flat = torch.cat([g.flatten() for g in group]).div_(2)
                del flat
                group, size = [], 0
        if group:
            flat = torch.cat([g.flatten() for g in group]).div_(2)
            del flat
    cur.wait_stream(comm)


def step(b=a.batch):
    x, y = batch(b)
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    if comm is not None:
        buckets()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def nested(depth):
    """f0(g, *x) calls f1 ... calls f{depth - 1}, which calls g(*x): `depth`
    more Python frames, each its own function and line."""
    src = "".join(f"def f{i}(g, *x):\n    return f{i + 1}(g, *x)\n" for i in range(depth - 1))
    ns = {}
    exec(compile(src + f"def f{depth - 1}(g, *x):\n    return g(*x)\n", "<nested>", "exec"), ns)
    return ns["f0"]


if a.depth:
    sys.setrecursionlimit(a.depth + 1000)
run_step = nested(a.depth) if a.depth else lambda g, *x: g(*x)


if SMOKE:
    for _ in range(2):
        run_step(step)
    print("smoke ok")
    sys.exit(0)
t0 = time.time()
# calibrate: entries per step and pickle bytes per entry, complete history
torch.cuda.memory._record_memory_history(stacks=a.stacks)
WARM = 5
for _ in range(WARM):
    run_step(step)
torch.cuda.synchronize()
snap = torch.cuda.memory._snapshot()
n0 = sum(len(t) for t in snap["device_traces"])
buf = io.BytesIO()
pickle.dump(snap, buf)
per_entry = len(buf.getvalue()) / max(n0, 1)
per_step = n0 / WARM
del snap, buf
torch.cuda.memory._record_memory_history(enabled=None)

target_entries = int(a.target_mb * 1e6 / per_entry)
max_entries = target_entries if a.wrap else sys.maxsize
run_entries = int(a.wrap_ratio * target_entries) if a.wrap else target_entries
steps = max(1, math.ceil(run_entries / per_step))
oom_step = int(a.oom_at * steps) if a.oom_at >= 0 else -1

torch.cuda.memory._record_memory_history(stacks=a.stacks, max_entries=max_entries, clear_history=True)
t1 = time.time()
done, ooms = 0, 0
for i in range(steps):
    if i == oom_step:
        try:
            run_step(step, 256 * a.batch)
        except torch.OutOfMemoryError:
            ooms += 1
        opt.zero_grad(set_to_none=True)
    run_step(step)
    done += 1
    if time.time() - t1 > a.max_seconds:
        break
torch.cuda.synchronize()
t2 = time.time()
wrapped = {}
if a.wrapped_out is None:
    torch.cuda.memory._dump_snapshot(a.out)
    t3 = time.time()
else:
    # what _dump_snapshot does (torch/cuda/memory.py): _snapshot(), then pickle.dump
    snap = torch.cuda.memory._snapshot()
    with open(a.out, "wb") as f:
        pickle.dump(snap, f)
    t3 = time.time()
    total = [len(t) for t in snap["device_traces"]]
    keep = [max(1, int(a.wrapped_keep * n)) for n in total]
    snap["device_traces"] = [t[len(t) - k :] for t, k in zip(snap["device_traces"], keep, strict=True)]
    with open(a.wrapped_out, "wb") as f:
        pickle.dump(snap, f)
    wrapped = {"entries": total, "wrapped_entries": keep, "wrapped_dump_s": round(time.time() - t3, 2)}
    del snap
torch.cuda.memory._record_memory_history(enabled=None)
print(
    json.dumps(
        {
            "out": a.out,
            "args": vars(a),
            "calib_entries_per_step": per_step,
            "calib_bytes_per_entry": round(per_entry, 1),
            "planned_steps": steps,
            "steps": done,
            "oom_step": oom_step,
            "ooms": ooms,
            "max_entries": None if max_entries == sys.maxsize else max_entries,
            "train_s": round(t2 - t1, 2),
            "dump_s": round(t3 - t2, 2),
            "total_s": round(t3 - t0, 2),
            **wrapped,
        }
    ),
    flush=True,
)
