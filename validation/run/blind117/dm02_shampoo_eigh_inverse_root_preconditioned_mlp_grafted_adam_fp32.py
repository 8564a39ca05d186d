"""A 4-layer MLP classifier (1,024 -> 2,048 -> 2,048 -> 1,536 -> 1,000, GELU, LayerNorm) trained with
a hand-written Shampoo (Gupta et al. 2018, the distributed-Shampoo recipe): per weight matrix, left
and right Kronecker statistics G G^T and G^T G accumulated with beta2 0.99, inverse fourth roots
recomputed every 2 steps by torch.linalg.eigh on the epsilon-regularised statistics (fp32, each
factor up to 2,048 x 2,048), the preconditioned direction L^-1/4 G R^-1/4 grafted to Adam's norm;
biases and LayerNorms on plain Adam; batch 4,096, fp32, 6 steps, then an eval pass; 7 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11702)
DIMS = [32, 64, 64, 48, 10] if SMALL else [1024, 2048, 2048, 1536, 1000]
B, STEPS, EVERY = (64, 3, 2) if SMALL else (4096, 6, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"

layers = []
for i in range(len(DIMS) - 1):
    layers.append(nn.Linear(DIMS[i], DIMS[i + 1]))
    if i < len(DIMS) - 2:
        layers += [nn.LayerNorm(DIMS[i + 1]), nn.GELU()]
model = nn.Sequential(*layers).to(device)


class Shampoo:
    def __init__(self, params, lr=1e-3, beta2=0.99, eps=1e-6, every=EVERY):
        self.params = list(params)
        self.lr, self.beta2, self.eps, self.every = lr, beta2, eps, every
        self.state = {}
        self.t = 0

    @staticmethod
    def inv_root(stat, eps):
        d = stat.size(0)
        evals, evecs = torch.linalg.eigh(stat + eps * torch.eye(d, device=stat.device))
        return (evecs * evals.clamp_min(eps).pow(-0.25)) @ evecs.T

    @torch.no_grad()
    def step(self):
        self.t += 1
        for p in self.params:
            g = p.grad
            st = self.state.setdefault(p, {})
            if not st:
                st["m"] = torch.zeros_like(p)
                st["v"] = torch.zeros_like(p)
                if p.dim() == 2:
                    st["L"] = torch.zeros(p.size(0), p.size(0), device=p.device)
                    st["R"] = torch.zeros(p.size(1), p.size(1), device=p.device)
                    st["Li"] = torch.eye(p.size(0), device=p.device)
                    st["Ri"] = torch.eye(p.size(1), device=p.device)
            st["m"].mul_(0.9).add_(g, alpha=0.1)
            st["v"].mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            adam = st["m"] / (st["v"] / (1 - self.beta2**self.t)).sqrt().add_(1e-8)
            if p.dim() == 2:
                st["L"].mul_(self.beta2).addmm_(g, g.T, alpha=1 - self.beta2)
                st["R"].mul_(self.beta2).addmm_(g.T, g, alpha=1 - self.beta2)
                if self.t % self.every == 1 or self.every == 1:
                    st["Li"] = self.inv_root(st["L"], self.eps)
                    st["Ri"] = self.inv_root(st["R"], self.eps)
                direction = st["Li"] @ st["m"] @ st["Ri"]
                direction.mul_(adam.norm() / direction.norm().clamp_min(1e-12))
            else:
                direction = adam
            p.add_(direction, alpha=-self.lr)


opt = Shampoo(model.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    x = torch.randn(B, DIMS[0], device=device)
    y = torch.randint(0, DIMS[-1], (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad():
    x = torch.randn(2 * B, DIMS[0], device=device)
    acc = model(x).argmax(-1).float().mean()
if device == "cuda":
    print(
        f"eval {acc.item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
