"""Sophia-H (Liu et al. 2023) written by hand as a torch.optim.Optimizer subclass over a small GPT whose
attention is written out (q @ k^T, masked_fill with a causal bool buffer, softmax, @ v) so that it can be
differentiated twice. Every second step the diagonal Hessian is estimated by Hutchinson's method: the
gradients are taken with torch.autograd.grad(create_graph=True), Rademacher vectors u are drawn with
randint_like, and a second torch.autograd.grad gives the Hessian-vector products; the optimizer keeps an
EMA of u * Hv in self.state and clips the ratio of momentum to rho * Hessian at 1.

GPT: vocabulary 16,384, 8 layers of 768 (12 heads, MLP 3072, tanh GELU), context 512, tied head.
Phases: 6 Sophia-H steps under bf16 autocast at batch 12 (Hessian on steps 0, 2, 4); no_grad evaluation at
batch 32; the Sophia state deleted and 3 fused AdamW steps with clip_grad_norm_(foreach=True) at batch 16.
3 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer

torch.manual_seed(2261)
device = "cuda"
V, D, L, H, T = 16384, 768, 8, 12, 512


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
        att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class SophiaH(Optimizer):
    def __init__(self, params, lr=6e-4, betas=(0.965, 0.99), rho=0.04, weight_decay=0.1, eps=1e-12):
        super().__init__(params, dict(lr=lr, betas=betas, rho=rho, weight_decay=weight_decay, eps=eps))

    @torch.no_grad()
    def update_hessian(self, us, hvps):
        i = 0
        for group in self.param_groups:
            b2 = group["betas"][1]
            for p in group["params"]:
                st = self.state[p]
                if "hessian" not in st:
                    st["hessian"] = torch.zeros_like(p)
                st["hessian"].mul_(b2).addcmul_(us[i], hvps[i], value=1 - b2)
                i += 1

    @torch.no_grad()
    def step(self, bs):
        for group in self.param_groups:
            b1 = group["betas"][0]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "exp_avg" not in st:
                    st["exp_avg"] = torch.zeros_like(p)
                    st["hessian"] = st.get("hessian", torch.zeros_like(p))
                p.mul_(1 - group["lr"] * group["weight_decay"])
                st["exp_avg"].mul_(b1).add_(p.grad, alpha=1 - b1)
                ratio = (st["exp_avg"].abs() / (group["rho"] * bs * st["hessian"] + group["eps"])).clamp(max=1)
                p.addcmul_(st["exp_avg"].sign(), ratio, value=-group["lr"])


model = GPT().to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
params = decay + no_decay  # the optimizer's order, for update_hessian
opt = SophiaH([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
report("after model")

# Phase 1: Sophia-H with Hutchinson estimates every 2 steps.
B = 12
for step in range(6):
    idx = torch.randint(0, V, (B, T), device=device)
    tgt = torch.randint(0, V, (B, T), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))
    if step % 2 == 0:
        grads = torch.autograd.grad(loss, params, create_graph=True)
        us = [torch.randint_like(p, 2) * 2 - 1 for p in params]
        hvps = torch.autograd.grad(grads, params, grad_outputs=us)
        opt.update_hessian(us, hvps)
        for p, g in zip(params, grads):
            p.grad = g.detach()
        del grads, us, hvps
    else:
        loss.backward()
    opt.step(bs=B * T)
    opt.zero_grad(set_to_none=True)
    print(f"sophia step {step} loss {loss.item():.4f} mem {torch.cuda.memory_allocated()}")
report("sophia train")

# Phase 2: evaluation.
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    idx = torch.randint(0, V, (32, T), device=device)
    logits = model(idx)
    ev = F.cross_entropy(logits.float().view(-1, V), idx.view(-1))
print(f"eval loss {ev.item():.4f}")
del logits
report("eval")

# Phase 3: Sophia's state dropped, fused AdamW with global-norm clipping.
model.train()
del opt
opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, fused=True)
for step in range(3):
    idx = torch.randint(0, V, (16, T), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
        loss = F.cross_entropy(logits.float()[:, :-1].reshape(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"adamw step {step} loss {loss.item():.4f} gnorm {gn.item():.3f}")
report("adamw train")
