"""Data prefetching on a side `torch.cuda.Stream`: batches in pinned host memory are copied with
`non_blocking=True` on a copy stream one step ahead, the compute stream `wait_stream`s it and the batch is
marked with `record_stream` (the usual prefetcher idiom); a second side stream keeps an EMA of the weights
(`torch._foreach_lerp_`) after each optimizer step, ordered with events. Wide residual MLP (8192 wide, 8
blocks; 579M) in fp32, AdamW (foreach default), batch 16384, 4 steps; then an EMA eval on the side stream."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

D, IN, BLOCKS, CLASSES, B, STEPS = (
    (64, 32, 2, 10, 8, 4) if os.environ.get("SMOKE") else (8192, 4096, 8, 1000, 16384, 4)
)
cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
torch.manual_seed(609)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc = nn.Linear(D, D)

    def forward(self, x):
        return x + F.silu(self.fc(self.ln(x)))


model = nn.Sequential(nn.Linear(IN, D), *[Block() for _ in range(BLOCKS)], nn.Linear(D, CLASSES)).to(device)
ema = copy.deepcopy(model).requires_grad_(False)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
host_batches = [
    (torch.randn(B, IN).pin_memory() if cuda else torch.randn(B, IN), torch.randint(0, CLASSES, (B,)))
    for _ in range(STEPS + 1)
]
copy_stream = torch.cuda.Stream() if cuda else None
ema_stream = torch.cuda.Stream() if cuda else None
if cuda:
    print(f"model + ema {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def prefetch(i):
    x, y = host_batches[i]
    if not cuda:
        return x, y
    with torch.cuda.stream(copy_stream):
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


nxt = prefetch(0)
for step in range(STEPS):
    if cuda:
        torch.cuda.current_stream().wait_stream(copy_stream)
        x, y = nxt
        x.record_stream(torch.cuda.current_stream())
        y.record_stream(torch.cuda.current_stream())
    else:
        x, y = nxt
    nxt = prefetch(step + 1)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y
    if cuda:
        done = torch.cuda.Event()
        done.record()
        with torch.cuda.stream(ema_stream):
            ema_stream.wait_event(done)
            torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.001)
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.001)

with torch.no_grad():
    if cuda:
        ema_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(ema_stream):
            logits = ema(nxt[0])
            top1 = logits.argmax(-1)
        torch.cuda.current_stream().wait_stream(ema_stream)
        print(f"ema eval {(top1 == nxt[1]).float().mean().item():.4f}")
    else:
        print(f"ema eval {(ema(nxt[0]).argmax(-1) == nxt[1]).float().mean().item():.4f}")
if cuda:
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
