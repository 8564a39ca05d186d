"""A decoder-only GPT (12 layers, 1,024 wide, 16 heads, SwiGLU MLP of 2,816, RMSNorm, SDPA causal
attention, vocabulary 32,000) whose MLP and norms are torch.autograd.Functions written by hand to
save memory: the SwiGLU Function saves only its input and weights and recomputes the gate, the up
projection and their product in its @once_differentiable backward; the RMSNorm Function saves its
input and the fp32 reciprocal RMS and writes the gradient formula out. Pure bf16 parameters,
AdamW (foreach), batch 8 x 1,024; 2 steps with the Functions, then the same model with the plain
nn ops (F.silu, F.rms_norm) for 1 step to compare, then a validation loss under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14901)
if SMALL:
    V, D, L, H, FF, B, T = 256, 64, 2, 4, 160, 2, 32
else:
    V, D, L, H, FF, B, T = 32000, 1024, 12, 16, 2816, 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down):
        g = x @ w_gate.t()
        u = x @ w_up.t()
        h = F.silu(g) * u
        ctx.save_for_backward(x, w_gate, w_up, w_down)
        return h @ w_down.t()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, w_gate, w_up, w_down = ctx.saved_tensors
        g = x @ w_gate.t()
        u = x @ w_up.t()
        sg = torch.sigmoid(g)
        silu_g = g * sg
        h = silu_g * u
        go2 = grad_out.reshape(-1, grad_out.shape[-1])
        grad_w_down = go2.t() @ h.reshape(-1, h.shape[-1])
        grad_h = grad_out @ w_down
        del h
        grad_u = grad_h * silu_g
        grad_g = grad_h * u * (sg * (1 + g * (1 - sg)))
        del grad_h, u, sg, silu_g, g
        x2 = x.reshape(-1, x.shape[-1])
        grad_w_gate = grad_g.reshape(-1, grad_g.shape[-1]).t() @ x2
        grad_w_up = grad_u.reshape(-1, grad_u.shape[-1]).t() @ x2
        grad_x = grad_g @ w_gate + grad_u @ w_up
        return grad_x, grad_w_gate, grad_w_up, grad_w_down


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        y = (xf * rstd).to(x.dtype) * weight
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, rstd = ctx.saved_tensors
        xf = x.float()
        xhat = xf * rstd
        gw = grad_y.float() * weight.float()
        grad_x = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
        grad_weight = (grad_y.float() * xhat).sum(dim=tuple(range(x.dim() - 1)))
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
        self.custom = True

    def forward(self, x):
        if self.custom:
            return RMSNormFunction.apply(x, self.weight, self.eps)
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)
        self.custom = True

    def forward(self, x):
        if self.custom:
            return SwiGLUFunction.apply(x, self.gate.weight, self.up.weight, self.down.weight)
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.norm2 = RMSNorm(D)
        self.mlp = SwiGLU()

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def set_custom(model, flag):
    for m in model.modules():
        if hasattr(m, "custom"):
            m.custom = flag


model = GPT().to(device=device, dtype=dtype)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
if device == "cuda":
    n = sum(p.numel() for p in model.parameters())
    print(f"params {n} model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def step(tag):
    idx = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.view(-1, V).float(), idx[:, 1:].reshape(-1))
    del logits
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
step("custom step 0")
step("custom step 1")
set_custom(model, False)
step("nn reference step")
set_custom(model, True)

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (B, T + 1), device=device)
    val = F.cross_entropy(model(idx[:, :-1]).view(-1, V).float(), idx[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"val loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
