"""A small GPT trained and served with `torch.nn.attention.bias` causal biases instead of is_causal.

8 layers, d 768, 12 heads (head dim 64), vocabulary 32,000, context 2,048. Training uses suffix queries:
each step the model reads a 1,536-token prefix as keys and values and only the last 512 positions as
queries (a "prefix LM with suffix loss"), so the attention mask is `causal_lower_right(512, 2048)`
(the query block aligned to the bottom right of the score matrix). In fp32 this takes the
memory-efficient kernel directly (`_efficient_attention_forward` with custom_mask_type 2) and its
backward; AdamW (foreach) for 4 steps at batch 8. Then chunked prefill in bf16 (the model cast): a
prompt of 2,048 tokens fed in 4 chunks of 512 into a preallocated KV cache, each chunk attending to the
cache so far plus itself with `causal_lower_right(512, filled)` (flash attention, is_causal meaning
lower right), batch 16. Then the same model evaluated over full 1,024-token sequences with
`causal_upper_left` (which SDPA turns into is_causal=True) at batch 32, and 64 decode steps with one
query against the cache (`causal_lower_right(1, n)`: the one-query case) in fp16 at batch 16.
Phases: model, train fp32 lower-right, bf16 chunked prefill, upper-left eval, fp16 decode. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

torch.manual_seed(2401)
device = "cuda"
V, D, H, NL, CTX = 32000, 768, 12, 8, 2048


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))

    def heads(self, t):
        return t.unflatten(-1, (H, D // H)).transpose(1, 2)

    def forward(self, x, n_query, cache=None, start=0, bias_kind="lower_right"):
        # x holds the keys' positions; the last n_query of them are the queries
        h = self.ln1(x)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        q = self.heads(q[:, -n_query:])
        k, v = self.heads(k), self.heads(v)
        if cache is not None:
            kc, vc = cache
            kc[:, :, start:start + k.shape[2]] = k
            vc[:, :, start:start + v.shape[2]] = v
            k, v = kc[:, :, :start + k.shape[2]], vc[:, :, :start + v.shape[2]]
        if bias_kind == "lower_right":
            bias = causal_lower_right(q.shape[2], k.shape[2])
        else:
            bias = causal_upper_left(q.shape[2], k.shape[2])
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        a = self.proj(a.transpose(1, 2).flatten(2))
        x = x[:, -n_query:] + a
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(CTX, D)
        self.blocks = nn.ModuleList([Block() for _ in range(NL)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx, n_query, caches=None, start=0, bias_kind="lower_right"):
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for i, blk in enumerate(self.blocks):
            # without a cache every layer but the last keeps all positions as queries (square, so the
            # lower-right bias is plain causal); the last narrows to the suffix; with a cache every
            # layer's queries are the new tokens
            last = i == NL - 1
            nq = n_query if (last or caches is not None) else x.shape[1]
            x = blk(x, nq, None if caches is None else caches[i], start, bias_kind)
        return self.head(self.ln(x))


with torch.device(device):  # built on the GPU, not on the host first
    model = GPT()
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
B, SUFFIX = 8, 512
for step in range(4):
    idx = torch.randint(0, V, (B, CTX + 1), device=device)
    logits = model(idx[:, :-1], SUFFIX)
    loss = F.cross_entropy(logits.flatten(0, 1), idx[:, -SUFFIX:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"train step {step} loss {loss.item():.3f}")
del idx, logits, loss
report("train fp32 lower-right suffix queries")

opt = None
model.eval().to(torch.bfloat16)
BP, CHUNK = 16, 512
hd = D // H
caches = [(torch.zeros(BP, H, CTX, hd, device=device, dtype=torch.bfloat16),
           torch.zeros(BP, H, CTX, hd, device=device, dtype=torch.bfloat16)) for _ in range(NL)]
prompt = torch.randint(0, V, (BP, CTX), device=device)
with torch.inference_mode():
    for c in range(CTX // CHUNK):
        chunk = prompt[:, c * CHUNK:(c + 1) * CHUNK]
        logits = model(chunk, CHUNK, caches, start=c * CHUNK)
    nxt = logits[:, -1].float().argmax(-1)
    print("prefill next tokens", nxt[:4].tolist())
del logits, chunk
report("bf16 chunked prefill into kv cache")

del caches
with torch.inference_mode():
    seq = torch.randint(0, V, (16, 1024), device=device)
    logits = model(seq, 1024, bias_kind="upper_left")
    nll = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), seq[:, 1:].flatten())
    print(f"upper-left eval nll {nll.item():.3f}")
del seq, logits, nll
report("bf16 upper-left full-sequence eval")

model.half()
caches = [(torch.zeros(BP, H, CTX, hd, device=device, dtype=torch.float16),
           torch.zeros(BP, H, CTX, hd, device=device, dtype=torch.float16)) for _ in range(NL)]
with torch.inference_mode():
    tok = prompt[:, :1]
    for t in range(64):
        logits = model(tok, 1, caches, start=t)
        tok = logits[:, -1:].float().argmax(-1)
    print("decoded", tok[:4, 0].tolist())
report("fp16 decode 64 steps one query")
