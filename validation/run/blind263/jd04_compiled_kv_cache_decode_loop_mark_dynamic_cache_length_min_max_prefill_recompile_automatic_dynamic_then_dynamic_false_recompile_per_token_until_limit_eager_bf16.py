"""A compiled decode loop whose KV cache grows: a Llama-style decoder written by hand (8 layers, d 1024, 16
heads through SDPA, RMSNorm, SwiGLU 2816, vocab 32000; bf16 weights, no_grad) whose forward takes the
layers' (k, v) caches and returns them grown by `torch.cat`. `torch.compile(model)`: a prefill at 8 x 256
(empty caches, a static graph), then 48 greedy decode steps whose caches are marked
`torch._dynamo.mark_dynamic(k, 2, min=2, max=2048)` (one recompile, the cache length symbolic, then reused);
then a second prompt at 8 x 384 (the prefill recompiles with its length dynamic: automatic dynamic shapes)
and 32 decode steps. Then `torch.compile(model, dynamic=False)` decoding from a prompt of 64 without
marking: one static graph per cache length until dynamo's recompile limit (8 entries for the forward's code)
is reached, the remaining steps eager.

Tokens are argmax of the logits and only index the embedding (no value-dependent sizes). 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2634)
V, D, H, L, FF, B = 32000, 1024, 16, 8, 2816, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.wqkv = nn.Linear(D, 3 * D, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.w13 = nn.Linear(D, 2 * FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, kc, vc):
        b, t, _ = x.shape
        q, k, v = self.wqkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        k, v = torch.cat([kc, k], dim=2), torch.cat([vc, v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u), k, v


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, caches):
        x = self.tok(ids)
        grown = []
        for layer, (kc, vc) in zip(self.layers, caches):
            x, k, v = layer(x, kc, vc)
            grown.append((k, v))
        return self.head(self.norm(x[:, -1])), grown


model = Decoder().cuda().to(torch.bfloat16).eval()
report("setup")


def empty_caches():
    z = torch.empty(B, H, 0, D // H, device="cuda", dtype=torch.bfloat16)
    return [(z, z) for _ in range(L)]


def generate(fn, prompt_len, steps, mark):
    ids = torch.randint(0, V, (B, prompt_len), device="cuda")
    logits, caches = fn(ids, empty_caches())
    for _ in range(steps):
        nxt = logits.argmax(-1, keepdim=True)
        if mark:
            for k, v in caches:
                torch._dynamo.mark_dynamic(k, 2, min=2, max=2048)
                torch._dynamo.mark_dynamic(v, 2, min=2, max=2048)
        logits, caches = fn(nxt, caches)
    return caches


compiled = torch.compile(model)
with torch.no_grad():
    ids = torch.randint(0, V, (B, 256), device="cuda")
    logits, caches = compiled(ids, empty_caches())
    del logits, caches
report("prefill_8x256_static_graph")

with torch.no_grad():
    caches = generate(compiled, 256, 48, mark=True)
report("decode_48_steps_mark_dynamic_cache_length")

del caches
with torch.no_grad():
    caches = generate(compiled, 384, 32, mark=True)
report("second_prompt_384_prefill_recompile_and_decode_32")

del caches
static = torch.compile(model, dynamic=False)
with torch.no_grad():
    caches = generate(static, 64, 12, mark=False)
del caches
report("dynamic_false_recompile_per_cache_length_until_limit_then_eager")
