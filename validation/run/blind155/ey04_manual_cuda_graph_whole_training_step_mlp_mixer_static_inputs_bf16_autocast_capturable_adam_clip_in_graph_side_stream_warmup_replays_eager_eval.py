"""A whole training step captured by hand into one torch.cuda.CUDAGraph, as the CUDA-graphs section
of PyTorch's CUDA semantics notes writes it: an MLP-Mixer for 32 x 32 images (4 x 4 patches, 64 tokens,
4 mixer layers of 512 channels, token MLP of 256, channel MLP of 2,048, 100 classes) with static input
and label tensors, bf16 autocast, Adam(capturable=True) and gradient clipping inside the graph; 3
warm-up steps on a side stream, `optimizer.zero_grad(set_to_none=True)` before the capture, then 6
replays on fresh batches copied into the static tensors (the loss read back from the static output);
then an eager evaluation of 2,048 images under no_grad. fp32 weights, batch 1,024. 5 phases: the
model, the warm-up, the capture, the replays, the evaluation (on the CPU the step runs eagerly)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15504)
if SMALL:
    B, EB, D, TOK, CH, L, NCLS = 8, 16, 32, 16, 64, 2, 10
else:
    B, EB, D, TOK, CH, L, NCLS = 1024, 2048, 512, 256, 2048, 4, 100
P, N = 4, 64
device = "cuda" if torch.cuda.is_available() else "cpu"


class MixerLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.token_mlp = nn.Sequential(nn.Linear(N, TOK), nn.GELU(), nn.Linear(TOK, N))
        self.norm2 = nn.LayerNorm(D)
        self.channel_mlp = nn.Sequential(nn.Linear(D, CH), nn.GELU(), nn.Linear(CH, D))

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, D, P, P)
        self.layers = nn.Sequential(*[MixerLayer() for _ in range(L)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, NCLS)

    def forward(self, img):
        x = self.stem(img).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.layers(x)).mean(dim=1))


model = Mixer().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=device == "cuda")
static_img = torch.randn(B, 3, 32, 32, device=device)
static_label = torch.randint(0, NCLS, (B,), device=device)


def train_step():
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(static_img), static_label)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            train_step()
    torch.cuda.current_stream().wait_stream(s)
    print(f"warmup peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
    g = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = train_step()
    print(
        f"capture peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
losses = []
for _ in range(6):
    img = torch.randn(B, 3, 32, 32, device=device)
    label = torch.randint(0, NCLS, (B,), device=device)
    static_img.copy_(img)
    static_label.copy_(label)
    if device == "cuda":
        g.replay()
    else:
        optimizer.zero_grad(set_to_none=True)
        static_loss = train_step()
    losses.append(static_loss.item())
if device == "cuda":
    print(
        f"replays {sum(losses) / len(losses):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    img = torch.randn(EB, 3, 32, 32, device=device)
    pred = model(img).argmax(dim=1)
if device == "cuda":
    print(
        f"eval {pred.shape[0]} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
