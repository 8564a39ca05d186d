"""Serving idioms: weights saved with safetensors and loaded straight to the GPU (`load_file(device=
"cuda")`) into a ResNet-style CNN built on the meta device (`load_state_dict(assign=True)`); the
PyTorch docs' manual CUDA graph recipe for inference (warm-up iterations on a side stream, `torch.cuda.
graph` capture of a forward on static input/output tensors, `copy_` into the static input and `replay()`
per batch) in fp16 channels-last; the replay loop timed with CUDA events and profiled with
`torch.profiler.profile(schedule=schedule(wait=1, warmup=1, active=3), on_trace_ready=...)`.

Phases: weights loaded to the GPU; warm-up and capture at batch 64 x 3 x 224 x 224; 8 profiled replays
with new inputs copied in; a second graph sharing the first graph's pool (`pool=g.pool()`) at batch 128.
No value-dependent sizes. 4 phases."""

import os
import tempfile

import torch
import torchvision
from safetensors.torch import load_file, save_file
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(2343)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


path = os.path.join(tempfile.mkdtemp(), "resnet50.safetensors")
save_file(
    {k: v.contiguous() for k, v in torchvision.models.resnet50(weights=None).state_dict().items()}, path
)
with torch.device("meta"):
    model = torchvision.models.resnet50(weights=None)
model.load_state_dict(load_file(path, device="cuda"), assign=True)
model = model.half().to(memory_format=torch.channels_last).eval()
report("safetensors to cuda")


def capture(batch, pool=None):
    static_in = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half).to(
        memory_format=torch.channels_last
    )
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g, pool=pool):
        static_out = model(static_in)
    return g, static_in, static_out


g, static_in, static_out = capture(64)
report("warm-up and capture batch 64")

start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
tables = []
with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    schedule=schedule(wait=1, warmup=1, active=3),
    on_trace_ready=lambda p: tables.append(len(p.key_averages())),
) as prof:
    start.record()
    for _ in range(8):
        static_in.copy_(torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.half))
        g.replay()
        prof.step()
    end.record()
torch.cuda.synchronize()
print("replays", static_out.shape, "profiled", len(tables), "ms", round(start.elapsed_time(end), 1) >= 0)
report("profiled replays")

g2, static_in2, static_out2 = capture(128, pool=g.pool())
g2.replay()
print("second graph", tuple(static_out2.shape))
report("second graph sharing the pool")
