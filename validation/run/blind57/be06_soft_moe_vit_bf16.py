"""A ViT-B/16-sized vision transformer whose last 6 MLPs are Soft MoE layers (Puigcerver et al.:
32 experts of one slot each, dispatch and combine weights by softmax over tokens and over slots,
einsum dispatch), written by hand with SDPA attention, trained on 224x224 at batch 64 under bf16
autocast with AdamW(fused=True), 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5706)
B, D, DEPTH, E = (2, 32, 2, 4) if SMALL else (64, 768, 12, 32)
HW, P = 224, 16
N = (HW // P) ** 2


class SoftMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.phi = nn.Parameter(torch.randn(D, E) * D**-0.5)
        self.w1 = nn.Parameter(torch.randn(E, D, 4 * D) * D**-0.5)
        self.w2 = nn.Parameter(torch.randn(E, 4 * D, D) * (4 * D) ** -0.5)

    def forward(self, x):
        logits = torch.einsum("bnd,de->bne", x, self.phi)
        dispatch = logits.softmax(dim=1)
        combine = logits.softmax(dim=2)
        slots = torch.einsum("bnd,bne->bed", x, dispatch)
        h = F.gelu(torch.einsum("bed,edf->bef", slots, self.w1))
        out = torch.einsum("bef,efd->bed", h, self.w2)
        return torch.einsum("bed,bne->bnd", out, combine)


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = SoftMoE() if moe else nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, 12 if D == 768 else 2, -1).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, D))
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        self.pos = nn.Parameter(torch.zeros(1, N, D))
        self.blocks = nn.ModuleList(Block(i >= DEPTH // 2) for i in range(DEPTH))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, 1000)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(dim=1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    img = torch.randn(B, 3, HW, HW, device=device)
    label = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(img), label)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del img, label, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
