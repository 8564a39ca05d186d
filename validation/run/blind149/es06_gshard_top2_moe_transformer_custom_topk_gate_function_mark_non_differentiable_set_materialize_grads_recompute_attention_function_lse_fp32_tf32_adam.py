"""A GShard-style mixture-of-experts encoder written with custom autograd Functions: 6 pre-norm
layers 512 wide with 8 heads, each MLP replaced by 8 experts of 2,048 (top-2 routing over groups of
1,024 tokens, capacity factor 1.25, one-hot dispatch and combine tensors by einsum, stacked expert
weights by batched matmul, GShard's auxiliary load-balancing loss). The router's top-2 is a
torch.autograd.Function returning normalised gate weights and the expert indices, the indices
marked non-differentiable and set_materialize_grads(False) so an unused output's gradient stays
None; attention is a Function saving q, k, v, the output and the log-sum-exp and recomputing the
probabilities in its backward. fp32 with TF32 matmuls, Adam, batch 16 x 512 tokens, 3 steps (the
first its own phase), then an evaluation of 32 x 512 under no_grad; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14906)
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    V, D, H, L, E, FF, B, T, GROUP = 256, 64, 4, 2, 4, 128, 2, 64, 64
else:
    V, D, H, L, E, FF, B, T, GROUP = 32000, 512, 8, 6, 8, 2048, 16, 512, 1024
CAP = int(1.25 * 2 * GROUP / E)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Top2Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        probs = torch.softmax(logits, dim=-1)
        vals, idx = probs.topk(2, dim=-1)
        denom = vals.sum(-1, keepdim=True)
        weights = vals / denom
        ctx.mark_non_differentiable(idx)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(probs, idx, weights, denom)
        return weights, idx

    @staticmethod
    def backward(ctx, grad_weights, grad_idx):
        if grad_weights is None:
            return None
        probs, idx, weights, denom = ctx.saved_tensors
        grad_vals = (grad_weights - (grad_weights * weights).sum(-1, keepdim=True)) / denom
        grad_probs = torch.zeros_like(probs).scatter_(-1, idx, grad_vals)
        return probs * (grad_probs - (grad_probs * probs).sum(-1, keepdim=True))


class RecomputeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = (q @ k.transpose(-2, -1)) * scale
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        out = torch.exp(s - lse) @ v
        ctx.scale = scale
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        p = torch.exp((q @ k.transpose(-2, -1)) * ctx.scale - lse)
        dv = p.transpose(-2, -1) @ do
        dp = do @ v.transpose(-2, -1)
        ds = p * (dp - (do * out).sum(-1, keepdim=True))
        del p, dp
        dq = (ds @ k) * ctx.scale
        dk = (ds.transpose(-2, -1) @ q) * ctx.scale
        return dq, dk, dv


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E, bias=False)
        self.w1 = nn.Parameter(torch.randn(E, D, FF) / math.sqrt(D))
        self.b1 = nn.Parameter(torch.zeros(E, 1, FF))
        self.w2 = nn.Parameter(torch.randn(E, FF, D) / math.sqrt(FF))
        self.b2 = nn.Parameter(torch.zeros(E, 1, D))

    def forward(self, x):
        shape = x.shape
        xg = x.reshape(-1, GROUP, D)
        logits = self.router(xg)
        weights, idx = Top2Gate.apply(logits)
        mask1 = F.one_hot(idx[..., 0], E)
        mask2 = F.one_hot(idx[..., 1], E)
        probs = torch.softmax(logits, dim=-1)
        self.aux = (probs.mean(1) * mask1.float().mean(1)).sum(-1).mean() * E
        loc1 = torch.cumsum(mask1, dim=1) - 1
        loc2 = torch.cumsum(mask2, dim=1) - 1 + mask1.sum(1, keepdim=True)
        mask1 = mask1 * (loc1 < CAP)
        mask2 = mask2 * (loc2 < CAP)
        pos1 = (loc1 * mask1).sum(-1)
        pos2 = (loc2 * mask2).sum(-1)
        w1 = weights[..., 0] * mask1.sum(-1)
        w2 = weights[..., 1] * mask2.sum(-1)
        combine = (w1[..., None, None] * mask1[..., None] * F.one_hot(pos1, CAP)[..., None, :]) + (
            w2[..., None, None] * mask2[..., None] * F.one_hot(pos2, CAP)[..., None, :]
        )
        dispatch = combine.gt(0).to(x.dtype)
        expert_in = torch.einsum("gsec,gsd->egcd", dispatch, xg).reshape(E, -1, D)
        h = F.gelu(torch.baddbmm(self.b1, expert_in, self.w1))
        expert_out = torch.baddbmm(self.b2, h, self.w2).reshape(E, xg.shape[0], CAP, D)
        return torch.einsum("gsec,egcd->gsd", combine, expert_out).reshape(shape)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.moe = MoE()

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = RecomputeAttention.apply(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.moe(self.ln2(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, T, D))
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x))


model = Encoder().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    idx = torch.randint(0, V, (B, T), device=device)
    target = torch.randint(0, V, (B, T), device=device)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, V), target.view(-1))
    aux = sum(layer.moe.aux for layer in model.layers) / L
    opt.zero_grad(set_to_none=True)
    (loss + 0.01 * aux).backward()
    opt.step()
    del logits
    if device == "cuda" and step in (0, 2):
        print(
            f"step {step} loss {loss.item():.4f} aux {aux.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del loss, aux
for layer in model.layers:
    del layer.moe.aux

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (2 * B, T), device=device)
    pred = model(idx).argmax(-1)
if device == "cuda":
    print(
        f"eval tokens {pred.numel()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
