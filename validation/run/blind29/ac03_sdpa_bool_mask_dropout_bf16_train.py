"""A hand-written encoder whose attention is F.scaled_dot_product_attention with a boolean
(batch, 1, seq, seq) padding mask and dropout_p=0.1 in training, bf16 weights, 6 layers of 768 with
12 heads, batch 16 at 512 tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2903)
D, L, H, B, S, V = (32, 1, 4, 2, 16, 64) if SMALL else (768, 6, 12, 16, 512, 30000)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, D))
        return x + self.ff(self.n2(x))


emb = nn.Embedding(V, D).to(device)
layers = nn.ModuleList(Layer() for _ in range(L)).to(device)
head = nn.Linear(D, 2).to(device)
dtype = torch.bfloat16 if device == "cuda" else torch.float32
for m in (emb, layers, head):
    m.to(dtype)
optimizer = torch.optim.AdamW([*emb.parameters(), *layers.parameters(), *head.parameters()], lr=1e-4)
lengths = torch.linspace(S // 4, S, B).long()
mask = (torch.arange(S)[None, :] < lengths[:, None]).to(device)
attn_mask = mask[:, None, None, :].expand(B, 1, S, S)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, S), device=device)
    x = emb(ids)
    for layer in layers:
        x = layer(x, attn_mask)
    loss = F.cross_entropy(head(x[:, 0]).float(), torch.randint(0, 2, (B,), device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
