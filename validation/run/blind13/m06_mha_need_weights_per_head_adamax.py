"""A Perceiver-style model: 256 learned latents cross-attend to 4096 inputs through nn.MultiheadAttention
with need_weights=True and average_attn_weights=False (the per-head weights are returned and used in an
entropy regulariser), then 4 latent self-attention layers (nn.TransformerEncoderLayer, batch_first);
fp32, Adamax, batch 16, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
WIDTH, HEADS, LATENTS, INPUTS, LAYERS = (32, 2, 8, 64, 1) if SMALL else (512, 8, 256, 4096, 4)
BATCH = 2 if SMALL else 16
torch.manual_seed(1306)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Perceiver(nn.Module):
    def __init__(self):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(LATENTS, WIDTH) * 0.02)
        self.inp = nn.Linear(64, WIDTH)
        self.cross = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x):
        kv = self.inp(x)
        q = self.latents.expand(x.shape[0], -1, -1)
        z, w = self.cross(q, kv, kv, need_weights=True, average_attn_weights=False)
        entropy = -(w * torch.log(w + 1e-9)).sum(-1).mean()
        z = self.layers(z)
        return self.head(z.mean(1)), entropy


model = Perceiver().to(device)
optimizer = torch.optim.Adamax(model.parameters(), lr=2e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, INPUTS, 64, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)
    logits, entropy = model(x)
    loss = F.cross_entropy(logits, y) + 0.01 * entropy
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
