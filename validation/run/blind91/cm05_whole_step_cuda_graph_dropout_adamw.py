"""Whole-network CUDA-graph capture of a training step, as in the PyTorch CUDA-graphs notes: a
6-block pre-norm residual MLP (2,048 wide, 4x expansion, dropout 0.1 in every block) with
capturable AdamW; 3 warm-up steps on a side stream, then forward, backward and optimizer step
captured into one torch.cuda.CUDAGraph and replayed 5 times on fresh batches copied into the
static input (dropout masks redrawn by the graph-safe generator at each replay); fp32, batch 512;
3 phases (eager on the CPU)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9105)
B, D, NB, C = (8, 32, 2, 10) if SMALL else (512, 2048, 6, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.up = nn.Linear(D, 4 * D)
        self.down = nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.down(F.gelu(self.up(self.norm(x)))))


model = nn.Sequential(*[Block() for _ in range(NB)], nn.LayerNorm(D), nn.Linear(D, C)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=device == "cuda")
static_x = torch.randn(B, D, device=device)
static_y = torch.randint(0, C, (B,), device=device)


def train_step():
    loss = F.cross_entropy(model(static_x), static_y)
    loss.backward()
    optimizer.step()
    return loss


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    print(f"warmup peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = train_step()
    print(f"capture peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(5):
    static_x.copy_(torch.randn(B, D, device=device))
    static_y.copy_(torch.randint(0, C, (B,), device=device))
    if device == "cuda":
        graph.replay()
    else:
        optimizer.zero_grad(set_to_none=True)
        static_loss = train_step()
    losses = static_loss.item()
if device == "cuda":
    print(
        f"replay loss {losses:.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
