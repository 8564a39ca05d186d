"""torch.export of CUDA modules, then the exported programs served.

A pre-norm MLP block stack (8 blocks of LayerNorm + Linear 1024 -> 4096 -> GELU -> Linear, residual) and a
small conv stem with BatchNorm (running-stat buffers) are built on the GPU and exported there with
`torch.export.export` (the example inputs on the GPU, a dynamic batch dimension through `Dim`). Phases:
export of the MLP stack at batch 64 (the trace makes fake tensors only); `ep.module()` run under no_grad at
batch 256 and 1024, fp32; the module's weights cast to bf16 by exporting a bf16 copy and run under
inference_mode at batch 2048; the conv stem (eval mode, BatchNorm buffers) exported and run at batch 128 of
3 x 224 x 224. No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
from torch.export import Dim

torch.manual_seed(2331)
device = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self, d=1024):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


mlp = nn.Sequential(*[Block() for _ in range(8)]).to(device).eval()
batch = Dim("batch", min=2, max=4096)
ep = torch.export.export(mlp, (torch.randn(64, 1024, device=device),), dynamic_shapes=({0: batch},))
print("exported", len(ep.graph.nodes), "nodes")
report("export mlp")

served = ep.module()
with torch.no_grad():
    for b in (256, 1024):
        y = served(torch.randn(b, 1024, device=device))
        print("served", tuple(y.shape), y.float().abs().mean().item())
        del y
report("served fp32 no_grad")

mlp16 = nn.Sequential(*[Block() for _ in range(8)]).to(device, torch.bfloat16).eval()
ep16 = torch.export.export(
    mlp16, (torch.randn(64, 1024, device=device, dtype=torch.bfloat16),), dynamic_shapes=({0: batch},)
)
with torch.inference_mode():
    y = ep16.module()(torch.randn(2048, 1024, device=device, dtype=torch.bfloat16))
    print("bf16 served", tuple(y.shape))
del y
report("served bf16 inference_mode")

stem = (
    nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        nn.Conv2d(64, 128, 3, 1, 1, bias=False),
        nn.BatchNorm2d(128),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 1000),
    )
    .to(device)
    .eval()
)
eps = torch.export.export(stem, (torch.randn(8, 3, 224, 224, device=device),))
with torch.no_grad():
    out = eps.module()(torch.randn(8, 3, 224, 224, device=device))
    print("stem", tuple(out.shape))
report("conv stem exported")
