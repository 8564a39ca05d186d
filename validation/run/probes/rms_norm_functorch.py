"""What `F.rms_norm` allocates under torch.func's transforms (`grad`, `jvp`, `vmap` inside them) on the GPU:
one JSON line per case, its peak allocated above what was live before (the inputs) and what stays after. The
twin's answer comes from running this same file under `vramscope run`; on the GPU the wrappers of CUDA tensors
dispatch at AutogradCUDA, where `rms_norm` may take `_fused_rms_norm` (helper jvp's open question)."""

import json

import torch
import torch.nn.functional as F
from torch.func import grad, jvp, vmap

torch.manual_seed(0)
dev = "cuda"
x = torch.randn(8, 1024, 1024, device=dev)
t = torch.randn_like(x)
w = torch.randn(1024, device=dev)


def loss(x):
    return F.rms_norm(x, (1024,), w).square().sum()


def fwd(x):
    return F.rms_norm(x, (1024,), w)


cases = {
    "plain_forward": lambda: fwd(x),
    "grad": lambda: grad(loss)(x),
    "jvp_no_grad": lambda: jvp(fwd, (x,), (t,)),
    "vmap_grad": lambda: vmap(grad(loss))(x),
    "jvp_vmap": lambda: jvp(vmap(fwd), (x,), (t,)),
}
for name, case in cases.items():
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad() if name.startswith("jvp") else torch.enable_grad():
        out = case()
    line = {"case": name, "peak_above": torch.cuda.max_memory_allocated() - base,
            "kept": torch.cuda.memory_allocated() - base}
    del out
    print(json.dumps(line))
