"""An FT-Transformer on tabular data trained with the whole step captured in a CUDA graph, under an allocator
that the script configures before torch is imported (`PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64,
garbage_collection_threshold:0.7"`: cached blocks over 64 MB are never split, and once usage passes 70% of
the allowed memory the allocator frees cached blocks) and a per-process limit
(`torch.cuda.set_per_process_memory_fraction(0.15)`, which is what arms the garbage-collection threshold).

The model: 120 numerical features, each embedded by its own weight and bias (`x[..., None] * W + b`), a
CLS token, 4 pre-norm nn.TransformerEncoderLayer blocks at 192 wide (8 heads, feed-forward 512, ReGLU-free
GELU, dropout 0.1), LayerNorm + a 2-layer head to 16 classes. The step follows the CUDA-graphs recipe of
PyTorch's documentation: static input/target buffers, three warm-up steps on a side stream with
`torch.optim.AdamW(capturable=True)` (so the optimizer state and step live on the GPU), gradients set to
None, then `torch.cuda.graph(g)` captures forward (bf16 autocast, cache disabled), backward and
`opt.step()`; each later batch is copied into the static buffers and the graph replayed.

Phases: set-up (model, optimizer, static buffers at batch 2,048); warm-up on the side stream and capture;
24 replays on fresh batches; an evaluation forward captured in a second graph that shares the training
graph's pool (`pool=g.pool()`), replayed on 6 batches (class counts accumulated); the last, ragged batch of
the epoch (1,000 rows) stepped eagerly outside the graphs (the capturable optimizer steps eagerly too),
then both graphs deleted and `empty_cache()`, and 2 eager steps at 1,536. 5 phases. Seeded; no
value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:64,garbage_collection_threshold:0.7"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3102)
dev = torch.device("cuda")
torch.cuda.set_per_process_memory_fraction(0.15)
NF, D, NCLS, B = 120, 192, 16, 2048


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class FTTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(NF, D) * 0.02)
        self.b = nn.Parameter(torch.zeros(NF, D))
        self.cls = nn.Parameter(torch.randn(1, 1, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, 8, 512, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, NCLS))

    def forward(self, x):
        tok = x.unsqueeze(-1) * self.w + self.b
        tok = torch.cat([self.cls.expand(x.shape[0], -1, -1), tok], dim=1)
        return self.head(self.norm(self.encoder(tok)[:, 0]))


model = FTTransformer().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5, capturable=True)
static_x = torch.randn(B, NF, device=dev)
static_y = torch.randint(0, NCLS, (B,), device=dev)
report("set-up")


def train_step(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        loss = F.cross_entropy(model(x).float(), y)
    loss.backward()
    opt.step()
    return loss


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        train_step(static_x, static_y)
torch.cuda.current_stream().wait_stream(side)

g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    static_loss = train_step(static_x, static_y)
report("warm-up and capture")

for step in range(24):
    static_x.copy_(torch.randn(B, NF, device=dev))
    static_y.copy_(torch.randint(0, NCLS, (B,), device=dev))
    g.replay()
    if step % 8 == 7:
        print(f"replay {step} loss {static_loss.item():.4f}")
report("graph replays")

model.eval()
eg = torch.cuda.CUDAGraph()
with torch.no_grad():
    with torch.cuda.graph(eg, pool=g.pool()):
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            static_pred = model(static_x).argmax(-1)
    counts = torch.zeros(NCLS, dtype=torch.long, device=dev)
    for _ in range(6):
        static_x.copy_(torch.randn(B, NF, device=dev))
        eg.replay()
        counts += torch.bincount(static_pred, minlength=NCLS)
print(f"eval counts sum {counts.sum().item()}")
model.train()
report("eval graph in the shared pool")

x = torch.randn(1000, NF, device=dev)
y = torch.randint(0, NCLS, (1000,), device=dev)
opt.zero_grad(set_to_none=True)
loss = train_step(x, y)
print(f"ragged tail loss {loss.item():.4f}")
del x, y, loss, g, eg, static_loss, static_pred
torch.cuda.empty_cache()
for step in range(2):
    x = torch.randn(1536, NF, device=dev)
    y = torch.randint(0, NCLS, (1536,), device=dev)
    opt.zero_grad(set_to_none=True)
    loss = train_step(x, y)
    print(f"eager step {step} loss {loss.item():.4f}")
    del x, y, loss
report("ragged tail, graphs freed, eager steps")
