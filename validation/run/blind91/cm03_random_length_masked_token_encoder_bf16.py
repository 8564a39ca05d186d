"""A pure-PyTorch masked-token encoder (8 pre-norm nn.TransformerEncoderLayer blocks, 768 wide,
12 heads, a 30,522 vocabulary) trained in bf16 autocast with AdamW: each step draws its sequence
length with torch.randint on the GPU (512..2,048, read back with .item()), masks 15% of the tokens
with a GPU torch.rand draw, and scores only the masked positions (`hidden[mask]`, boolean
indexing) against a tied output embedding; 4 steps, batch 8; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9103)
V, D, H, NL, B, LMIN, LMAX = (100, 32, 4, 2, 2, 8, 16) if SMALL else (30522, 768, 12, 8, 8, 512, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"


class MaskedEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(LMAX, D)
        layer = nn.TransformerEncoderLayer(
            D, H, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, NL, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.bias = nn.Parameter(torch.zeros(V))

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.norm(self.enc(self.tok(ids) + self.pos(pos)))
        return F.linear(h[mask], self.tok.weight, self.bias)


model = MaskedEncoder().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    L = int(torch.randint(LMIN, LMAX + 1, (1,), device=device).item())
    ids = torch.randint(5, V, (B, L), device=device)
    mask = torch.rand(B, L, device=device) < 0.15
    targets = ids[mask]
    inputs = ids.masked_fill(mask, 4)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(inputs, mask)
        loss = F.cross_entropy(logits.float(), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} L {L} masked {targets.numel()} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, targets, inputs, logits, loss
