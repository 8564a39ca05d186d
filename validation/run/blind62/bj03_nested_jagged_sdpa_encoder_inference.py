"""Variable-length inference without padding: a BERT-base-sized encoder written by hand whose
activations are jagged nested tensors (torch.nested.nested_tensor_from_jagged over 32 documents of
known lengths, 64 to 1,024 tokens), attention by F.scaled_dot_product_attention on the jagged
q/k/v, bf16 weights, under inference_mode; two batches; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6203)
V, D, H, NL = (100, 32, 2, 2) if SMALL else (30522, 768, 12, 12)
LENGTHS = [8, 16, 5] if SMALL else [64 + (997 * i) % 961 for i in range(32)]


def attend(q, k, v):
    if q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v)
    # CPU smoke run: torch 2.11 finds no jagged SDPA backend on a CPU-only build, so per document
    parts = [F.scaled_dot_product_attention(*t) for t in zip(q.unbind(), k.unbind(), v.unbind(), strict=True)]
    values = torch.cat([t.transpose(0, 1) for t in parts])
    return torch.nested.nested_tensor_from_jagged(values, q.offsets()).transpose(1, 2)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        a = attend(q, k, v).transpose(1, 2).flatten(-2)
        x = self.n1(x + self.out(a))
        return self.n2(x + self.fc2(F.gelu(self.fc1(x))))


device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(V, D).to(device, torch.bfloat16)
layers = nn.ModuleList(Layer() for _ in range(NL)).to(device, torch.bfloat16).eval()
offsets = torch.tensor([0, *LENGTHS], device=device).cumsum(0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for step in range(2):
        ids = torch.randint(0, V, (sum(LENGTHS),), device=device)
        x = torch.nested.nested_tensor_from_jagged(emb(ids), offsets)
        for layer in layers:
            x = layer(x)
        pooled = torch.stack([t.mean(0) for t in x.unbind()])
        del ids, x, pooled
        if device == "cuda":
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"step {step} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()
