"""Pre-LN transformer encoder (hand-written, SDPA, fp16 weights) plus an MLP head under torch.inference_mode
at batch 64 then 8, with del + empty_cache in between."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, LAYERS, HEADS, SEQ, VOCAB, BATCHES = (
    (64, 2, 4, 16, 500, (4, 2)) if os.environ.get("SMOKE") else (1024, 16, 16, 512, 50000, (64, 8))
)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
torch.manual_seed(5)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, -1).transpose(1, 3).unbind(2)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh(), nn.Linear(DIM, 16))

    def forward(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return self.head(x.mean(dim=1)), x


model = Encoder().to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

results = []
for batch in BATCHES:
    with torch.inference_mode():
        ids = torch.randint(0, VOCAB, (batch, SEQ), device=device)
        logits, hidden = model(ids)
        results.append(logits.float().softmax(-1).cpu())
    if device == "cuda":
        print(
            f"batch {batch} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
    del ids, logits, hidden
    if device == "cuda":
        torch.cuda.empty_cache()
        print(f"after empty_cache reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
print([r.shape for r in results])
