"""SOAP written from the paper's reference code (Shampoo's Kronecker factors per dimension of each
parameter up to 2,048, Adam run in their eigenbasis): the first step only accumulates the factors
(`tensordot` outer products, lerp_ into the running GG) and takes their eigenvectors by
`torch.linalg.eigh` (flipped to descending order), later steps project the gradient into the basis
(`tensordot` per dimension), keep Adam's moments there, project the normalised update back, apply
decoupled weight decay, and every 2 steps refresh each basis by one power iteration and
`torch.linalg.qr` after re-sorting by the estimated eigenvalues (exp_avg_sq permuted with
`index_select`). Model: a ViT-style encoder (images cut into 16x16 patches by `unfold`, a linear
patch embedding, a class token, learned positions, 6 pre-norm nn.TransformerEncoderLayer of 512 and
8 heads, GELU MLP of 2,048, batch_first), fp32 with TF32 matmuls, batch 64 at 224, 100 classes;
4 steps and an evaluation pass at batch 256 under no_grad; 6 phases."""

import math
import os
from itertools import chain

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13202)
torch.backends.cuda.matmul.allow_tf32 = True
B, IMG, D, DEPTH, FF = (4, 64, 64, 2, 256) if SMALL else (64, 224, 512, 6, 2048)
PATCH, CLASSES = 16, 100
device = "cuda" if torch.cuda.is_available() else "cpu"


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        n = (IMG // PATCH) ** 2
        self.embed = nn.Linear(3 * PATCH * PATCH, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, n + 1, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, 8, FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        p = F.unfold(x, PATCH, stride=PATCH).transpose(1, 2)
        h = self.embed(p)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], 1) + self.pos
        h = self.norm(self.encoder(h))
        return self.head(h[:, 0])


class SOAP(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=3e-3,
        betas=(0.95, 0.95),
        shampoo_beta=0.95,
        eps=1e-8,
        weight_decay=0.01,
        precondition_frequency=2,
        max_precond_dim=2048,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            shampoo_beta=shampoo_beta,
            eps=eps,
            weight_decay=weight_decay,
            precondition_frequency=precondition_frequency,
            max_precond_dim=max_precond_dim,
        )
        super().__init__(params, defaults)

    def project(self, grad, state, back=False):
        for mat in state["Q"]:
            if len(mat) > 0:
                grad = torch.tensordot(grad, mat.T if back else mat, dims=[[0], [0]])
            else:
                grad = grad.permute([*range(1, grad.dim()), 0])
        return grad

    def update_preconditioner(self, grad, state, group):
        for idx, sh in enumerate(grad.shape):
            if sh <= group["max_precond_dim"]:
                dims = [*chain(range(idx), range(idx + 1, grad.dim()))]
                outer = torch.tensordot(grad, grad, dims=[dims] * 2)
                state["GG"][idx].lerp_(outer, 1 - group["shampoo_beta"])
        if "Q" not in state:
            qs = []
            for m in state["GG"]:
                if len(m) == 0:
                    qs.append([])
                    continue
                _, q = torch.linalg.eigh(m + 1e-30 * torch.eye(m.shape[0], device=m.device))
                qs.append(torch.flip(q, [1]))
            state["Q"] = qs
        elif state["step"] % group["precondition_frequency"] == 0:
            exp_avg_sq = state["exp_avg_sq"]
            qs = []
            for ind, (m, o) in enumerate(zip(state["GG"], state["Q"], strict=True)):
                if len(m) == 0:
                    qs.append([])
                    continue
                est_eig = torch.diag(o.T @ m @ o)
                sort_idx = torch.argsort(est_eig, descending=True)
                exp_avg_sq = exp_avg_sq.index_select(ind, sort_idx)
                o = o[:, sort_idx]
                q, _ = torch.linalg.qr(m @ o)
                qs.append(q)
            state["exp_avg_sq"] = exp_avg_sq
            state["Q"] = qs

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if "step" not in state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(grad)
                    state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["GG"] = [
                        torch.zeros(sh, sh, device=grad.device) if sh <= group["max_precond_dim"] else []
                        for sh in grad.shape
                    ]
                if "Q" not in state:
                    self.update_preconditioner(grad, state, group)
                    continue
                grad_projected = self.project(grad, state)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad_projected, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).add_(grad_projected.square(), alpha=1 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"] * math.sqrt(1 - beta2 ** state["step"]) / (1 - beta1 ** state["step"])
                norm_grad = self.project(exp_avg / denom, state, back=True)
                p.add_(norm_grad, alpha=-step_size)
                if group["weight_decay"] > 0:
                    p.add_(p, alpha=-group["lr"] * group["weight_decay"])
                self.update_preconditioner(grad, state, group)


model = ViT().to(device)
opt = SOAP(model.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(4):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B,), device=device)
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        n = sum(t.numel() for s in opt.state.values() for t in s["GG"] + s["Q"] if len(t) > 0)
        print(
            f"step {step} loss {loss.item():.4f} preconditioner floats {n}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x = torch.randn(4 * B, 3, IMG, IMG, device=device)
        correct += (model(x).argmax(-1) == torch.randint(0, CLASSES, (4 * B,), device=device)).sum()
if device == "cuda":
    print(
        f"eval correct {correct.item()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
