"""Hand-written ViT-B/16 (nn.Conv2d patch embedding, cls token, learned positions,
F.scaled_dot_product_attention), bf16 weights, AdamW(fused=True), 224 px."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

IMG, PATCH, DIM, DEPTH, HEADS, CLASSES, B = (
    (32, 16, 64, 2, 4, 10, 2) if os.environ.get("SMOKE") else (224, 16, 768, 12, 12, 1000, 96)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(42)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, DIM))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM, eps=1e-6)
        self.attn = Attention()
        self.norm2 = nn.LayerNorm(DIM, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, DIM, kernel_size=PATCH, stride=PATCH)
        n = (IMG // PATCH) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos = nn.Parameter(torch.randn(1, n + 1, DIM) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


model = ViT().to(device=device, dtype=torch.bfloat16)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device, dtype=torch.bfloat16)
    labels = torch.randint(0, CLASSES, (B,), device=device)
    loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
