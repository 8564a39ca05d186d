"""A hand-written GPT decoder served with a static KV cache and a CUDA-graphed decode step that share one
user-created memory pool: the cache is allocated under `torch.cuda.use_mem_pool(pool)` and the decode graph is
captured with `torch.cuda.graph(g, pool=pool.id)`, so graph intermediates and the cache live in the same
private segments (the pattern of PyTorch's MemPool notes). The allocator is configured before torch is
imported (`PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.8"`) and armed by
`torch.cuda.set_per_process_memory_fraction(0.022)`.

The model: 12 pre-LN blocks, 1,024 wide, 16 heads, GELU MLP 4,096, 16,384-token vocabulary, fp16 weights;
attention over the whole static cache with a boolean mask up to the current position (SDPA), the new key and
value written with `index_copy_` at a position held in a device tensor, greedy next token by `argmax`.

Phases: set-up (weights, the pool, the KV cache for 16 sequences x 1,024 positions in the pool); eager prefill
of 16 prompts of 256 tokens (the cache filled by slicing), warm-up of the decode step on a side stream and the
capture of the 16-sequence graph into the pool; 96 greedy decode replays (tokens copied back to the host every
32 steps); a second, 4-sequence graph captured into the same pool (its cache a view of the first 4 rows), 32
replays; the graphs, the cache and the pool released, `empty_cache()`, and 32 eager decode steps of 4
sequences against a KV cache grown by `torch.cat`. 5 phases. Seeded; no value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.8"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3175)
dev = torch.device("cuda")
torch.cuda.set_per_process_memory_fraction(0.022)
V, D, NH, L, TMAX, B, PROMPT = 16384, 1024, 16, 12, 1024, 16, 256
HD = D // NH


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def split(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        return (z.view(b, t, NH, HD).transpose(1, 2) for z in (q, k, v))

    def finish(self, x, y):
        b, _, t, _ = y.shape
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(TMAX, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def logits(self, x):
        return self.head(self.ln(x[:, -1]))

    def prefill(self, idx, cache_k, cache_v):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=dev))
        for i, blk in enumerate(self.blocks):
            q, k, v = blk.split(x)
            cache_k[i, :, :, :t] = k
            cache_v[i, :, :, :t] = v
            x = blk.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return self.logits(x)

    def decode(self, tok, pos, cache_k, cache_v):
        x = self.tok(tok) + self.pos(pos).unsqueeze(0)
        mask = (torch.arange(TMAX, device=dev) <= pos).view(1, 1, 1, TMAX)
        for i, blk in enumerate(self.blocks):
            q, k, v = blk.split(x)
            cache_k[i].index_copy_(2, pos, k)
            cache_v[i].index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(q, cache_k[i], cache_v[i], attn_mask=mask)
            x = blk.finish(x, y)
        return self.logits(x)


model = GPT().to(dev).half().eval()
pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    cache_k = torch.zeros(L, B, NH, TMAX, HD, dtype=torch.float16, device=dev)
    cache_v = torch.zeros_like(cache_k)
    static_tok = torch.zeros(B, 1, dtype=torch.long, device=dev)
    static_pos = torch.full((1,), PROMPT, dtype=torch.long, device=dev)
report("set-up, KV cache in the pool")

with torch.no_grad():
    prompts = torch.randint(0, V, (B, PROMPT), device=dev)
    static_tok.copy_(model.prefill(prompts, cache_k, cache_v).argmax(-1, keepdim=True))
    del prompts
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model.decode(static_tok, static_pos, cache_k, cache_v)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool.id):
        static_next = model.decode(static_tok, static_pos, cache_k, cache_v).argmax(-1, keepdim=True)
report("prefill, warm-up and capture into the pool")

generated = []
for step in range(96):
    g.replay()
    static_tok.copy_(static_next)
    static_pos += 1
    if step % 32 == 31:
        generated.append(static_tok.cpu())
print(f"generated {sum(t.numel() for t in generated)} tokens")
report("96 graph replays")

with torch.no_grad():
    small_k, small_v = cache_k[:, :4], cache_v[:, :4]
    with torch.cuda.use_mem_pool(pool):
        small_tok = torch.zeros(4, 1, dtype=torch.long, device=dev)
    small_tok.copy_(static_tok[:4])
    g4 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g4, pool=pool.id):
        small_next = model.decode(small_tok, static_pos, small_k, small_v).argmax(-1, keepdim=True)
for _ in range(32):
    g4.replay()
    small_tok.copy_(small_next)
    static_pos += 1
print(f"small batch last token shape {tuple(small_tok.cpu().shape)}")
report("4-sequence graph in the same pool, 32 replays")

del g, g4, static_next, small_next, small_tok, small_k, small_v
del static_tok, static_pos, cache_k, cache_v, pool
torch.cuda.empty_cache()
with torch.no_grad():
    idx = torch.randint(0, V, (4, 64), device=dev)
    ks = [None] * L
    vs = [None] * L
    x = model.tok(idx) + model.pos(torch.arange(64, device=dev))
    for i, blk in enumerate(model.blocks):
        q, ks[i], vs[i] = blk.split(x)
        x = blk.finish(x, F.scaled_dot_product_attention(q, ks[i], vs[i], is_causal=True))
    tok = model.logits(x).argmax(-1, keepdim=True)
    for step in range(32):
        t = 64 + step
        x = model.tok(tok) + model.pos(torch.tensor([t], device=dev))
        for i, blk in enumerate(model.blocks):
            q, k, v = blk.split(x)
            ks[i] = torch.cat([ks[i], k], dim=2)
            vs[i] = torch.cat([vs[i], v], dim=2)
            x = blk.finish(x, F.scaled_dot_product_attention(q, ks[i], vs[i]))
        tok = model.logits(x).argmax(-1, keepdim=True)
print(f"eager decode done, cache length {ks[0].shape[2]}")
report("pool released, eager decode with a growing cache")
