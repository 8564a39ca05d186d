"""A serving loop in the style of vLLM's model runner, written by hand on a fp16 decoder (12 layers, d 1,024,
16 heads, SwiGLU MLP 2,816, vocab 32,000, no autograd anywhere):

- the static KV cache (12 x 2 x 32 slots x 1,024 positions x 16 x 64, fp16, 1.5 GB) is allocated inside its own
  `torch.cuda.MemPool` through `with torch.cuda.use_mem_pool(kv_pool):`;
- one decode step (token embedding, per-slot positions, the new key/value written into the cache by
  `index_put_`, SDPA over the whole cache with a boolean length mask, greedy argmax) is captured as a CUDA graph
  for batch sizes 32, 16, 8, 4, 2 and 1, largest first, all sharing one `torch.cuda.graph_pool_handle()`, each
  after 2 warm-up calls on a side stream, with `capture_error_mode="thread_local"`;
- requests arrive in waves: prompts of seeded host-drawn lengths are prefilled eagerly (one SDPA causal pass per
  request, keys/values copied into its slot), then 48 decode steps replay the graph of the smallest captured
  size holding the live batch, whose inputs are padded into the graph's static buffers.

Phases: set-up (weights, the KV pool); graph capture; serving 3 waves (batches of 5, 13 and 27 requests); the
graphs, their pool handle and the KV cache deleted with the MemPool, `torch.cuda.empty_cache()`, then plain eager
decoding of 8 requests with a `torch.cat`-grown cache. 4 phases. Tokens come from argmax but no size depends on
them: lengths come from the host RNG."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2952)
rng = random.Random(29520)
V, D, H, L, FF, SLOTS, T = 32000, 1024, 16, 12, 2816, 32, 1024
DH = D // H
CAPTURE = [32, 16, 8, 4, 2, 1]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = nn.RMSNorm(D)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def mlp(self, x):
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return self.down(F.silu(g) * u)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)


model = Decoder().cuda().half().eval()
torch.set_grad_enabled(False)
kv_pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(kv_pool):
    kv = torch.zeros(L, 2, SLOTS, H, T, DH, device="cuda", dtype=torch.float16)
lengths = torch.zeros(SLOTS, dtype=torch.long, device="cuda")
report("setup_weights_and_kv_pool")


def decode(tokens, slots):
    """One token for each slot: tokens (B,), slots (B,) -> next tokens (B,)."""
    pos = lengths[slots]
    x = model.emb(tokens) + model.pos(pos)
    b = tokens.shape[0]
    mask = torch.arange(T, device="cuda")[None, :] <= pos[:, None]
    for i, layer in enumerate(model.layers):
        q, k, v = layer.qkv(layer.n1(x)).view(b, 3, H, DH).unbind(1)
        kv[i, 0].index_put_((slots[:, None], torch.arange(H, device="cuda")[None, :], pos[:, None]), k)
        kv[i, 1].index_put_((slots[:, None], torch.arange(H, device="cuda")[None, :], pos[:, None]), v)
        a = F.scaled_dot_product_attention(
            q[:, :, None], kv[i, 0, slots], kv[i, 1, slots], attn_mask=mask[:, None, None, :]
        )
        x = x + layer.o(a.reshape(b, D))
        x = x + layer.mlp(x)
    return model.head(model.norm(x)).argmax(-1)


def prefill(prompt, slot):
    t = prompt.shape[0]
    x = model.emb(prompt)[None] + model.pos(torch.arange(t, device="cuda"))[None]
    for i, layer in enumerate(model.layers):
        q, k, v = layer.qkv(layer.n1(x)).view(1, t, 3, H, DH).permute(2, 0, 3, 1, 4)
        kv[i, 0, slot, :, :t] = k[0]
        kv[i, 1, slot, :, :t] = v[0]
        x = x + layer.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, t, D)
        )
        x = x + layer.mlp(x)
    lengths[slot] = t
    return model.head(model.norm(x[:, -1])).argmax(-1)


pool = torch.cuda.graph_pool_handle()
graphs, static = {}, {}
side = torch.cuda.Stream()
for bs in CAPTURE:
    tok = torch.zeros(bs, dtype=torch.long, device="cuda")
    slot = torch.arange(bs, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            decode(tok, slot)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool, capture_error_mode="thread_local"):
        out = decode(tok, slot)
    graphs[bs], static[bs] = g, (tok, slot, out)
torch.cuda.synchronize()
report("capture_6_graphs_shared_pool")

generated = 0
for wave in (5, 13, 27):
    lengths.zero_()
    firsts = [prefill(torch.randint(0, V, (rng.randint(32, 384),), device="cuda"), s) for s in range(wave)]
    bs = min(c for c in CAPTURE if c >= wave)
    tok, slot, out = static[bs]
    tok.zero_()
    tok[:wave] = torch.cat(firsts)
    slot.copy_(torch.arange(bs, device="cuda") % wave)
    for _ in range(48):
        graphs[bs].replay()
        lengths[:wave] += 1
        tok[:wave] = out[:wave]
        generated += wave
    torch.cuda.synchronize()
print(f"generated {generated} tokens")
report("serve_3_waves_graph_replay")

del graphs, static, g, out, tok, slot, pool, kv
del kv_pool
torch.cuda.empty_cache()
report_tag = "graphs_and_kv_pool_released_empty_cache"
caches = [[None, None] for _ in range(L)]
x_tok = torch.randint(0, V, (8, 128), device="cuda")
for step in range(40):
    t = x_tok.shape[1] if step == 0 else 1
    inp = x_tok if step == 0 else nxt[:, None]
    start = 0 if step == 0 else caches[0][0].shape[2]
    x = model.emb(inp) + model.pos(torch.arange(start, start + t, device="cuda"))
    for i, layer in enumerate(model.layers):
        q, k, v = layer.qkv(layer.n1(x)).view(8, t, 3, H, DH).permute(2, 0, 3, 1, 4)
        if caches[i][0] is not None:
            k = torch.cat([caches[i][0], k], 2)
            v = torch.cat([caches[i][1], v], 2)
        caches[i] = [k, v]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=step == 0)
        x = x + layer.o(a.transpose(1, 2).reshape(8, t, D))
        x = x + layer.mlp(x)
    nxt = model.head(model.norm(x[:, -1])).argmax(-1)
print(f"eager cache length {caches[0][0].shape[2]}")
report(report_tag + "_then_eager_decode_8x40")
