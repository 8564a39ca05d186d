"""A ViT-L/16-sized transformer written by hand (SDPA attention, GELU MLPs) trained in fp32 at
batch 32 of 224x224 with activation compression by torch.autograd.graph.saved_tensors_hooks: every
floating tensor saved for backward is packed as fp16 and unpacked back to fp32; SGD with momentum,
2 steps, then one step without the hooks; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6002)
B, D, DEPTH, H = (2, 32, 2, 2) if SMALL else (32, 1024, 24, 16)
HW, P = 224, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.zeros(1, (HW // P) ** 2 + 1, D))
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, 1000)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def pack(t):
    return t.half() if t.is_floating_point() and t.dtype == torch.float32 else t


def unpack(t):
    return t.float() if t.dtype == torch.float16 else t


device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViT().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    img = torch.randn(B, 3, HW, HW, device=device)
    label = torch.randint(0, 1000, (B,), device=device)
    if step < 2:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = F.cross_entropy(model(img), label)
    else:
        loss = F.cross_entropy(model(img), label)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del img, label, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
