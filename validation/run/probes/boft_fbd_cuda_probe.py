"""Whether peft's BOFT builds its `fbd_cuda` extension on the GPU machine, and what BOFT allocates with
and without it: one JSON line per case. peft/tuners/boft/layer.py `get_fbd_cuda` calls
`torch.utils.cpp_extension.load(name="fbd_cuda", ...)` at the first BOFT layer (nvcc and ninja needed);
built, `FastBlockDiag` runs its kernel (fbd/fbd_cuda_kernel.cu: `at::zeros({z, N*b, N*b})` forward,
`at::zeros_like(input)` backward) and `boft_n_butterfly_factor` is kept; else peft warns, takes
`torch.block_diag` and sets the factor to 1. The twin's answer comes from `vramscope run` of this file."""

import json
import time
import warnings

import torch
import torch.nn as nn
from peft import BOFTConfig, get_peft_model
from peft.tuners.boft import layer as boft_layer


def line(case, **kw):
    print(json.dumps({"case": case, **kw}), flush=True)


t0 = time.perf_counter()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    ext = boft_layer.get_fbd_cuda()
line(
    "build",
    built=ext is not None,
    seconds=round(time.perf_counter() - t0, 1),
    warnings=[str(x.message)[:200] for x in w],
)

torch.manual_seed(0)
if ext is not None:
    x = torch.randn(2, 16, 32, 32, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = boft_layer.FastBlockDiag.apply(x)
    line(
        "fbd_forward",
        shape=list(y.shape),
        peak=torch.cuda.max_memory_allocated() - base,
        after=torch.cuda.memory_allocated() - base,
    )
    torch.cuda.reset_peak_memory_stats()
    y.sum().backward()
    line(
        "fbd_backward",
        peak=torch.cuda.max_memory_allocated() - base,
        after=torch.cuda.memory_allocated() - base,
    )
    del x, y


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(1024, 4096), nn.Linear(4096, 1024)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


for case in ("as_built", "fallback"):
    if case == "fallback":
        boft_layer._FBD_CUDA = None
        boft_layer.get_fbd_cuda = lambda: None
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    model = get_peft_model(
        MLP(), BOFTConfig(boft_block_size=32, boft_n_butterfly_factor=2, target_modules=["fc1", "fc2"])
    ).cuda()
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    x = torch.randn(64, 256, 1024, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    after_load = torch.cuda.memory_allocated() - base
    model(x).square().mean().backward()
    line(
        case,
        trainable=params,
        R=list(model.base_model.model.fc1.boft_R["default"].shape),
        loaded=after_load,
        peak=torch.cuda.max_memory_allocated() - base,
        after=torch.cuda.memory_allocated() - base,
    )
    del model, x
