"""A data prefetcher as training loops write it: pinned host batches copied non_blocking on a
side stream, the main stream waiting on it and record_stream on each batch, feeding an fp32 MLP
(4096 wide, batch 512) trained with Adam, 6 iterations; 4 phases (model, then every 2 iterations)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3706)
B, D, C = (8, 32, 10) if SMALL else (512, 4096, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, D), nn.ReLU(), nn.Linear(D, C)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
pin = device == "cuda"
host = [
    (torch.randn(B, D).pin_memory() if pin else torch.randn(B, D), torch.randint(0, C, (B,)))
    for _ in range(3)
]


class Prefetcher:
    def __init__(self, batches):
        self.batches = batches
        self.i = 0
        self.stream = torch.cuda.Stream() if device == "cuda" else None
        self.preload()

    def preload(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        if self.stream is None:
            self.next = (x.to(device), y.to(device))
            return
        with torch.cuda.stream(self.stream):
            self.next = (x.to(device, non_blocking=True), y.to(device, non_blocking=True))

    def get(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
            for t in self.next:
                t.record_stream(torch.cuda.current_stream())
        batch = self.next
        self.preload()
        return batch


loader = Prefetcher(host)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for it in range(6):
    x, y = loader.get()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda" and it % 2 == 1:
        print(f"iter {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
