"""torch.compile in its default mode (Inductor, no CUDA graphs) on a small hand-written ViT
classifier (patch-16 convolution stem, 6 pre-norm blocks of 384 wide, 6 heads through
F.scaled_dot_product_attention, GELU MLP, CLS token), trained under bf16 autocast with fused
AdamW and label smoothing on 64 images of 224 x 224 for 3 steps, then an eval batch of 128 under
no_grad (a second compiled graph); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9004)
DIM, DEPTH, HEADS, IMG, B, EB, NCLS = (64, 2, 4, 32, 4, 8, 10) if SMALL else (384, 6, 6, 224, 64, 128, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, DIM)
        x = x + self.proj(a)
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, DIM, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos = nn.Parameter(torch.randn(1, (IMG // 16) ** 2 + 1, DIM) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, NCLS)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


model = ViT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
cmodel = torch.compile(model)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(cmodel(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    logits = cmodel(torch.randn(EB, 3, IMG, IMG, device=device))
if device == "cuda":
    print(
        f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
