"""A residual MLP classifier (3,072 -> 1,024 stem, 4 pre-LayerNorm blocks of 1,024 -> 4,096 -> 1,024 with
GELU, a 100-way head; fp32) trained with a hand-written Shampoo in the style of Meta's
distributed_shampoo: each weight gradient split into blocks of at most 1,024 x 1,024
(max_preconditioner_dim), per block the left and right Kronecker factors G G^T and G^T G accumulated
in fp32 with beta2 0.999 by addmm_, the inverse fourth roots recomputed every 4 steps from step 3
(start_preconditioning_step) in float64 by torch.linalg.eigh of the epsilon-regularised factor
(the roots kept in fp32), the preconditioned block L^-1/4 G R^-1/4 grafted to Adam's per-block norm
(AdamGraftingConfig), biases and LayerNorms on the grafted Adam direction alone; decoupled weight
decay, batch 2,048 of seeded random features, 8 steps; then a no_grad eval of 8,192 samples; then the
factors' spectra by one batched torch.linalg.eigvalsh per block shape (float64) for condition numbers.
Phases: step 0, steps 1-3 (the first root computation), steps 4-7 (preconditioned, roots again at
step 7), eval, spectra; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17201)
if SMALL:
    IN, D, HID, DEPTH, CLASSES, B, BLOCK, STEPS, EVAL_N = 48, 32, 64, 2, 10, 16, 32, 8, 32
else:
    IN, D, HID, DEPTH, CLASSES, B, BLOCK, STEPS, EVAL_N = 3072, 1024, 4096, 4, 100, 2048, 1024, 8, 8192
EVERY, START = 4, 3
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, HID)
        self.fc2 = nn.Linear(HID, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(IN, D)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        x = self.stem(x)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


class BlockedShampoo(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-12, root_eps=1e-6, weight_decay=1e-4):
        super().__init__(
            params, dict(lr=lr, betas=betas, eps=eps, root_eps=root_eps, weight_decay=weight_decay)
        )
        self.t = 0

    @staticmethod
    def blocks(t):
        if t.dim() < 2:
            return [t]
        return [c for r in torch.split(t, BLOCK, dim=0) for c in torch.split(r, BLOCK, dim=1)]

    @staticmethod
    def inv_root(factor, eps):
        a = factor.double()
        a.diagonal().add_(eps)
        evals, evecs = torch.linalg.eigh(a)
        root = (evecs * evals.clamp_min(eps).pow(-0.25)) @ evecs.mT
        return root.float()

    @torch.no_grad()
    def step(self):
        self.t += 1
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["m"] = torch.zeros_like(p)
                    st["v"] = torch.zeros_like(p)
                    if p.dim() == 2:
                        st["L"] = [torch.zeros(g.size(0), g.size(0), device=p.device) for g in self.blocks(p)]
                        st["R"] = [torch.zeros(g.size(1), g.size(1), device=p.device) for g in self.blocks(p)]
                        st["Lr"] = [None] * len(st["L"])
                        st["Rr"] = [None] * len(st["R"])
                g = p.grad
                st["m"].mul_(b1).add_(g, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = st["m"] / (1 - b1**self.t)
                adam_dir = m_hat / ((st["v"] / (1 - b2**self.t)).sqrt() + group["eps"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                if p.dim() < 2:
                    p.add_(adam_dir, alpha=-group["lr"])
                    continue
                direction = torch.empty_like(p)
                blocks_g = self.blocks(g)
                blocks_m = self.blocks(m_hat)
                blocks_a = self.blocks(adam_dir)
                blocks_d = self.blocks(direction)
                for i, (gb, mb, ab, db) in enumerate(
                    zip(blocks_g, blocks_m, blocks_a, blocks_d, strict=False)
                ):
                    st["L"][i].mul_(b2).addmm_(gb, gb.mT, alpha=1 - b2)
                    st["R"][i].mul_(b2).addmm_(gb.mT, gb, alpha=1 - b2)
                    if self.t - 1 >= START and (self.t - 1 - START) % EVERY == 0:
                        st["Lr"][i] = self.inv_root(st["L"][i], group["root_eps"])
                        st["Rr"][i] = self.inv_root(st["R"][i], group["root_eps"])
                    if st["Lr"][i] is None:
                        db.copy_(ab)
                    else:
                        pre = st["Lr"][i] @ mb @ st["Rr"][i]
                        db.copy_(pre * (ab.norm() / pre.norm().clamp_min(1e-16)))
                p.add_(direction, alpha=-group["lr"])


model = ResMLP().to(device)
opt = BlockedShampoo(model.parameters(), lr=3e-4)
gen = torch.Generator().manual_seed(17201)
proj = torch.randn(IN, CLASSES, generator=gen).to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    x = torch.randn(n, IN, generator=gen).to(device)
    y = (x @ proj).argmax(dim=1)
    return x, y


model.train()
for step in range(STEPS):
    x, y = batch(B)
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, START):
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _i in range(0, EVAL_N, B):
        x, y = batch(B)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"eval acc {correct / EVAL_N:.4f}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    by_shape = {}
    for p in model.parameters():
        st = opt.state[p]
        if "L" in st:
            for f in st["L"] + st["R"]:
                by_shape.setdefault(f.size(0), []).append(f)
    for n, fs in sorted(by_shape.items()):
        stacked = torch.stack(fs).double()
        stacked.diagonal(dim1=-2, dim2=-1).add_(1e-6)
        ev = torch.linalg.eigvalsh(stacked)
        cond = ev[:, -1] / ev[:, 0].clamp_min(1e-30)
        print(f"factors {n}: {len(fs)} max cond {cond.max().item():.3e}")
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")
