"""Mixed precision the old way (apex O2 style, by hand): an fp16 copy of a residual MLP runs forward and
backward, fp32 master weights get the fp16 gradients copied in and unscaled, a static loss scale of 1024
with a manual overflow check over the gradients (torch._foreach_norm), torch.optim.Adam on the masters
(foreach), then the masters copied back into the fp16 model; batch 512, width 4096, 3 steps."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1807)
BATCH, WIDTH, DEPTH = (4, 32, 2) if SMALL else (512, 4096, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


model = nn.Sequential(*[Block(WIDTH) for _ in range(DEPTH)], nn.Linear(WIDTH, 10)).to(device)
masters = [p.detach().clone().float().requires_grad_(False) for p in model.parameters()]
model.half()
optimizer = torch.optim.Adam(masters, lr=1e-4)
SCALE = 1024.0
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, WIDTH, device=device, dtype=torch.half)
    y = torch.randint(0, 10, (BATCH,), device=device)
    loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    (loss * SCALE).backward()
    grads = [p.grad for p in model.parameters()]
    norms = torch._foreach_norm(grads)
    overflow = not torch.isfinite(torch.stack(norms).sum())
    if not overflow:
        for m, g in zip(masters, grads):
            m.grad = g.float().div_(SCALE)
        optimizer.step()
        with torch.no_grad():
            for p, m in zip(model.parameters(), masters):
                p.copy_(m)
    for p in model.parameters():
        p.grad = None
    for m in masters:
        m.grad = None
    del grads, norms
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
