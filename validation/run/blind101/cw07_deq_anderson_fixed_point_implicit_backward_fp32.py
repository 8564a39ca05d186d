"""Deep equilibrium model (DEQ) for image classification: a stem convolution, then one residual
conv block f(z, x) (two 3x3 convolutions, GroupNorm, ReLU) solved for its fixed point z* = f(z*, x)
by Anderson acceleration under no_grad (window 5, 25 iterations, the mixing weights from batched
torch.linalg.solve of the (6 x 6) bordered Gram systems, bmm over (B, 5, C*H*W) history buffers);
one more f call with gradients, and the implicit backward as a tensor hook that solves the adjoint
fixed point g = J^T g + grad by the same Anderson solver, each iterate a torch.autograd.grad
vector-Jacobian product through a detached copy of f (retain_graph); AdamW, batch 96 of 48 channels
at 32 x 32, fp32, 3 steps, then a no_grad evaluation of 256 images; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10107)
B, C, R, ITERS, STEPS = (4, 8, 8, 6, 2) if SMALL else (96, 48, 32, 25, 3)
M = 5
device = "cuda" if torch.cuda.is_available() else "cpu"


def anderson(fn, x0, m=M, iters=ITERS, lam=1e-4, beta=1.0):
    bsz = x0.shape[0]
    d = x0[0].numel()
    X = torch.zeros(bsz, m, d, dtype=x0.dtype, device=x0.device)
    Fv = torch.zeros(bsz, m, d, dtype=x0.dtype, device=x0.device)
    X[:, 0], Fv[:, 0] = x0.reshape(bsz, -1), fn(x0).reshape(bsz, -1)
    X[:, 1], Fv[:, 1] = Fv[:, 0], fn(Fv[:, 0].reshape_as(x0)).reshape(bsz, -1)
    H = torch.zeros(bsz, m + 1, m + 1, dtype=x0.dtype, device=x0.device)
    H[:, 0, 1:] = H[:, 1:, 0] = 1
    y = torch.zeros(bsz, m + 1, 1, dtype=x0.dtype, device=x0.device)
    y[:, 0] = 1
    res = []
    k = 1
    for k in range(2, iters):
        n = min(k, m)
        G = Fv[:, :n] - X[:, :n]
        H[:, 1 : n + 1, 1 : n + 1] = (
            torch.bmm(G, G.transpose(1, 2)) + lam * torch.eye(n, dtype=x0.dtype, device=x0.device)[None]
        )
        alpha = torch.linalg.solve(H[:, : n + 1, : n + 1], y[:, : n + 1])[:, 1 : n + 1, 0]
        X[:, k % m] = (
            beta * (alpha[:, None] @ Fv[:, :n])[:, 0] + (1 - beta) * (alpha[:, None] @ X[:, :n])[:, 0]
        )
        Fv[:, k % m] = fn(X[:, k % m].reshape_as(x0)).reshape(bsz, -1)
        res.append((Fv[:, k % m] - X[:, k % m]).norm() / (1e-5 + Fv[:, k % m].norm()))
    return X[:, k % m].reshape_as(x0), torch.stack(res)


class ResBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(C, 2 * C, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(2 * C, C, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(8, 2 * C)
        self.norm2 = nn.GroupNorm(8, C)
        self.norm3 = nn.GroupNorm(8, C)

    def forward(self, z, x):
        y = self.norm1(F.relu(self.conv1(z)))
        return self.norm3(F.relu(z + self.norm2(x + self.conv2(y))))


class DEQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, C, 3, padding=1, bias=False), nn.BatchNorm2d(C))
        self.f = ResBlock()
        self.head = nn.Sequential(nn.BatchNorm2d(C), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(C, 10))

    def forward(self, img):
        x = self.stem(img)
        with torch.no_grad():
            z, self.fwd_res = anderson(lambda z: self.f(z, x), torch.zeros_like(x))
        z = self.f(z, x)
        if self.training:
            z0 = z.clone().detach().requires_grad_()
            f0 = self.f(z0, x)

            def backward_hook(grad):
                g, self.bwd_res = anderson(
                    lambda y: torch.autograd.grad(f0, z0, y, retain_graph=True)[0] + grad, grad
                )
                return g

            z.register_hook(backward_hook)
        return self.head(z)


model = DEQ().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    img = torch.randn(B, 3, R, R, device=device)
    target = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(img), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} fwd {model.fwd_res[-1].item():.2e}"
            f" bwd {model.bwd_res[-1].item():.2e}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del img, target, loss
model.eval()
with torch.no_grad():
    pred = model(torch.randn(256, 3, R, R, device=device)).argmax(-1)
if device == "cuda":
    print(
        f"eval {pred.bincount(minlength=10).tolist()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
