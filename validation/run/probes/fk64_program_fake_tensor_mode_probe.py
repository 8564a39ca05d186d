"""Session 64, helper fk: a program's own FakeTensorMode on CUDA (blind285/jz03's phase 5), what the
GPU prints for what the twin now models (fake CUDA tensors kept on the host, reading cuda:0).
Run: python3 probes/fk64_program_fake_tensor_mode_probe.py (from validation/run; a few seconds).
Each line: a figure the twin prints too (`vramscope run --gpu h100` of this file); compare line by line.
  - `init` : allocated/peak around the first fake CUDA tensor (init_gpu_context's one element: +512 peak)
  - `fwd`  : the fake forward's dtype under bf16 autocast, its devices
  - `est`  : MemTracker's peak estimate (cuda) of a fake MLP and of a fake small ViT step, by category
  - `sdpa` : the fake outputs of F.scaled_dot_product_attention under the mode (which backend's shapes)
  - `after`: allocated/peak after the whole fake section (nothing held)
The twin's lines (fk-s64, `vramscope run --gpu h100`, from validation/run):
  init 0 512
  fwd mlp torch.bfloat16 cuda:0
  est mlp 34978816 {'Total': 34978816, '_MemRefType.ACT': 23204864, '_MemRefType.BUFFER': 0,
      '_MemRefType.GRAD': 0, '_MemRefType.OPT': 2188288, '_MemRefType.OTH': 0,
      '_MemRefType.PARAM': 1094144, '_MemRefType.TEMP': 8491520}
  fwd vit torch.bfloat16 cuda:0
  est vit 1754842112 {'Total': 1754842112, '_MemRefType.ACT': 1528761344, '_MemRefType.BUFFER': 0,
      '_MemRefType.GRAD': 154112, '_MemRefType.OPT': 59456512, '_MemRefType.OTH': 0,
      '_MemRefType.PARAM': 29728256, '_MemRefType.TEMP': 136741888}
  sdpa torch.bfloat16 (8, 6, 197, 64) (75648, 12608, 64, 1) ScaledDotProductCudnnAttentionBackward0
  after 0 512
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

dev = "cuda"
real = nn.Linear(256, 256).to(dev)
real(torch.randn(32, 256, device=dev)).sum().backward()
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()


def figs(tag):
    print(tag, torch.cuda.memory_allocated() - base, torch.cuda.max_memory_allocated() - base, flush=True)


class Block(nn.Module):
    def __init__(self, d=384, h=6):
        super().__init__()
        self.h = h
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self, d=384, depth=4):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.blocks = nn.Sequential(*[Block(d) for _ in range(depth)])
        self.head = nn.Linear(d, 100)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return self.head(self.blocks(x)[:, 0])


def tracked(model_fn, batch_fn, steps=2):
    with torch.device(dev):
        m = model_fn()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=True)
    mt = MemTracker()
    mt.track_external(m, opt)
    with mt:
        for i in range(steps):
            x, y = batch_fn()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = m(x)
                loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i == 0:
                mt.reset_mod_stats()
    snap = mt.get_tracker_snapshot("peak")
    cuda = {d: s for d, s in snap.items() if d.type == "cuda"}
    total = sum(s.get("Total", 0) for s in cuda.values())
    cats = {str(k): v for s in cuda.values() for k, v in sorted(s.items(), key=lambda kv: str(kv[0]))}
    return out, total, cats


with FakeTensorMode():
    a = torch.empty(4, device=dev)
    figs("init")
    mlp = lambda: nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 10))  # noqa: E731
    out, total, cats = tracked(
        mlp, lambda: (torch.randn(4096, 256, device=dev), torch.randint(0, 10, (4096,), device=dev))
    )
    print("fwd mlp", out.dtype, out.device, flush=True)
    print("est mlp", total, cats, flush=True)
    out, total, cats = tracked(
        ViT, lambda: (torch.randn(128, 3, 224, 224, device=dev), torch.randint(0, 100, (128,), device=dev))
    )
    print("fwd vit", out.dtype, out.device, flush=True)
    print("est vit", total, cats, flush=True)
    q = torch.randn(8, 6, 197, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    o = F.scaled_dot_product_attention(q, q, q)
    print("sdpa", o.dtype, tuple(o.shape), o.stride(), o.grad_fn.name(), flush=True)
figs("after")
