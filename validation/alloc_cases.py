"""Record real allocator behaviour for the allocator twin's golden fixtures.

Run one case per fresh process (the allocator's settings are read once, at the
first CUDA allocation):

    PYTORCH_CUDA_ALLOC_CONF=... python3 alloc_cases.py CASE OUTDIR

Writes OUTDIR/CASE.pickle (torch.cuda.memory._dump_snapshot, recorded from the
first allocation), OUTDIR/CASE.stats.json (torch.cuda.memory_stats() at the
end), OUTDIR/CASE.summary.txt (torch.cuda.memory_summary()) and
OUTDIR/CASE.meta.json (settings, memory fraction, device totals).
`alloc_cases.sh` runs every case with its settings.
"""
import json
import os
import random
import sys

import torch

MiB = 1 << 20
case, outdir = sys.argv[1], sys.argv[2]
os.makedirs(outdir, exist_ok=True)
meta = dict(case=case, conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), fraction=None)

torch.cuda.init()
torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
props = torch.cuda.get_device_properties(0)
meta["total_global_mem"] = props.total_memory
meta["torch"] = torch.__version__
meta["gpu"] = props.name


def set_fraction(f):
    torch.cuda.set_per_process_memory_fraction(f)
    meta["fraction"] = f


def mix(seed, n_ops, max_large=200 * MiB, live_cap=60, empty_every=None):
    """A reproducible mix of allocations and frees of every size class."""
    rng = random.Random(seed)
    live = []
    for i in range(n_ops):
        if empty_every and i and i % empty_every == 0:
            torch.cuda.empty_cache()
        if live and (len(live) >= live_cap or rng.random() < 0.45):
            live.pop(rng.randrange(len(live)))
            continue
        r = rng.random()
        if r < 0.45:
            n = rng.randint(1, 1 * MiB)  # small pool
        elif r < 0.75:
            n = rng.randint(1 * MiB + 1, 10 * MiB)  # 20 MiB segments
        else:
            n = rng.randint(10 * MiB, max_large)  # own segments
        live.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    return live


def training(steps=3):
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.1, batch_first=True).cuda()
    head = torch.nn.Linear(512, 1000).cuda()
    params = list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params)
    x = torch.randn(16, 128, 512, device="cuda")
    y = torch.randint(0, 1000, (16, 128), device="cuda")
    for _ in range(steps):
        logits = head(enc(x))
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 1000), y.view(-1))
        loss.backward()
        del loss, logits
        opt.step()
        opt.zero_grad(set_to_none=True)


if case in ("default", "expandable", "max_split", "roundup", "roundup_intervals", "non_split_rounding"):
    keep = mix(1, 700, max_large=300 * MiB)
    del keep
    keep = mix(2, 300, max_large=300 * MiB)
elif case == "empty_cache":
    keep = mix(3, 700, empty_every=200)
    torch.cuda.empty_cache()
    keep2 = mix(4, 100)
elif case == "expandable_empty_cache":
    keep = mix(5, 500, empty_every=150)
    del keep
    torch.cuda.empty_cache()
    keep = mix(6, 200)
elif case == "gc":
    # Allowed memory ~3 GiB; cached blocks of ever-changing sizes push the
    # reserve over 60% of it, so garbage_collect_cached_blocks runs.
    set_fraction(3 * (1 << 30) / torch.cuda.mem_get_info()[1])
    rng = random.Random(7)
    live = []
    for i in range(400):
        if live and (len(live) > 6 or rng.random() < 0.5):
            live.pop(rng.randrange(len(live)))
        else:
            live.append(torch.empty(rng.randint(20, 300) * MiB + rng.randint(0, MiB), dtype=torch.uint8, device="cuda"))
elif case in ("oom_retry", "oom_retry_max_split"):
    set_fraction(2 * (1 << 30) / torch.cuda.mem_get_info()[1])
    blocks = [torch.empty(150 * MiB + i * 3 * MiB, dtype=torch.uint8, device="cuda") for i in range(10)]
    del blocks  # ~1.6 GiB stays cached
    keep = [torch.empty(700 * MiB, dtype=torch.uint8, device="cuda")]  # needs the cache released: retry succeeds
    keep.append(torch.empty(300 * MiB, dtype=torch.uint8, device="cuda"))
    try:
        torch.empty(1500 * MiB, dtype=torch.uint8, device="cuda")  # does not fit at all: OOM raised
    except torch.OutOfMemoryError as e:
        meta["oom_message"] = str(e)
    keep.append(torch.empty(5 * MiB, dtype=torch.uint8, device="cuda"))
    keep += mix(8, 200, max_large=100 * MiB, live_cap=8)
elif case == "streams":
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(s1):
        b = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
        c = torch.empty(1000, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(s2):
        d = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
    del b, c  # freed on s1: reusable only by s1
    e = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")  # new segment on the default stream
    a.record_stream(s1)
    del a  # used on s1: freed when s1's event completes
    torch.cuda.synchronize()
    f = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(s1):
        g = torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
        keep = mix(9, 150, max_large=60 * MiB, live_cap=20)
    torch.cuda.synchronize()
    keep2 = mix(10, 150, max_large=60 * MiB, live_cap=20)
elif case in ("training", "training_expandable"):
    training()
else:
    sys.exit(f"unknown case {case}")

torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
# (File handles are named fh: a name like `f` would rebind a tensor of the
# workload and free it after the statistics were taken.)
with open(f"{outdir}/{case}.stats.json", "w") as fh:
    json.dump(stats, fh, indent=0, sort_keys=True)
with open(f"{outdir}/{case}.summary.txt", "w") as fh:
    fh.write(torch.cuda.memory_summary())
meta["mem_get_info"] = list(torch.cuda.mem_get_info())
with open(f"{outdir}/{case}.meta.json", "w") as fh:
    json.dump(meta, fh, indent=1, sort_keys=True)
torch.cuda.memory._dump_snapshot(f"{outdir}/{case}.pickle")
print(case, "ok", "entries", len(torch.cuda.memory._snapshot()["device_traces"][0]), "retries", stats.get("num_alloc_retries"), "ooms", stats.get("num_ooms"))
