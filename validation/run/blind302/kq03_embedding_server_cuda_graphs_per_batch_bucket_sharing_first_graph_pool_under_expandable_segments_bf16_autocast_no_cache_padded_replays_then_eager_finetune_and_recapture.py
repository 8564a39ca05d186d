"""A sentence-embedding server that captures one CUDA graph per batch bucket, under
`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"` set in `os.environ` before torch is imported (the
graphs' private pool is not expandable; everything else is).

The model: a hand-written BERT-style encoder in fp32 (vocabulary 32,000, 10 layers, d 768, 12 heads, GELU MLP
3,072, post-LayerNorm, SDPA with a boolean padding mask), mean pooling over the unmasked tokens and an L2
normalized 384-d projection; it runs under bf16 autocast with `cache_enabled=False` (graph-safe).

Phases: set-up (model, static input ids / mask buffers of the largest bucket, 3 warm-up iterations per bucket
on a side stream); capture of the buckets of 64, 32, 16 and 8 rows of 256 tokens, largest first, each
graph after the first passing `pool=graphs[64].pool()`; 30 requests of host-drawn sizes (1..64 rows,
host-drawn lengths) copied into the static buffers of the smallest bucket that holds them and replayed, the
embeddings cloned out; the graphs and static buffers deleted, `empty_cache()`, 4 eager contrastive
fine-tuning steps (in-batch InfoNCE between two dropout views, batch 48, AdamW); the bucket 64 captured again
after the fine-tuning and replayed 5 times. 5 phases. No value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(3023)
gen = torch.Generator().manual_seed(30230)
VOCAB, D, HEADS, LAYERS, SEQ = 32000, 768, 12, 10, 256
BUCKETS = (64, 32, 16, 8)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = self.ln1(x + self.drop(self.o(a.transpose(1, 2).reshape(b, t, D))))
        return self.ln2(x + self.drop(self.fc2(F.gelu(self.fc1(x)))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
        self.ln = nn.LayerNorm(D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.proj = nn.Linear(D, 384)

    def forward(self, ids, keep):
        x = self.ln(self.tok(ids) + self.pos.weight[: ids.shape[1]])
        for layer in self.layers:
            x = layer(x, keep)
        m = keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp_min(1.0)
        return F.normalize(self.proj(pooled).float(), dim=-1)


model = Encoder().cuda().eval()
static_ids = torch.zeros(BUCKETS[0], SEQ, dtype=torch.long, device="cuda")
static_keep = torch.zeros(BUCKETS[0], SEQ, dtype=torch.bool, device="cuda")
static_keep[:, 0] = True


def embed(n):
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        return model(static_ids[:n], static_keep[:n])


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for n in BUCKETS:
        for _ in range(3):
            embed(n)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
report("set-up")


def capture(buckets, pool=None):
    graphs, outs = {}, {}
    for n in buckets:
        g = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g, pool=pool):
            outs[n] = embed(n)
        if pool is None:
            pool = g.pool()
        graphs[n] = g
    return graphs, outs


graphs, outs = capture(BUCKETS)
report("capture")


def serve(graphs, outs, n_rows, lengths):
    n = min(b for b in graphs if b >= n_rows)
    ids = torch.randint(1, VOCAB, (n_rows, SEQ), generator=gen)
    keep = torch.arange(SEQ)[None, :] < lengths[:, None]
    static_ids[:n].zero_()
    static_keep[:n].zero_()
    static_keep[:n, 0] = True
    static_ids[:n_rows].copy_(ids, non_blocking=True)
    static_keep[:n_rows].copy_(keep, non_blocking=True)
    graphs[n].replay()
    return outs[n][:n_rows].clone()


results = []
for r in range(30):
    rows = int(torch.randint(1, 65, (1,), generator=gen))
    lengths = torch.randint(8, SEQ + 1, (rows,), generator=gen)
    results.append(serve(graphs, outs, rows, lengths))
torch.cuda.synchronize()
print(f"served {sum(e.shape[0] for e in results)} rows")
report("serving")

del graphs, outs, results
torch.cuda.empty_cache()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
for step in range(4):
    ids = torch.randint(1, VOCAB, (48, SEQ), device="cuda")
    keep = torch.arange(SEQ, device="cuda")[None, :] < torch.randint(32, SEQ + 1, (48, 1), device="cuda")
    keep[:, 0] = True
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = model(ids, keep), model(ids, keep)
    logits = a @ b.T / 0.05
    loss = F.cross_entropy(logits, torch.arange(48, device="cuda"))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
del ids, keep, a, b, logits, loss
report("fine-tuning")

model.eval()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for _ in range(3):
        embed(64)
torch.cuda.current_stream().wait_stream(side)
graphs, outs = capture((64,))
for r in range(5):
    lengths = torch.randint(8, SEQ + 1, (64,), generator=gen)
    emb = serve(graphs, outs, 64, lengths)
torch.cuda.synchronize()
print(f"recaptured, last batch {tuple(emb.shape)}")
report("recapture")
