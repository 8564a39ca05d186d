"""One explicit CUDA-graph memory pool (`torch.cuda.graph_pool_handle()`) shared by a training graph and a
decoding graph, under `PYTORCH_CUDA_ALLOC_CONF="roundup_power2_divisions:4"` set before torch is imported.

A hand-written GPT (8 pre-LN blocks at 512, 8 heads, GELU MLP, learned positions, tied 32,000-way head).
Its block stack (an nn.Sequential) is graphed with `torch.cuda.make_graphed_callables(stack, (sample,),
pool=pool)` under bf16 autocast with cache_enabled=False (forward and backward captured in `pool`); the
embeddings, final norm, head and loss run eagerly around it, AdamW (foreach). For generation, a one-token
decode step over a static KV cache (bf16 buffers of 16 x 8 x 256 x 64 per block, written with
`index_copy_` at a position held in a device tensor, attention masked up to that position with SDPA) is
captured by hand into a `torch.cuda.CUDAGraph(keep_graph=True)` with `torch.cuda.graph(g, pool=pool,
capture_error_mode="thread_local")`, instantiated with `g.instantiate()` and replayed.

Phases: set-up (model, optimizer, pool handle); graphing the stack at batch 24 x 256; 5 training steps;
the static cache allocated, a 64-token prefill run eagerly into it, the decode graph captured, instantiated
and replayed for 48 greedy tokens at batch 16; the graphs deleted (the decode graph, and the training graphs
by `del stack.forward`, the instance attribute make_graphed_callables set), `gc.collect()` and
`empty_cache()`, then an eager no_grad
evaluation at batch 48 x 256 under bf16 autocast. 5 phases. Seeded; no value-dependent sizes."""

import gc
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:4"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3105)
dev = torch.device("cuda")
V, D, H, L, T = 32000, 512, 8, 8, 256
HD = D // H


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def heads(self, x):
        b, t, _ = x.shape
        return self.qkv(self.ln1(x)).view(b, t, 3, H, HD).permute(2, 0, 3, 1, 4)

    def mlp(self, x, a):
        b, t, _ = x.shape
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

    def forward(self, x):
        q, k, v = self.heads(x)
        return self.mlp(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def decode(self, x, kc, vc, pos, mask):
        q, k, v = self.heads(x)
        kc.index_copy_(2, pos, k.to(kc.dtype))
        vc.index_copy_(2, pos, v.to(vc.dtype))
        a = F.scaled_dot_product_attention(q.to(kc.dtype), kc, vc, attn_mask=mask)
        return self.mlp(x, a.to(x.dtype))


tok, posemb = nn.Embedding(V, D).to(dev), nn.Embedding(T, D).to(dev)
blocks = [Block() for _ in range(L)]
stack = nn.Sequential(*blocks).to(dev)
ln_f = nn.LayerNorm(D).to(dev)
params = (
    list(tok.parameters()) + list(posemb.parameters()) + list(stack.parameters()) + list(ln_f.parameters())
)
opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, foreach=True)
pool = torch.cuda.graph_pool_handle()
report("set-up")

sample = torch.randn(24, T, D, device=dev, requires_grad=True)
with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
    graphed = torch.cuda.make_graphed_callables(stack, (sample,), pool=pool)
del sample
report("make_graphed_callables in the pool")


def logits_of(h):
    return ln_f(h) @ tok.weight.T


for step in range(5):
    ids = torch.randint(0, V, (24, T + 1), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        x = tok(ids[:, :-1]) + posemb(torch.arange(T, device=dev))
        loss = F.cross_entropy(logits_of(graphed(x)).flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"graphed step {step} loss {loss.item():.4f}")
    del ids, x, loss
report("graphed training steps")

B, PRE = 16, 64
kcache = [torch.zeros(B, H, T, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
vcache = [torch.zeros(B, H, T, HD, device=dev, dtype=torch.bfloat16) for _ in range(L)]
static_tok = torch.zeros(B, 1, dtype=torch.long, device=dev)
static_pos = torch.zeros(1, dtype=torch.long, device=dev)
out_tokens = []
with torch.no_grad():
    prompt = torch.randint(0, V, (B, PRE), device=dev)
    x = tok(prompt) + posemb(torch.arange(PRE, device=dev))
    for i, blk in enumerate(blocks):
        q, k, v = blk.heads(x)
        kcache[i][:, :, :PRE] = k.to(torch.bfloat16)
        vcache[i][:, :, :PRE] = v.to(torch.bfloat16)
        x = blk.mlp(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    static_tok.copy_(logits_of(x[:, -1:]).argmax(-1))
    static_pos.fill_(PRE)
    del prompt, x, q, k, v

    def decode_step():
        mask = torch.arange(T, device=dev) <= static_pos
        h = tok(static_tok) + posemb(static_pos)
        for i, blk in enumerate(blocks):
            h = blk.decode(h, kcache[i], vcache[i], static_pos, mask)
        return logits_of(h).argmax(-1)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            decode_step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g, pool=pool, capture_error_mode="thread_local"):
        static_next = decode_step()
    g.instantiate()
    for _ in range(48):
        g.replay()
        out_tokens.append(static_next.clone())
        static_tok.copy_(static_next)
        static_pos.add_(1)
generated = torch.cat(out_tokens, dim=1)
print(f"generated {tuple(generated.shape)}")
report("static cache, decode graph kept and instantiated, replays")

del (
    stack.forward
)  # make_graphed_callables patched the instance's forward: restore the class's, dropping the graphs
kcache.clear()
vcache.clear()
del g, graphed, static_next, generated, out_tokens
gc.collect()  # the graphed autograd.Function classes sit in reference cycles
torch.cuda.empty_cache()
stack.eval()
with torch.no_grad():
    ids = torch.randint(0, V, (48, T + 1), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = tok(ids[:, :-1]) + posemb(torch.arange(T, device=dev))
        nll = F.cross_entropy(logits_of(stack(x)).flatten(0, 1).float(), ids[:, 1:].flatten())
print(f"eval nll {nll.item():.4f}")
report("graphs freed, eager evaluation")
