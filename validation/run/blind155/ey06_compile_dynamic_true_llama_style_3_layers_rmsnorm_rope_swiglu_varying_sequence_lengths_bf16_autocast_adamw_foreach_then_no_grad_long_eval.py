"""torch.compile(model, dynamic=True) over varying sequence lengths: a small Llama-style decoder
written by hand (3 layers of 1,024 wide, 16 heads, RMSNorm, rotary embeddings computed in the forward
from the sequence length, SwiGLU MLP of 2,816, F.scaled_dot_product_attention(is_causal=True), untied
LM head over 32,000 tokens) trained on length-bucketed batches of 16 x 256, 8 x 640, 6 x 1,024 and
16 x 384 tokens (one symbolic-shape graph for all of them: no recompile as the length changes) under
bf16 autocast with foreach AdamW and gradient clipping; then a no_grad evaluation at 4 x 1,536 (one
more graph, without the backward). 6 phases: the model, each training length, the evaluation."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15506)
if SMALL:
    V, D, H, L, FF = 256, 64, 4, 2, 128
    BATCHES, EVAL = ((4, 16), (2, 40), (2, 64), (4, 24)), (2, 96)
else:
    V, D, H, L, FF = 32000, 1024, 16, 3, 2816
    BATCHES, EVAL = ((16, 256), (8, 640), (6, 1024), (16, 384)), (4, 1536)
HD = D // H
device = "cuda" if torch.cuda.is_available() else "cpu"


class RMSNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.mlp_norm = RMSNorm()
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, H, HD).transpose(1, 2)
        k = self.wk(h).view(b, t, H, HD).transpose(1, 2)
        v = self.wv(h).view(b, t, H, HD).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        x = x + self.wo(a)
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList([Layer() for _ in range(L)])
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(D, V, bias=False)
        self.register_buffer(
            "inv_freq", 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD)), persistent=False
        )

    def forward(self, ids):
        t = ids.shape[1]
        freqs = torch.outer(torch.arange(t, device=ids.device, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


model = TinyLlama().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
cmodel = torch.compile(model, dynamic=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b, t in BATCHES:
    ids = torch.randint(0, V, (b, t + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = cmodel(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"len {t} x {b} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, V, EVAL, device=device)
    nll = F.cross_entropy(cmodel(ids[:, :-1]).flatten(0, 1).float(), ids[:, 1:].flatten())
if device == "cuda":
    print(
        f"eval nll {nll.item():.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
