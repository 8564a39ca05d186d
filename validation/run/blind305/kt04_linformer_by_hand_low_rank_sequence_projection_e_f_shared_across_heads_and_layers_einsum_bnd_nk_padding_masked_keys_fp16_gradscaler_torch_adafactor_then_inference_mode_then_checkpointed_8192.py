"""Linformer (Wang et al. 2020, "Self-Attention with Linear Complexity") written by hand for long
document classification: keys and values are projected along the sequence axis from n = 4096 to
k = 256 by matrices E and F (torch.einsum("bnd,nk->bkd")) that are shared across heads and, as the
paper's "layerwise sharing", across all layers (one E = F parameter for the whole encoder); padded
positions are zeroed before the projection (Linformer cannot mask after it); the low-rank attention is
F.scaled_dot_product_attention of the full-length queries against the k projected keys/values.
Post-LN encoder layers as in the paper's RoBERTa setup, a [CLS]-style first-token classifier.

Phases: (1) the 12-layer, 768-wide model built with torch.optim.Adafactor; (2) three steps at batch 6 x
4096 under fp16 autocast with a GradScaler (unscale_, clip, step, update), documents of random lengths
padded; (3) evaluation under inference_mode at batch 16 with fp16 autocast; (4) a second Linformer at
n = 8192 (k = 256, headwise-shared projections per layer, no layer sharing) trained for two steps at
batch 4 under bf16 autocast with non-reentrant activation checkpointing per layer."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(30504)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, D, HEADS, LAYERS, CLASSES = 30522, 768, 12, 12, 10
N1, K1, B1, B_EVAL = 4096, 256, 6, 16
N2, K2, B2, LAYERS2 = 8192, 256, 4, 8


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class LinformerSelfAttention(nn.Module):
    def __init__(self, shared_proj=None, n=N1, k=K1):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.proj = shared_proj
        if shared_proj is None:
            self.proj_k = nn.Parameter(torch.randn(n, k) / k**0.5)
            self.proj_v = nn.Parameter(torch.randn(n, k) / k**0.5)

    def forward(self, x, keep):
        B, n, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        k = k * keep[..., None]
        v = v * keep[..., None]
        e = self.proj if self.proj is not None else self.proj_k
        f = self.proj if self.proj is not None else self.proj_v
        k = torch.einsum("bnd,nk->bkd", k, e.to(k.dtype))
        v = torch.einsum("bnd,nk->bkd", v, f.to(v.dtype))
        q = q.view(B, n, HEADS, -1).transpose(1, 2)
        k = k.view(B, -1, HEADS, D // HEADS).transpose(1, 2)
        v = v.view(B, -1, HEADS, D // HEADS).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return self.out(a.transpose(1, 2).reshape(B, n, D))


class Layer(nn.Module):
    def __init__(self, shared_proj=None, n=N1, k=K1):
        super().__init__()
        self.attn = LinformerSelfAttention(shared_proj, n, k)
        self.ln1 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * D, D))
        self.ln2 = nn.LayerNorm(D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, keep):
        x = self.ln1(x + self.drop(self.attn(x, keep)))
        return self.ln2(x + self.drop(self.ff(x)))


class Linformer(nn.Module):
    def __init__(self, n, k, layers, share_layers, use_checkpoint=False):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D, padding_idx=0)
        self.pos = nn.Embedding(n, D)
        self.ln = nn.LayerNorm(D)
        self.shared = nn.Parameter(torch.randn(n, k) / k**0.5) if share_layers else None
        self.layers = nn.ModuleList(Layer(self.shared, n, k) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, CLASSES))
        self.use_checkpoint = use_checkpoint

    def forward(self, ids):
        keep = (ids != 0).to(self.tok.weight.dtype)
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos))
        for layer in self.layers:
            if self.use_checkpoint:
                x = checkpoint(layer, x, keep, use_reentrant=False)
            else:
                x = layer(x, keep)
        return self.head(x[:, 0])


def documents(b, n):
    lengths = torch.randint(n // 4, n + 1, (b,), device=device)
    ids = torch.randint(1, VOCAB, (b, n), device=device)
    ids = torch.where(torch.arange(n, device=device)[None] < lengths[:, None], ids, torch.zeros_like(ids))
    return ids, torch.randint(0, CLASSES, (b,), device=device)


model = Linformer(N1, K1, LAYERS, share_layers=True).to(device)
optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3, weight_decay=0.01)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
report("built")

for step in range(3):
    ids, y = documents(B1, N1)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(ids), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}")
del ids, y, loss
report("fp16 training n=4096")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    ids, y = documents(B_EVAL, N1)
    acc = (model(ids).argmax(-1) == y).float().mean()
print(f"eval accuracy {acc.item():.3f}")
del ids, y
report("inference_mode eval")

del model, optimizer, scaler
long_model = Linformer(N2, K2, LAYERS2, share_layers=False, use_checkpoint=True).to(device)
opt2 = torch.optim.AdamW(long_model.parameters(), lr=5e-4)
for step in range(2):
    ids, y = documents(B2, N2)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(long_model(ids), y)
    loss.backward()
    opt2.step()
    opt2.zero_grad(set_to_none=True)
    print(f"long step {step} loss {loss.item():.4f}")
report("checkpointed n=8192 bf16")
