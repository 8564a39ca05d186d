"""A differentiable optimization layer in the OptNet style, written the way a user writes one with
`torch.linalg`: each sample's output is the solution z* of an equality-constrained quadratic program
    min_z  1/2 z^T Q z + p^T z   subject to   A z = b,
whose KKT system [[Q, A^T], [A, 0]] [z; nu] = [-p; b] is symmetric indefinite, so it is factored with
`torch.linalg.ldl_factor_ex` (Bunch-Kaufman LDL^T, cuSOLVER sytrf on CUDA, one batch of matrices) and
solved with `torch.linalg.ldl_solve`; neither has a derivative formula, so a custom
`torch.autograd.Function` saves the factors and the solution and, in backward, solves the same KKT
system with the incoming gradient (implicit differentiation: dK = -d sol^T, drhs = d, the KKT matrix
being symmetric) and returns gradients for Q, A, p and b through the KKT matrix's blocks. A small MLP
predicts p and a low-rank-plus-diagonal Q = L L^T + eps I (L: n x 32) from each sample's features; A and
b are learned parameters shared by the batch. n = 256 variables, m = 64 constraints (KKT 320 x 320),
batch 512, fp32, TF32 off, Adam. Phase 1: model and data. Phase 2: 4 training steps (MSE of z* to a
target). Phase 3: a no_grad solve of 1,024 problems in two chunks. Seeded; no value-dependent sizes."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2802)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
B, N, M, R, FEAT = 512, 256, 64, 32, 128


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class KKTSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, K, rhs):
        LD, piv, _info = torch.linalg.ldl_factor_ex(K)
        sol = torch.linalg.ldl_solve(LD, piv, rhs)
        ctx.save_for_backward(LD, piv, sol)
        return sol

    @staticmethod
    def backward(ctx, grad):
        LD, piv, sol = ctx.saved_tensors
        d = torch.linalg.ldl_solve(LD, piv, grad)  # K symmetric: K^-T = K^-1
        return -d @ sol.mT, d


class QPLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEAT, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU())
        self.to_p = nn.Linear(512, N)
        self.to_L = nn.Linear(512, N * R)
        self.A = nn.Parameter(torch.randn(M, N) / N**0.5)
        self.b = nn.Parameter(torch.randn(M))

    def forward(self, feats):
        h = self.net(feats)
        p = self.to_p(h)
        Lf = self.to_L(h).view(-1, N, R) / R**0.5
        Q = Lf @ Lf.mT + 0.1 * torch.eye(N, device=feats.device)
        bsz = feats.shape[0]
        A = self.A.expand(bsz, M, N)
        top = torch.cat([Q, A.mT], 2)
        bottom = torch.cat([A, torch.zeros(bsz, M, M, device=feats.device)], 2)
        K = torch.cat([top, bottom], 1)
        rhs = torch.cat([-p, self.b.expand(bsz, M)], 1).unsqueeze(-1)
        return KKTSolve.apply(K, rhs)[:, :N, 0]


model = QPLayer().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
feats = torch.randn(B, FEAT, device=dev)
target = torch.randn(B, N, device=dev)
report("model")

for step in range(4):
    z = model(feats)
    loss = F.mse_loss(z, target)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
report("train")

test = torch.randn(1024, FEAT, device=dev)
with torch.no_grad():
    out = torch.cat([model(c) for c in test.chunk(2)])
print("solution norm", out.norm().item())
report("end")
