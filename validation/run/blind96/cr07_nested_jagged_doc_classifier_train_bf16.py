"""Training without padding on jagged nested tensors: a 6-layer post-norm encoder (768 wide,
12 heads, GELU MLP) written by hand over torch.nested.nested_tensor_from_jagged activations of
24 documents of known lengths (48 to 1,536 tokens), attention by F.scaled_dot_product_attention on
the jagged q/k/v (forward and backward), mean pooling over each document's tokens (index_add of
the jagged values by document), a linear classifier with cross entropy; bf16 weights, AdamW
(foreach), 3 steps, then an eval batch of other lengths under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9607)
V, D, H, NL, NCLS = (100, 32, 2, 2, 5) if SMALL else (32000, 768, 12, 6, 20)
TRAIN = [8, 16, 5] if SMALL else [48 + (613 * i) % 1489 for i in range(24)]
EVAL = [7, 3, 12, 9] if SMALL else [32 + (389 * i) % 1201 for i in range(40)]


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


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(NL))
        self.head = nn.Linear(D, NCLS)

    def forward(self, ids, offsets):
        x = torch.nested.nested_tensor_from_jagged(self.emb(ids), offsets)
        for layer in self.layers:
            x = layer(x)
        # mean over each document's tokens: the ragged dimension's mean has no backward in torch 2.11
        lengths = offsets.diff()
        doc = torch.repeat_interleave(torch.arange(len(lengths), device=ids.device), lengths)
        pooled = torch.zeros(len(lengths), D, device=ids.device, dtype=x.dtype).index_add(0, doc, x.values())
        return self.head(pooled / lengths[:, None].to(x.dtype))


device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Classifier().to(device, dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
train_offsets = torch.tensor([0, *TRAIN], device=device).cumsum(0)
eval_offsets = torch.tensor([0, *EVAL], device=device).cumsum(0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (sum(TRAIN),), device=device)
    labels = torch.randint(0, NCLS, (len(TRAIN),), device=device)
    loss = F.cross_entropy(model(ids, train_offsets).float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, labels, loss
model.eval()
with torch.inference_mode():
    ids = torch.randint(0, V, (sum(EVAL),), device=device)
    pred = model(ids, eval_offsets).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
