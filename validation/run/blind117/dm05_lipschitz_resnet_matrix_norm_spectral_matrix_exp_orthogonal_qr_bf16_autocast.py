"""A Lipschitz-constrained residual MLP (as in certified-robustness papers), written by hand: 6 blocks
of width 1,024, each with two linear maps divided by their exact spectral norm from
torch.linalg.matrix_norm(W, ord=2) (singular values through cuSOLVER, gradient through them) and an
orthogonal mixing map exp(A - A^T) by torch.linalg.matrix_exp of a learned skew-symmetric 1,024 x
1,024 matrix; each block's first map initialised orthogonal by a QR of a random matrix
(torch.linalg.qr, mode reduced); the blocks run under bf16 autocast (the linalg in fp32, as autocast
leaves it), batch 2,048, SGD with Nesterov momentum, 3 steps; then a certified-radius eval with the
nuclear and Frobenius norms (matrix_norm 'nuc' and 'fro') of every weight; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11705)
W_, NB, B, NCLS, STEPS = (32, 2, 16, 10, 2) if SMALL else (1024, 6, 2048, 100, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(W_, W_) / W_**0.5)
        self.w2 = nn.Parameter(torch.randn(W_, W_) / W_**0.5)
        self.skew = nn.Parameter(torch.zeros(W_, W_))
        self.b = nn.Parameter(torch.zeros(W_))

    def forward(self, x):
        w1 = self.w1 / torch.linalg.matrix_norm(self.w1, ord=2)
        w2 = self.w2 / torch.linalg.matrix_norm(self.w2, ord=2)
        Q = torch.linalg.matrix_exp(self.skew - self.skew.T)
        h = F.relu(F.linear(x, w1, self.b))
        return F.linear(x + 0.5 * F.linear(h, w2), Q)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(784, W_)
        self.blocks = nn.ModuleList(Block() for _ in range(NB))
        self.head = nn.Linear(W_, NCLS)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


net = Net().to(device)
with torch.no_grad():
    for b in net.blocks:
        q, r = torch.linalg.qr(torch.randn(W_, W_, device=device), mode="reduced")
        b.w1.copy_(q * r.diagonal().sign())
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    x = torch.randn(B, 784, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = net(x)
        loss = F.cross_entropy(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, logits, loss

with torch.no_grad():
    norms = []
    for b in net.blocks:
        for w in (b.w1, b.w2):
            norms.append(
                torch.stack([torch.linalg.matrix_norm(w, "nuc"), torch.linalg.matrix_norm(w, "fro")])
            )
    norms = torch.stack(norms)
    x = torch.randn(B, 784, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        top2 = net(x).float().topk(2, -1).values
    radius = (top2[:, 0] - top2[:, 1]) / 2**0.5
if device == "cuda":
    print(
        f"certify nuc {norms[:, 0].mean().item():.2f} radius {radius.mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
