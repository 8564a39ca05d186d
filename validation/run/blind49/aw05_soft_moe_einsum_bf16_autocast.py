"""Soft mixture-of-experts written with `torch.einsum`: every token's dispatch and combine weights
over 32 experts x 4 slots, 16 expert MLPs held as stacked weights and applied by one einsum each,
einsum attention, 6 layers of width 1024 at batch 32 x 256 tokens, bf16 autocast over fp32
weights, fused AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4905)
D, E, S, L, B, T, H = (32, 4, 2, 2, 2, 16, 2) if SMALL else (1024, 16, 8, 6, 32, 256, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.phi = nn.Parameter(torch.randn(D, E, S) * D**-0.5)
        self.w1 = nn.Parameter(torch.randn(E, D, 4 * D) * D**-0.5)
        self.w2 = nn.Parameter(torch.randn(E, 4 * D, D) * (4 * D) ** -0.5)

    def forward(self, x):
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, H, -1).unbind(2)
        a = torch.einsum("bqhd,bkhd->bhqk", q, k).mul(q.shape[-1] ** -0.5).softmax(-1)
        x = x + self.o(torch.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, D))
        h = self.n2(x)
        logits = torch.einsum("btd,des->btes", h, self.phi)
        dispatch = logits.flatten(2).softmax(1).view_as(logits)
        combine = logits.flatten(2).softmax(-1).view_as(logits)
        slots = torch.einsum("btd,btes->besd", h, dispatch)
        y = torch.einsum("besf,efd->besd", F.gelu(torch.einsum("besd,edf->besf", slots, self.w1)), self.w2)
        return x + torch.einsum("besd,btes->btd", y, combine)


model = nn.Sequential(*[Layer() for _ in range(L)]).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, D, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
