"""A small deep-equilibrium (DEQ) image classifier with control-flow operators: the fixed point
`z = tanh(W z + U x)` of a conv cell (64 channels at 32 x 32, batch 256) found by `while_loop` under
no_grad for a counted 12 iterations (the condition reads an iteration counter, not a residual), then
one differentiable application of the cell for the gradient (the one-step "phantom gradient"); the
model is put in shared memory first (`model.share_memory()`, a no-op for CUDA parameters). AdamW
(fused), fp32, two steps; then evaluation with `torch.cond` choosing between one and two applications of the
cell for a flag tensor; then inference with the solver in pure bf16 (the
model cast; under autocast the body's GroupNorm would return float32 for a bfloat16 carry, which
`while_loop` refuses).

The iteration count comes from a counter: no value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._higher_order_ops import while_loop

torch.manual_seed(2413)
C, S, B, K = 64, 32, 256, 12


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class DEQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, C, 3, padding=1)
        self.w = nn.Conv2d(C, C, 3, padding=1, bias=False)
        self.norm = nn.GroupNorm(8, C)
        self.head = nn.Linear(C, 10)

    def cell(self, z, u):
        return torch.tanh(self.norm(self.w(z)) + u)

    def solve(self, u):
        def cond_fn(i, z):
            return i < K

        def body_fn(i, z):
            return i + 1, self.cell(z, u)

        with torch.no_grad():
            _, z = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.long, device=u.device), torch.zeros_like(u)))
        return z

    def forward(self, x):
        u = self.stem(x)
        z = self.solve(u.detach())
        z = self.cell(z, u)
        return self.head(z.mean((2, 3)))


model = DEQ().cuda()
model.share_memory()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
x = torch.randn(B, 3, S, S, device="cuda")
y = torch.randint(0, 10, (B,), device="cuda")
report("setup")

for _ in range(2):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_deq_while_loop_fp32")

model.eval()
with torch.no_grad():
    u = model.stem(x)
    cheap = torch.tensor(True, device="cuda")
    z = torch.cond(
        cheap,
        lambda u: model.cell(torch.zeros_like(u), u),
        lambda u: model.cell(model.cell(torch.zeros_like(u), u), u),
        (u,),
    )
    logits = model.head(z.mean((2, 3)))
    del u, z, logits
report("eval_cond_cheap_head")

model.to(torch.bfloat16)
with torch.no_grad():
    logits = model(x.to(torch.bfloat16))
    del logits
report("pure_bf16_inference")
