"""A small decoder-only language model whose pieces are custom ``torch.autograd.Function`` s, the way a
kernel author prototypes fused ops before writing them in Triton:

* ``RMSNormFn`` in the new style (``forward`` without ctx, ``setup_context``), returning the normalised
  output and the reciprocal RMS, which is marked non-differentiable; it saves for backward and, with
  ``ctx.save_for_forward``, for its ``jvp``; ``generate_vmap_rule = True``. Under autocast it runs in fp32
  inside ``torch.autocast(enabled=False)``.
* ``SquaredReLUFn`` in the old style, backward wrapped in ``@once_differentiable``, with a ``jvp``.
* ``TopKRouterFn``: a mixture-of-experts router returning dense gates (softmax over the top 2 of 8 logits,
  scattered back) and the expert indices, marked non-differentiable; all experts run densely and are
  weighted by the gates, so no size depends on the routing.

``torch.autograd.graph.register_multi_grad_hook`` records, per block, when all of its weight gradients are
ready. Phases: 0 model and data; 1 training under bf16 autocast with AdamW (foreach) and a cosine schedule,
batch 16 x 512; 2 forward-mode sensitivity of the loss to an embedding perturbation with
``torch.autograd.forward_ad`` (dual tensors through the custom jvps) in fp32 under no_grad, attention
restricted to ``sdpa_kernel(SDPBackend.MATH)``; 3 top-k sampling of
64 new tokens for 32 prompts of 64 under inference_mode and bf16 autocast, the top-k done by the router
Function."""

import math

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(1234)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class RMSNormFn(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return x * rstd * weight, rstd

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, _eps = inputs
        _, rstd = output
        ctx.mark_non_differentiable(rstd)
        ctx.save_for_backward(x, weight, rstd)
        ctx.save_for_forward(x, weight, rstd)

    @staticmethod
    def backward(ctx, gy, grstd):
        x, weight, rstd = ctx.saved_tensors
        xhat = x * rstd
        gw = (gy * xhat).reshape(-1, x.shape[-1]).sum(0)
        gxhat = gy * weight
        gx = rstd * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
        return gx, gw, None

    @staticmethod
    def jvp(ctx, tx, tw, teps):
        x, weight, rstd = ctx.saved_tensors
        xhat = x * rstd
        txhat = rstd * (tx - xhat * (tx * xhat).mean(-1, keepdim=True))
        ty = txhat * weight
        if tw is not None:
            ty = ty + xhat * tw
        return ty, None


class SquaredReLUFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        r = torch.relu(x)
        ctx.save_for_backward(r)
        ctx.save_for_forward(r)
        return r * r

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        (r,) = ctx.saved_tensors
        return gy * 2 * r

    @staticmethod
    def jvp(ctx, tx):
        (r,) = ctx.saved_tensors
        return tx * 2 * r


class TopKRouterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, k):
        vals, idx = logits.topk(k, dim=-1)
        probs = torch.softmax(vals.float(), dim=-1)
        gates = torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, idx, probs)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(probs, idx)
        ctx.save_for_forward(probs, idx)
        return gates, idx

    @staticmethod
    def backward(ctx, ggates, gidx):
        probs, idx = ctx.saved_tensors
        gp = ggates.gather(-1, idx)
        gvals = probs * (gp - (gp * probs).sum(-1, keepdim=True))
        return torch.zeros_like(ggates).scatter_(-1, idx, gvals), None

    @staticmethod
    def jvp(ctx, tlogits, tk):
        probs, idx = ctx.saved_tensors
        tv = tlogits.gather(-1, idx)
        tp = probs * (tv - (tv * probs).sum(-1, keepdim=True))
        return torch.zeros_like(tlogits).scatter_(-1, idx, tp), None


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        with torch.autocast(device_type="cuda", enabled=False):
            y = RMSNormFn.apply(x.float(), self.weight, self.eps)[0]
        return y.type_as(x)


class MoE(nn.Module):
    def __init__(self, d, n_experts=8, hidden=1024, k=2):
        super().__init__()
        self.router = nn.Linear(d, n_experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(n_experts, d, hidden) / math.sqrt(d))
        self.w_out = nn.Parameter(torch.randn(n_experts, hidden, d) / math.sqrt(hidden))
        self.k = k

    def forward(self, x):
        gates, _ = TopKRouterFn.apply(self.router(x), self.k)
        h = SquaredReLUFn.apply(torch.einsum("btd,edh->bteh", x, self.w_in))
        y = torch.einsum("bteh,ehd->bted", h, self.w_out)
        return (y * gates.unsqueeze(-1)).sum(2)


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.norm1 = RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.moe = MoE(d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.moe(self.norm2(x))


class LM(nn.Module):
    def __init__(self, vocab=8192, d=384, n_layer=4, n_head=6, block=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def embed(self, idx):
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))

    def forward_from_embeddings(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))

    def forward(self, idx):
        return self.forward_from_embeddings(self.embed(idx))


vocab, B, T = 8192, 16, 512
model = LM(vocab=vocab).to(device)
data = torch.randint(0, vocab, (64, T + 1), device=device)
ready = []
for i, blk in enumerate(model.blocks):
    torch.autograd.graph.register_multi_grad_hook(
        [p for p in blk.parameters()], lambda grads, i=i: ready.append(i)
    )
report("model and data")

opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=12)
model.train()
for step in range(12):
    batch = data[(step * B) % 64 : (step * B) % 64 + B]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), batch[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()
print("train loss", loss.item(), "blocks ready in order", ready[-4:])
report("bf16 training with custom Functions")

# forward-mode sensitivity of the loss to a random embedding direction
model.eval()
idx = data[:8, :-1]
with torch.no_grad():
    emb = model.embed(idx)
    tangent = torch.randn_like(emb)
    # the fused attention kernels have no forward-mode formula: the math backend has
    with fwAD.dual_level(), sdpa_kernel(SDPBackend.MATH):
        dual = fwAD.make_dual(emb, tangent)
        logits = model.forward_from_embeddings(dual)
        loss = F.cross_entropy(logits.view(-1, vocab), data[:8, 1:].reshape(-1))
        primal, dloss = fwAD.unpack_dual(loss)
    print("loss", primal.item(), "directional derivative", dloss.item())
report("forward-mode jvp through custom Functions")

# top-k sampling with the router Function
prompts = data[:32, :64].clone()
g = torch.Generator(device=device).manual_seed(7)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    seq = prompts
    for _ in range(64):
        logits = model(seq[:, -T:])[:, -1, :].float()
        gates, top_idx = TopKRouterFn.apply(logits / 0.8, 50)
        choice = torch.multinomial(gates, 1, generator=g)
        seq = torch.cat([seq, choice], dim=1)
print("generated", tuple(seq.shape))
report("top-k sampling")
