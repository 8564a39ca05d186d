"""A hand-written ViT-B/16 (12 blocks, 768 wide, 12 heads) whose attention is forced onto cuDNN's
fused attention (`sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`), bf16 weights, 224x224 images at batch
128, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6703)
D, H, N, B, S = (32, 2, 2, 2, 32) if SMALL else (768, 12, 12, 128, 224)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.zeros(1, (S // 16) ** 2 + 1, D))
        self.blocks = nn.ModuleList(Block() for _ in range(N))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, 1000)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, 0]))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViT().to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
backends = [SDPBackend.CUDNN_ATTENTION] if device == "cuda" else [SDPBackend.MATH]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device, dtype=torch.bfloat16)
    targets = torch.randint(0, 1000, (B,), device=device)
    with sdpa_kernel(backends):
        loss = F.cross_entropy(model(images).float(), targets)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
