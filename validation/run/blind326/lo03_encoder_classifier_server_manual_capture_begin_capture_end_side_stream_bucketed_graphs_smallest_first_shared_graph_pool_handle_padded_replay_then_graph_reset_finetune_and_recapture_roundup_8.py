"""A text-classification server with CUDA graphs captured by hand (no `torch.cuda.graph` context
manager): a hand-written pre-LN transformer encoder classifier (6 layers, 768 wide, SDPA, mean
pooling), fp32 weights. Three batch buckets (16, 64, 256 sequences of 128 tokens) are warmed up on a
side stream and captured smallest first with `CUDAGraph.capture_begin(pool=...)` /
`capture_end()` on that stream, all into one `torch.cuda.graph_pool_handle()`, under
`torch.autocast(bfloat16, cache_enabled=False)`; requests of 10, 50, 200 and 16 sequences are padded
into the static inputs of the smallest bucket that holds them and replayed. Then every graph is
`reset()`, the static tensors dropped and the cache emptied, the classifier is fine-tuned eagerly for
three AdamW steps (bf16 autocast), and only the largest bucket is captured again, with the
`torch.cuda.graph` context manager, into the same pool handle, and replayed. The allocator is
configured before torch is imported with `PYTORCH_CUDA_ALLOC_CONF="roundup_power2_divisions:8"`.

Phases: 0 model built; 1 warm-up and capture of the three buckets; 2 padded replays; 3 graphs reset,
eager fine-tune; 4 largest bucket captured again and replayed."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:8"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3263)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    V, D, H, L, T, C = 512, 64, 4, 2, 16, 5
    BUCKETS, REQUESTS, FT_BATCH = [2, 4, 8], [1, 3, 7, 2], 4
else:
    V, D, H, L, T, C = 30522, 768, 12, 6, 128, 20
    BUCKETS, REQUESTS, FT_BATCH = [16, 64, 256], [10, 50, 200, 16], 64


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ff1, self.ff2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, C)

    def forward(self, ids):
        x = self.emb(ids) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(1))


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def infer(ids):
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False):
        return model(ids).float().softmax(-1)


model = Classifier().to(device)
model.eval()
report("phase0 model")

static_ids, static_out, graphs = {}, {}, {}
if device == "cuda":
    pool = torch.cuda.graph_pool_handle()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for b in BUCKETS:
            static_ids[b] = torch.zeros(b, T, dtype=torch.long, device=device)
            for _ in range(3):
                infer(static_ids[b])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for b in BUCKETS:
            g = torch.cuda.CUDAGraph()
            g.capture_begin(pool=pool)
            static_out[b] = infer(static_ids[b])
            g.capture_end()
            graphs[b] = g
    torch.cuda.current_stream().wait_stream(side)
report("phase1 capture")


def serve(ids):
    n = ids.shape[0]
    if device != "cuda":
        return infer(ids)
    b = next(b for b in BUCKETS if b >= n)
    static_ids[b][:n].copy_(ids)
    static_ids[b][n:].zero_()
    graphs[b].replay()
    return static_out[b][:n].clone()


for n in REQUESTS:
    probs = serve(torch.randint(0, V, (n, T), device=device))
    print("served", n, probs.argmax(-1)[:4].tolist())
    del probs
report("phase2 replay")

for g in graphs.values():
    g.reset()
graphs.clear()
static_ids.clear()
static_out.clear()
if device == "cuda":
    torch.cuda.empty_cache()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
for step in range(3):
    ids = torch.randint(0, V, (FT_BATCH, T), device=device)
    labels = torch.randint(0, C, (FT_BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(ids).float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("finetune", step, loss.item())
model.eval()
report("phase3 reset and finetune")

big = BUCKETS[-1]
static_ids[big] = torch.zeros(big, T, dtype=torch.long, device=device)
if device == "cuda":
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            infer(static_ids[big])
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        static_out[big] = infer(static_ids[big])
    graphs[big] = g
for n in (200, 256):
    probs = serve(torch.randint(0, V, (min(n, big), T), device=device))
    print("served again", n, probs.argmax(-1)[:4].tolist())
    del probs
report("phase4 recapture")
