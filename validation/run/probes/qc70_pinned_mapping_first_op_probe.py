"""Probe (session 70, helper qc): which first op makes the CUDA driver map its 8.25 MiB page-locked
`/dev/zero` buffer (driver-placement.md, session 21: "which op maps it is still not known"; in the 12
processes with maps `mean.dim`, `embedding`, `max`, `add.Tensor`, `mse_loss`, `linalg_pinv`, `_to_copy`,
`scatter_`; blind312/la03's H100 history puts it in its first `bernoulli`). One fresh process per case: a
64 MiB tensor, a `fill_` (the first kernel: the context's range and the driver's pool), a sync, then the
case's op alone, a sync; each line prints the `/dev/zero` mappings that op added (MiB), then those a second
op (`x.sum()`) adds after it. A case whose own line shows 8.25 maps it at its module's first kernel; `sleep`
(no op for 2 s) tells a timer from an op. Run: python3 probes/qc70_pinned_mapping_first_op_probe.py (from
validation/run); < 60 s (6 processes at a time), < 1 GB. Plain python3; no twin lines (the twin lays no
such mapping out)."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CASES = {
    "sleep": "time.sleep(2)",
    "add": "x + x",
    "mul_scalar": "x * 2.0",
    "relu": "torch.relu(x)",
    "mean_dim": "x.view(64, -1).mean(dim=1)",
    "sum": "x.sum()",
    "max": "x.max()",
    "mse_loss": "F.mse_loss(x, x)",
    "embedding": "F.embedding(i, x.view(-1, 256))",
    "index_select": "x.view(-1, 256).index_select(0, i)",
    "scatter_": "torch.zeros(1024, 10, device='cuda').scatter_(1, i[:1024, None] % 10, 1.0)",
    "bernoulli": "torch.bernoulli(x.view(-1)[:4096].clamp(0, 1).expand(8, 4096))",
    "nll_loss": "F.nll_loss(x.view(-1, 256)[:4096], i % 256)",
    "pow": "x.pow(3)",
    "to_copy": "x.to(torch.bfloat16)",
    "softmax": "x.view(64, -1).softmax(-1)",
    "sort": "x.view(-1)[:65536].sort()",
}

# QC_CASES=cast: a kernel with dynamic casting (mixed dtypes: `fetch_and_cast`'s CUDA_KERNEL_ASSERT) or not
if os.environ.get("QC_CASES") == "cast":
    CASES = {
        "u8_to_f32": "u.float()",
        "i64_to_f32": "i.float()",
        "f32_to_f16": "x.half()",
        "f32_to_bf16": "x.bfloat16()",
        "f16_add_f32": "x.half() + x",
        "f32_add_f32": "x + x",
        "f32_mul_f64_0d": "x * torch.tensor(2.0, dtype=torch.float64, device='cuda')",
        "gt_to_bool": "x > 0.25",
        "randint": "torch.randint(0, 10, (4096,), device='cuda')",
        "rand": "torch.rand(4096, device='cuda')",
        "normal": "torch.randn(4096, device='cuda')",
        "cumsum": "x.view(64, -1).cumsum(-1)",
        "where": "torch.where(x > 0, x, 0.0)",
        "clamp": "x.clamp(0, 1)",
    }

CHILD = """
import os, sys, time
import torch
import torch.nn.functional as F

def zero():
    out = set()
    for line in open("/proc/self/maps"):
        p = line.split()
        if len(p) > 5 and "zero" in p[5]:
            a, b = (int(v, 16) for v in p[0].split("-"))
            out.add((a, b))
    return out

x = torch.empty(16 << 20, device="cuda")
x.fill_(0.5)
i = (torch.arange(4096) % 1024).to("cuda")  # a host op and a 32 KiB copy: no kernel
u = torch.ones(4096, dtype=torch.uint8).to("cuda")
torch.cuda.synchronize()
m0 = zero()
CASE
torch.cuda.synchronize()
m1 = zero()
x.sum()
torch.cuda.synchronize()
m2 = zero()
mib = lambda s: sorted(round((b - a) / 2**20, 2) for a, b in s)
print(f"{sys.argv[1]}: op adds {mib(m1 - m0)} then x.sum() adds {mib(m2 - m1)}")
"""


def run(name):
    code = CHILD.replace("CASE", "y = " + CASES[name] if name != "sleep" else CASES[name])
    r = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=55)
    return r.stdout.strip() or f"{name}: failed: {r.stderr.strip().splitlines()[-1:]}"


with ThreadPoolExecutor(int(os.environ.get("QC_WORKERS", "6"))) as pool:
    for line in pool.map(run, CASES):
        print(line, flush=True)
