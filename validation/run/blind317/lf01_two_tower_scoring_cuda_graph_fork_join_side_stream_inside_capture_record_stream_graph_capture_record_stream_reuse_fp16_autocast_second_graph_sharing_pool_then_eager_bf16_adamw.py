"""A two-tower retrieval scorer served through CUDA graphs whose capture forks onto a side stream, under an
allocator configured before torch is imported
(`PYTORCH_CUDA_ALLOC_CONF="graph_capture_record_stream_reuse:True"`: during a capture, a block that was
`record_stream`-ed onto another stream can be reused once the capture's order says that stream has joined,
instead of only after the capture ends).

The model: a user tower (256 features -> 2048 -> 2048 -> 256, SiLU, LayerNorm) and an item tower (512 features
-> 2048 -> 2048 -> 256), each candidate scored by a small cross MLP over [u, v, u * v] (768 -> 512 -> 1) plus
the dot product. The serving step forks: the item tower runs on a side stream (which waits on the capture
stream), the user tower on the capture stream, the item embeddings are `record_stream`-ed onto the capture
stream, which waits on the side stream before the cross MLP (the fork/join pattern of PyTorch's CUDA-graphs
notes), under fp16 autocast with the cast cache disabled.

Phases: set-up (fp32 towers, static inputs at 8,192 pairs); warm-up (3 forked steps on a warm-up stream) and
the capture of the 8,192-pair graph; 20 replays on fresh candidates with the top 256 scores read back each
time; a second graph at 2,048 pairs sharing the first graph's pool (`pool=g.pool()`), 10 replays; both graphs
deleted, `empty_cache()`, and 4 eager training steps (bf16 autocast, in-batch softmax over the dot products
plus a BCE on the cross scores, AdamW) on the main stream. 5 phases. Seeded; no value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "graph_capture_record_stream_reuse:True"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3171)
dev = torch.device("cuda")
UF, IF, H, E = 256, 512, 2048, 256
B, B_SMALL = 8192, 2048


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def tower(n_in):
    return nn.Sequential(
        nn.Linear(n_in, H), nn.SiLU(), nn.Linear(H, H), nn.SiLU(), nn.Linear(H, E), nn.LayerNorm(E)
    )


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = tower(UF)
        self.item = tower(IF)
        self.cross = nn.Sequential(nn.Linear(3 * E, 512), nn.ReLU(), nn.Linear(512, 1))

    def combine(self, u, v):
        return (u * v).sum(-1) + self.cross(torch.cat([u, v, u * v], dim=-1)).squeeze(-1)


model = TwoTower().to(dev)
side = torch.cuda.Stream()
static_u = {B: torch.randn(B, UF, device=dev)}
static_i = {B: torch.randn(B, IF, device=dev)}
report("set-up")


def forked_scores(u_x, i_x):
    main = torch.cuda.current_stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        v = model.item(i_x)
    u = model.user(u_x)
    main.wait_stream(side)
    v.record_stream(main)
    return model.combine(u, v)


model.eval()
warm = torch.cuda.Stream()
warm.wait_stream(torch.cuda.current_stream())
with torch.no_grad(), torch.cuda.stream(warm):
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
            forked_scores(static_u[B], static_i[B])
torch.cuda.current_stream().wait_stream(warm)

g = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g):
    with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
        static_scores = {B: forked_scores(static_u[B], static_i[B])}
report("warm-up and forked capture")

total = 0.0
for _ in range(20):
    static_u[B].copy_(torch.randn(B, UF, device=dev))
    static_i[B].copy_(torch.randn(B, IF, device=dev))
    g.replay()
    top = torch.topk(static_scores[B].float(), 256).values.cpu()
    total += float(top[0])
print(f"replays: mean best score {total / 20:.4f}")
report("20 replays of the 8192-pair graph")

static_u[B_SMALL] = torch.randn(B_SMALL, UF, device=dev)
static_i[B_SMALL] = torch.randn(B_SMALL, IF, device=dev)
g_small = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g_small, pool=g.pool()):
    with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
        static_scores[B_SMALL] = forked_scores(static_u[B_SMALL], static_i[B_SMALL])
for _ in range(10):
    static_u[B_SMALL].copy_(torch.randn(B_SMALL, UF, device=dev))
    static_i[B_SMALL].copy_(torch.randn(B_SMALL, IF, device=dev))
    g_small.replay()
    top = torch.topk(static_scores[B_SMALL].float(), 64).values.cpu()
print(f"small graph best score {float(top[0]):.4f}")
report("second graph sharing the pool, 10 replays")

del g, g_small, static_scores, static_u, static_i
torch.cuda.empty_cache()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
for step in range(4):
    u_x = torch.randn(4096, UF, device=dev)
    i_x = torch.randn(4096, IF, device=dev)
    clicked = (torch.rand(4096, device=dev) < 0.1).float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        u = model.user(u_x)
        v = model.item(i_x)
        logits = u @ v.t() / 0.05
        cross = model.cross(torch.cat([u, v, u * v], dim=-1)).squeeze(-1)
    loss = F.cross_entropy(logits.float(), torch.arange(4096, device=dev))
    loss = loss + F.binary_cross_entropy_with_logits(cross.float(), clicked)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"train step {step} loss {loss.item():.4f}")
    del u_x, i_x, clicked, u, v, logits, cross, loss
report("graphs freed, eager training")
