"""A pre-norm transformer encoder (768 wide, 12 layers, 12 heads, SDPA) trained with activation offloading:
the forward runs under torch.autograd.graph.save_on_cpu(pin_memory=True), so every tensor saved for
backward is copied to pinned host memory and brought back during backward; fp32 weights under bf16
autocast, AdamW, batch 16 x 512, 2 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1607)
D, HEADS, LAYERS, B, T = (32, 2, 1, 2, 16) if SMALL else (768, 12, 12, 16, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


model = nn.Sequential(*[Block() for _ in range(LAYERS)], nn.LayerNorm(D), nn.Linear(D, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, D, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    with torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda"):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(x).mean(1)
    loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
