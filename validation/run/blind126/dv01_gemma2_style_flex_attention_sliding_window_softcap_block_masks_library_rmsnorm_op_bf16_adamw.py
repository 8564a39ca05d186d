"""A Gemma-2-style decoder written by hand whose attention is flex_attention called eagerly (no
torch.compile): layers alternate a sliding-window causal BlockMask (window 256) and a global
prefix-LM BlockMask (the first 128 tokens of each row see one another), with a score_mod soft-capping
the logits by tanh at 50; its RMSNorm (1 + weight, float32 inside) is a torch.library custom op
with register_fake and register_autograd (setup_context saves the input and the inverse RMS);
768 wide, 6 layers, 12 heads of 64, GeGLU MLP of 3,072, tied embeddings, bf16 weights, AdamW,
batch 6 x 1,024, 2 steps, then an evaluation under no_grad with the sliding-window mask alone;
4 phases (the CPU smoke run stops at the first loss: flex_attention has no CPU backward)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12601)
V, D, NH, NL, FF, B, L = (128, 64, 2, 2, 128, 2, 256) if SMALL else (32000, 768, 12, 6, 3072, 6, 1024)
HD = D // NH
WINDOW, PREFIX, CAP = 256 if not SMALL else 64, 128 if not SMALL else 32, 50.0
device = "cuda" if torch.cuda.is_available() else "cpu"


@torch.library.custom_op("dv01::rmsnorm", mutates_args=())
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * inv * (1.0 + weight.float())).to(x.dtype)


@rmsnorm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    x, weight, eps = inputs
    inv = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    ctx.save_for_backward(x, weight, inv)


def _backward(ctx, grad):
    x, weight, inv = ctx.saved_tensors
    xf, g = x.float(), grad.float()
    xhat = xf * inv
    gw = (g * xhat).flatten(0, -2).sum(0)
    gx = g * (1.0 + weight.float())
    gx = inv * (gx - xhat * (gx * xhat).mean(-1, keepdim=True))
    return gx.to(x.dtype), gw.to(weight.dtype), None


rmsnorm.register_autograd(_backward, setup_context=_setup)


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return rmsnorm(x, self.weight, 1e-6)


def softcap(score, b, h, q, kv):
    return CAP * torch.tanh(score / CAP)


class Block(nn.Module):
    def __init__(self, local):
        super().__init__()
        self.local = local
        self.n1, self.n2, self.n3, self.n4 = RMSNorm(D), RMSNorm(D), RMSNorm(D), RMSNorm(D)
        self.q, self.k, self.v = (
            nn.Linear(D, D, bias=False),
            nn.Linear(D, D, bias=False),
            nn.Linear(D, D, bias=False),
        )
        self.o = nn.Linear(D, D, bias=False)
        self.gate, self.up = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, masks):
        b, n, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, n, NH, HD).transpose(1, 2)
        k = self.k(h).view(b, n, NH, HD).transpose(1, 2)
        v = self.v(h).view(b, n, NH, HD).transpose(1, 2)
        mask = masks["local"] if self.local else masks["global"]
        a = flex_attention(q, k, v, score_mod=softcap, block_mask=mask, scale=HD**-0.5)
        x = x + self.n2(self.o(a.transpose(1, 2).reshape(b, n, D)))
        h = self.n3(x)
        return x + self.n4(self.down(F.gelu(self.gate(h), approximate="tanh") * self.up(h)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block(i % 2 == 0) for i in range(NL))
        self.norm = RMSNorm(D)

    def forward(self, ids, masks):
        x = self.emb(ids) * (D**0.5)
        for blk in self.blocks:
            x = blk(x, masks)
        logits = F.linear(self.norm(x), self.emb.weight)
        return 30.0 * torch.tanh(logits.float() / 30.0)


def sliding(b, h, q, kv):
    return (q >= kv) & (q - kv < WINDOW)


def prefix_lm(b, h, q, kv):
    return (q >= kv) | ((q < PREFIX) & (kv < PREFIX))


model = Model().to(device, torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.95), weight_decay=0.1)
masks = {
    "local": create_block_mask(sliding, None, None, L, L, device=device),
    "global": create_block_mask(prefix_lm, None, None, L, L, device=device),
}
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, L + 1), device=device)
    with torch.set_grad_enabled(device == "cuda"):
        logits = model(ids[:, :-1], masks)
    loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    if device == "cpu":  # flex_attention has no CPU backward: the smoke run stops at the loss
        print(f"smoke loss {loss.item():.3f}")
        raise SystemExit
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, logits, loss
model.eval()
with torch.no_grad():
    ids = torch.randint(0, V, (2 * B, L), device=device)
    local = {"local": masks["local"], "global": masks["local"]}
    nll = F.cross_entropy(model(ids, local)[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"eval nll {nll.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
