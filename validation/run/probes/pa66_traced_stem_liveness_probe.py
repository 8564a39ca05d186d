"""Session 66 (helper pa): when a traced module's intermediates are freed (blind280/ju04's phase 2).

    python3 probes/pa66_traced_stem_liveness_probe.py     (from validation/run; < 20 s, < 3 GB)

ju04's traced ResNet-18 (torch.jit.trace at batch 8, then two calls at 128, no_grad, fp32, cuDNN TF32 off)
peaked at base + exactly 3 x its stem convolution's output (411,041,792 bytes) on the H100, the twin at
about 2 x (eager: 2 x on both). This traces the stem alone (conv 7x7/2 -> BatchNorm -> ReLU -> max pool)
the same way and prints, for each of three calls, the allocation/free events (memory history, sizes), and
the peak above the call's start: which value outlives its last use, in which call (the profiling
executor's first, its second or later, optimized), and whether TF32 matters.
"""

import torch
import torch.nn as nn

dev = "cuda"
torch.manual_seed(0)


def events(tag, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    evs = [
        ("a" if e["action"] == "alloc" else "f", e["size"])
        for e in snap["device_traces"][0]
        if e["action"] in ("alloc", "free_requested")
    ]
    print(tag, "peak_above", torch.cuda.max_memory_allocated() - base, "events", evs, flush=True)
    return out


for tf32 in (False, True):
    torch.backends.cudnn.allow_tf32 = tf32
    stem = (
        nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        .to(dev)
        .eval()
    )
    images = torch.randn(128, 3, 224, 224, device=dev)
    with torch.no_grad():
        out = events(f"tf32 {int(tf32)} eager", lambda stem=stem, images=images: stem(images))
        del out
        traced = torch.jit.trace(stem, images[:8])
        for i in range(3):
            out = events(
                f"tf32 {int(tf32)} traced call {i}", lambda traced=traced, images=images: traced(images)
            )
            del out
            # the graph the executor ran last (after the profiling run: any TensorExpr fusion groups)
            g = torch.jit.last_executed_optimized_graph()
            kinds = [n.kind() for n in g.nodes() if n.kind() not in ("prim::Constant", "prim::ListConstruct")]
            print(f"tf32 {int(tf32)} traced call {i} graph", kinds, flush=True)
    del stem, traced, images
    torch.cuda.empty_cache()
# the whole network (torchvision's resnet18: ju04's layout), TF32 off: each call's peak above its start
import torchvision  # noqa: E402

torch.backends.cudnn.allow_tf32 = False
net = torchvision.models.resnet18().to(dev).eval()
images = torch.randn(128, 3, 224, 224, device=dev)
with torch.no_grad():
    for tag, fn in (("eager", net), ("traced", torch.jit.trace(net, images[:8]))):
        for i in range(3):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = fn(images)
            torch.cuda.synchronize()
            print(
                f"resnet18 {tag} call {i} peak_above {torch.cuda.max_memory_allocated() - base}", flush=True
            )
            del out
print("texpr fuser", torch._C._jit_texpr_fuser_enabled(), "gpu", torch._C._jit_can_fuse_on_gpu())
print("done")
