"""Backward formulas that run in place on plain CUDA tensors (and out of place on tensor
subclasses, torch/csrc/autograd/FunctionsManual.cpp): BCE with logits, indexing, gather and
index_select. A plain script: on a GPU it prints the GPU's allocations during each `backward()`,
under `vramscope run` the twin's.

    python backward_inplace.py > gpu.jsonl
    vramscope run --gpu h200 --quiet backward_inplace.py > twin.jsonl
"""

import json

import torch
import torch.nn.functional as F

dev = "cuda"


def case(name, make):
    x = torch.randn(4096, 1024, device=dev, requires_grad=True)
    loss = make(x)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    loss.backward()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    trace = snap["device_traces"][0]
    events = [[e["action"][0], e["size"]] for e in trace if e["action"] in ("alloc", "free_requested")]
    print(json.dumps({"case": name, "events": events}), flush=True)


target = torch.rand(4096, 1024, device=dev)
rows = torch.randint(0, 4096, (8192,), device=dev)
cols = torch.randint(0, 1024, (4096, 16), device=dev)
case("bce_with_logits mean", lambda x: F.binary_cross_entropy_with_logits(x, target))
case("bce_with_logits sum", lambda x: F.binary_cross_entropy_with_logits(x, target, reduction="sum"))
case(
    "bce_with_logits pos_weight",
    lambda x: F.binary_cross_entropy_with_logits(x, target, pos_weight=target[0]),
)
case("index rows", lambda x: x[rows].sum())
case("index rows twice", lambda x: (x[rows] * x[rows[:4096].flip(0).repeat(2)]).sum())
case("gather", lambda x: x.gather(1, cols).sum())
case("index_select", lambda x: x.index_select(0, rows).sum())
case("max over a dim", lambda x: x.max(1).values.sum())
case("topk", lambda x: x.topk(16, dim=1).values.sum())
case("sort", lambda x: x.sort(dim=1).values[:, :8].sum())
case("median over a dim", lambda x: x.median(1).values.sum())
