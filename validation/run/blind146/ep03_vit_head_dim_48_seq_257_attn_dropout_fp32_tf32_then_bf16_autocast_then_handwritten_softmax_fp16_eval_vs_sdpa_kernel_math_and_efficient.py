"""A ViT written by hand whose attention can run as SDPA or as the textbook softmax(QK^T / sqrt(d)) V:
patch 14 at 224 x 224 (256 patches and a class token: 257 tokens), d_model 384, 8 heads of 48,
8 blocks, attention dropout 0.1. One training step in fp32 with TF32 matmuls (batch 96), two under
bf16 autocast (batch 128), both with SGD and momentum; then a half-precision copy evaluated at batch
256 three ways: the hand-written attention, SDPA under sdpa_kernel(MATH), and SDPA under
sdpa_kernel([EFFICIENT_ATTENTION, FLASH_ATTENTION]); 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14603)
RES, P, D, H, NL, NCLS = (56, 14, 96, 2, 2, 10) if SMALL else (224, 14, 384, 8, 8, 1000)
B32, B16, EB = (4, 4, 8) if SMALL else (96, 128, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


class Attn(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h, self.p, self.hd = h, p, d // h
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.use_sdpa = True

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, self.hd).permute(2, 0, 3, 1, 4).unbind(0)
        p = self.p if self.training else 0.0
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        else:
            a = (q @ k.transpose(-2, -1)) * self.hd**-0.5
            a = F.dropout(a.softmax(dim=-1), p, self.training)
            y = a @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.attn = Attn(d, h, 0.1)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        n = (RES // P) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, n + 1, D) * 0.02)
        self.blocks = nn.Sequential(*[Block(D, H) for _ in range(NL)])
        self.norm = nn.LayerNorm(D, eps=1e-6)
        self.head = nn.Linear(D, NCLS)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


model = ViT().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def step(bsz, amp):
    x = torch.randn(bsz, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (bsz,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp and device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
lv = step(B32, False)
if device == "cuda":
    print(f"fp32 step loss {lv:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(2):
    lv = step(B16, True)
if device == "cuda":
    print(f"bf16 steps loss {lv:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

half = copy.deepcopy(model).half().eval()
x = torch.randn(EB, 3, RES, RES, device=device, dtype=torch.float16 if device == "cuda" else torch.float32)
if device != "cuda":
    half = half.float()
with torch.no_grad():
    for blk in half.blocks:
        blk.attn.use_sdpa = False
    hand = half(x).float()
    if device == "cuda":
        print(f"handwritten eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    for blk in half.blocks:
        blk.attn.use_sdpa = True
    with sdpa_kernel(SDPBackend.MATH):
        math_out = half(x).float()
    if device == "cuda":
        print(
            f"math eval diff {(hand - math_out).abs().max().item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION]):
        fused = half(x).float()
if device == "cuda":
    print(
        f"fused eval diff {(hand - fused).abs().max().item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
