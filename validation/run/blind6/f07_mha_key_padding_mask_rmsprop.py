"""Set-transformer style classifier over variable-size sets built from `nn.MultiheadAttention`
(sequence-first, the default `batch_first=False`): self-attention blocks with a bool `key_padding_mask`
and the default `need_weights=True` (the averaged attention weights are returned and logged), one block with
`need_weights=False`, then pooling by multi-head attention (a learned seed query attending over the set, same
mask); fp32, dropout, `RMSprop(centered=True, momentum=0.9)`, batch 48 sets of up to 640 elements x 768, 3
steps; then a `no_grad` eval in `model.eval()`."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, LAYERS, FEAT, CLASSES, B, T = (
    (32, 4, 2, 16, 5, 2, 12) if os.environ.get("SMOKE") else (768, 12, 6, 256, 100, 48, 640)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(607)


class SAB(nn.Module):
    def __init__(self, need_weights):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, dropout=0.1)
        self.ln1 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * D, D))
        self.ln2 = nn.LayerNorm(D)
        self.need_weights = need_weights

    def forward(self, x, pad):
        h, w = self.attn(x, x, x, key_padding_mask=pad, need_weights=self.need_weights)
        x = self.ln1(x + h)
        return self.ln2(x + self.ff(x)), w


class SetClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FEAT, D)
        self.blocks = nn.ModuleList(SAB(need_weights=i != LAYERS - 1) for i in range(LAYERS))
        self.seed = nn.Parameter(torch.randn(1, 1, D) * 0.02)
        self.pool = nn.MultiheadAttention(D, HEADS)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x, pad):
        h = self.embed(x)
        entropy = 0.0
        for block in self.blocks:
            h, w = block(h, pad)
            if w is not None:
                entropy = entropy + (-(w.clamp_min(1e-9).log() * w).sum(-1).mean()).detach()
        pooled, _ = self.pool(self.seed.expand(1, x.shape[1], D), h, h, key_padding_mask=pad)
        return self.head(pooled[0]), entropy


model = SetClassifier().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-4, alpha=0.99, momentum=0.9, centered=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch(b):
    x = torch.randn(T, b, FEAT, device=device)
    sizes = torch.randint(T // 4, T + 1, (b,), device=device)
    pad = torch.arange(T, device=device)[None, :] >= sizes[:, None]
    return x, pad, torch.randint(0, CLASSES, (b,), device=device)


model.train()
for step in range(3):
    x, pad, y = batch(B)
    logits, entropy = model(x, pad)
    loss = F.cross_entropy(logits, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} attn entropy {float(entropy):.3f} "
            f"peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    x, pad, y = batch(2 * B)
    logits, _ = model(x, pad)
    print(f"eval accuracy {(logits.argmax(-1) == y).float().mean().item():.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
