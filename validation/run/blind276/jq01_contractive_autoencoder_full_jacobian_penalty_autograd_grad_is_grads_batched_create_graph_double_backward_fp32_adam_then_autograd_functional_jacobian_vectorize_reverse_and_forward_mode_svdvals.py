"""Contractive autoencoder (Rifai et al. 2011) with the exact Jacobian penalty ||dh/dx||_F^2 of a deep
encoder, computed the way the PyTorch docs suggest for batched vector-Jacobian products: one
`torch.autograd.grad(h, x, grad_outputs=E, is_grads_batched=True, create_graph=True)` call where E stacks
the 128 one-hot cotangents of the code (shape 128 x batch x 128, an expanded identity), so autograd runs the
encoder's backward under vmap once for all 128 rows and keeps that batched backward graph for the second
(double) backward of the training loss. Encoder 1024-2048-2048-128 (softplus), decoder mirrored, synthetic
1024-d inputs, batch 192, fp32 (TF32 off), Adam, 12 steps. Phase 2: `torch.autograd.functional.jacobian`
of the code sum over a batch of 48 with vectorize=True (reverse mode: vmap over vjp, 128 rows) and then
the per-sample singular values via torch.linalg.svdvals (48 x 128 x 1024). Phase 3: the same Jacobian with
strategy="forward-mode" (vmap over jvp, one tangent per input coordinate: 6 x 1024 tangents for a batch of
6). Phase 4: reconstruction error of 16,384 samples under no_grad in chunks of 4,096. Fixed sizes; seeded."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.functional import jacobian

torch.manual_seed(2761)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
D, H, C = 1024, 2048, 128
B = 192


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class CAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Linear(D, H), nn.Softplus(), nn.Linear(H, H), nn.Softplus(), nn.Linear(H, C)
        )
        self.dec = nn.Sequential(
            nn.Linear(C, H), nn.Softplus(), nn.Linear(H, H), nn.Softplus(), nn.Linear(H, D)
        )

    def forward(self, x):
        h = torch.tanh(self.enc(x))
        return h, self.dec(h)


model = CAE().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
proto = torch.randn(32, D, device=dev)
codes = torch.randint(0, 32, (16384,), device=dev)
data = proto[codes] + 0.3 * torch.randn(16384, D, device=dev)
eye = torch.eye(C, device=dev)
report("setup")

lam = 1e-2
for step in range(12):
    x = data[step * B : (step + 1) * B].clone().requires_grad_(True)
    h, xr = model(x)
    cot = eye[:, None, :].expand(C, B, C)  # row i of every sample's Jacobian
    (jac,) = torch.autograd.grad(h, x, grad_outputs=cot, is_grads_batched=True, create_graph=True)
    penalty = jac.pow(2).sum() / B
    rec = F.mse_loss(xr, x.detach())
    loss = rec + lam * penalty
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 4 == 0:
        print(f"step {step} rec {rec.item():.4f} contractive {penalty.item():.2f}")
del x, h, xr, jac, penalty, rec, loss, cot
report("train_is_grads_batched")

xe = data[:48]
J = jacobian(lambda z: torch.tanh(model.enc(z)).sum(0), xe, vectorize=True)  # (C, 48, D)
sv = torch.linalg.svdvals(J.permute(1, 0, 2))  # (48, C)
print("reverse jacobian", tuple(J.shape), "top sv", sv[:, 0].mean().item())
del J, sv
report("jacobian_reverse_vectorized")

xf = data[:6]
Jf = jacobian(lambda z: torch.tanh(model.enc(z)).sum(0), xf, vectorize=True, strategy="forward-mode")
print("forward-mode jacobian", tuple(Jf.shape), "frob", Jf.pow(2).sum().item())
del Jf
report("jacobian_forward_mode")

with torch.no_grad():
    tot = 0.0
    for i in range(0, data.shape[0], 4096):
        x = data[i : i + 4096]
        tot += F.mse_loss(model(x)[1], x, reduction="sum").item()
print("eval mse", tot / data.numel())
report("eval")
