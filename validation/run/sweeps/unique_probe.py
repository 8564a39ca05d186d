"""unique(return_inverse=True) of int64 and int32 inputs at 15 sizes: every allocation in order (the sort,
the inverse's scan, the selection), as the memory history lists them. On a GPU:
`python3 unique_probe.py > fixtures/run/sweeps/unique_probe_h200.jsonl`."""

import json

import torch

dev = "cuda"


def case(name, x):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out = torch.unique(x, return_inverse=True)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    tr = snap["device_traces"][0]
    print(json.dumps({"case": name, "sizes": [e["size"] for e in tr if e["action"] == "alloc"]}), flush=True)


for n in [
    100,
    1000,
    2048,
    4096,
    8192,
    16384,
    32768,
    65536,
    131072,
    262144,
    524288,
    1 << 20,
    3 << 20,
    1 << 22,
    1 << 24,
]:
    case(f"unique inverse int64 {n}", (torch.arange(n, device=dev) * 7919) % (n // 4 + 1))
    case(f"unique inverse int32 {n}", ((torch.arange(n, device=dev) * 7919) % (n // 4 + 1)).int())
