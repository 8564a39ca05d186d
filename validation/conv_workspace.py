"""Measure the workspace cuDNN's heuristically chosen plan takes from the caching
allocator, for the convolutions the twin runs (ViT's patch embedding), at every
batch size; and which workspaces cuDNN tries, in order, when they do not fit.

    python3 conv_workspace.py sizes K PATCH IMAGE DTYPE BATCHES OUT.jsonl
    python3 conv_workspace.py pressure K PATCH IMAGE DTYPE BATCHES OUT.jsonl

BATCHES is a list like 1-256,264-512/8. `conv_workspace.sh` runs them all.

`sizes`: for each batch, in one process (the plan cache is keyed by shape, so
every batch meets cuDNN's heuristics afresh), the convolution of (N, 3, IMAGE,
IMAGE) by (K, 3, PATCH, PATCH) at stride PATCH, forward, backward-data and
backward-filter (`aten.convolution_backward` with one output each), as
`F.conv2d` and ViT's backward run them (contiguous NCHW, torch.backends.cudnn
defaults: benchmark off). The workspace is what the call requested beyond its
output: the allocator's cumulative `requested_bytes` and allocation count,
before and after (`run_conv_plan` allocates the plan's workspace; `allocate(0)`
counts nothing). A line per (op, batch): allocations and workspace bytes.

`pressure`: for each batch, a fresh problem under
`set_per_process_memory_fraction` that leaves room for the output and nothing
more, with the allocator history recording: every workspace `try_configs`
attempts shows as an `oom` entry (caught by PyTorch, which moves to the next
heuristic config) until one fits. A line per (op, batch): the trace's
(action, size) entries during the call.
"""
import gc
import json
import sys

import torch

MiB = 1 << 20
DT = dict(fp32=torch.float32, bf16=torch.bfloat16, fp16=torch.float16)
OPS = ("forward", "dgrad", "wgrad")


def batches(spec):
    out = []
    for part in spec.split(","):
        step = 1
        if "/" in part:
            part, step = part.split("/")
            step = int(step)
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1, step))
    return out


def tensors(n, k, p, img, dt):
    x = torch.randn(n, 3, img, img, device="cuda", dtype=dt)
    w = torch.randn(k, 3, p, p, device="cuda", dtype=dt)
    go = torch.randn(n, k, img // p, img // p, device="cuda", dtype=dt)
    return x, w, go


def call(op, x, w, go, p):
    if op == "forward":
        return torch.ops.aten.convolution(x, w, None, [p, p], [0, 0], [1, 1], False, [0, 0], 1)
    mask = [op == "dgrad", op == "wgrad", False]
    return torch.ops.aten.convolution_backward(
        go, x, w, None, [p, p], [0, 0], [1, 1], False, [0, 0], 1, mask)


def counters():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.allocated"]


def sizes(k, p, img, dt, bs, out):
    for n in bs:
        x, w, go = tensors(n, k, p, img, dt)
        for op in OPS:
            torch.cuda.synchronize()
            c0, r0 = counters()
            res = call(op, x, w, go, p)
            torch.cuda.synchronize()
            c1, r1 = counters()
            made = [t for t in (res if isinstance(res, tuple) else (res,)) if t is not None]
            result_bytes = sum(t.numel() * t.element_size() for t in made)
            out.write(json.dumps(dict(op=op, batch=n, allocs=c1 - c0,
                                      workspace=r1 - r0 - result_bytes)) + "\n")
            del res, made
        del x, w, go
        out.flush()  # a run cut short keeps the batches it measured


def pressure(k, p, img, dt, bs, out):
    total = torch.cuda.get_device_properties(0).total_memory
    for n in bs:
        for op in ("forward", "wgrad"):
            gc.collect()
            torch.cuda.set_per_process_memory_fraction(1.0)
            torch.cuda.empty_cache()
            x, w, go = tensors(n, k, p, img, dt)
            shape = (n, k, img // p, img // p) if op == "forward" else (k, 3, p, p)
            result = torch.Size(shape).numel() * x.element_size()
            # room for the result's own segment and nothing for a workspace beside it:
            # get_allocation_size in c10/cuda/CUDACachingAllocator.cpp (kSmallSize 1 MiB
            # -> kSmallBuffer 2 MiB; below kMinLargeAlloc 10 MiB -> kLargeBuffer 20 MiB;
            # else rounded up to kRoundLarge 2 MiB)
            seg = 2 * MiB if result <= MiB else (20 * MiB if result < 10 * MiB else -(-result // (2 * MiB)) * 2 * MiB)
            torch.cuda.synchronize()
            torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + seg) / total)
            torch.cuda.memory._record_memory_history(context=None, stacks="python", max_entries=100000)
            error = None
            try:
                res = call(op, x, w, go, p)
                torch.cuda.synchronize()
                del res
            except Exception as e:  # an engine with no workspace may not exist
                error = str(e).splitlines()[0][:200]
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            trace = [(e["action"], e["size"]) for e in snap["device_traces"][0]]
            out.write(json.dumps(dict(op=op, batch=n, result_bytes=result, trace=trace, error=error)) + "\n")
            del x, w, go


def main():
    mode, k, p, img, dt, spec, path = sys.argv[1:8]
    k, p, img = int(k), int(p), int(img)
    torch.backends.cudnn.benchmark = False
    # cuDNN's handle and the first plan outside the measurement
    warm = tensors(2, 8, 4, 16, DT[dt])
    for op in OPS:
        call(op, *warm, 4)
    del warm
    with open(path, "w") as out:
        head = dict(k=k, patch=p, image=img, dtype=dt, mode=mode, torch=torch.__version__,
                    cudnn=torch.backends.cudnn.version(), gpu=torch.cuda.get_device_name(0),
                    capability=list(torch.cuda.get_device_capability(0)))
        out.write(json.dumps(dict(problem=head)) + "\n")
        (sizes if mode == "sizes" else pressure)(k, p, img, DT[dt], batches(spec), out)


if __name__ == "__main__":
    main()
