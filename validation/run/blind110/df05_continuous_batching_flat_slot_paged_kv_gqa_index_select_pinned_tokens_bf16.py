"""A hand-written GQA decoder LM (12 layers, 1,536 wide, 12 heads with 4 KV heads, RoPE, SwiGLU,
32,000 vocab) in bf16 served by continuous batching over a paged KV cache kept as a flat slot pool
per layer (vLLM's slot mapping: 16-token blocks, a free list and block tables on the host): up to
6 requests run at once; a request joins by a prefill of its prompt alone (its K/V written to its
slots with index_copy_), each decode step writes the running requests' new K/V to their next
slots and gathers every request's slots with index_select into a padded batch for SDPA with a
boolean mask; slot indices go up through a pinned host buffer with non_blocking copies, the
sampled tokens (top-k 20 from a seeded CUDA generator) come back into pinned memory with
non_blocking copies and an event; a finished request frees its blocks for the next. The first wave
under inference_mode, the second under no_grad; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11005)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
if SMALL:
    D, NL, NH, KVH, FF, V, BLOCK, BLOCKS = 64, 2, 4, 2, 128, 300, 4, 256
    WAVES = ([(20, 4), (9, 6), (13, 3), (7, 5)], [(5, 3), (11, 4), (3, 6)])
    RUN = 2
else:
    D, NL, NH, KVH, FF, V, BLOCK, BLOCKS = 1536, 12, 12, 4, 4096, 32000, 16, 4096
    WAVES = (
        [(1500, 24), (700, 40), (1024, 16), (300, 32), (1800, 20), (950, 28), (400, 36), (1200, 12)],
        [(128, 30), (512, 18), (260, 26), (90, 40), (333, 22), (600, 14), (45, 34), (210, 20)],
    )
    RUN = 6
HD = D // NH
SLOTS = BLOCK * BLOCKS


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.q = nn.Linear(D, D, bias=False)
        self.kv = nn.Linear(D, 2 * KVH * HD, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(NL))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)


model = LM().to(device, dtype).eval()
k_pool = [torch.zeros(SLOTS, KVH, HD, device=device, dtype=dtype) for _ in range(NL)]
v_pool = [torch.zeros(SLOTS, KVH, HD, device=device, dtype=dtype) for _ in range(NL)]
inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=device, dtype=torch.float32) / HD))
host_idx = torch.zeros(RUN * 4096, dtype=torch.long, pin_memory=device == "cuda")
host_tok = torch.zeros(RUN, dtype=torch.long, pin_memory=device == "cuda")
gen = torch.Generator(device=device).manual_seed(11005)


def up(values):
    n = len(values)
    host_idx[:n] = torch.tensor(values, dtype=torch.long)
    return host_idx[:n].to(device, non_blocking=True)


def rope(x, pos):
    f = pos[:, None].float() * inv[None, :]
    cos, sin = f.cos().to(x.dtype)[:, None, :], f.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def forward(tokens, pos, write, gather, mask, shape):
    """tokens, pos, write: flat (T,); gather: (B * L,) slots; mask: (B, 1, Q, L); shape (B, Q)."""
    b, q = shape
    h = model.emb(tokens)
    for i, layer in enumerate(model.layers):
        x = layer.n1(h)
        qh = rope(layer.q(x).view(-1, NH, HD), pos)
        k, v = layer.kv(x).view(-1, 2, KVH, HD).unbind(1)
        k_pool[i].index_copy_(0, write, rope(k, pos))
        v_pool[i].index_copy_(0, write, v)
        kk = k_pool[i].index_select(0, gather).view(b, -1, KVH, HD).transpose(1, 2)
        vv = v_pool[i].index_select(0, gather).view(b, -1, KVH, HD).transpose(1, 2)
        qq = qh.view(b, q, NH, HD).transpose(1, 2)
        a = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, enable_gqa=True)
        h = h + layer.o(a.transpose(1, 2).reshape(b * q, D))
        g, u = layer.gate_up(layer.n2(h)).chunk(2, dim=-1)
        h = h + layer.down(F.silu(g) * u)
    return model.head(model.norm(h))


def sample(logits):
    top, idx = logits.float().topk(20, dim=-1)
    pick = torch.multinomial(F.softmax(top, dim=-1), 1, generator=gen)
    toks = idx.gather(-1, pick).squeeze(-1)
    host_tok[: toks.numel()].copy_(toks, non_blocking=True)
    done = torch.cuda.Event() if device == "cuda" else None
    if done is not None:
        done.record()
        done.synchronize()
    return host_tok[: toks.numel()].tolist()


def serve(requests):
    free = list(range(BLOCKS))
    waiting = list(enumerate(requests))
    running = {}
    produced = 0
    while waiting or running:
        while waiting and len(running) < RUN:
            rid, (plen, new) = waiting.pop(0)
            blocks = [free.pop() for _ in range(math.ceil((plen + new) / BLOCK))]
            slots = [blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(plen)]
            s = up(slots)
            prompt = torch.randint(0, V, (plen,), device=device)
            causal = torch.ones(plen, plen, device=device, dtype=torch.bool).tril()[None, None]
            pos = torch.arange(plen, device=device)
            logits = forward(prompt, pos, s, s, causal, (1, plen))
            (tok,) = sample(logits[-1:])
            running[rid] = dict(blocks=blocks, length=plen, left=new, tok=tok)
            del logits, causal, s, prompt
        ids = sorted(running)
        lengths = [running[r]["length"] + 1 for r in ids]
        width = max(lengths)
        write, gather, valid = [], [], torch.zeros(len(ids), width, dtype=torch.bool)
        for j, r in enumerate(ids):
            blk, n = running[r]["blocks"], lengths[j]
            slots = [blk[p // BLOCK] * BLOCK + p % BLOCK for p in range(n)]
            write.append(slots[-1])
            gather.extend(slots + [slots[-1]] * (width - n))
            valid[j, :n] = True
        toks = torch.tensor([running[r]["tok"] for r in ids]).to(device, non_blocking=True)
        pos = torch.tensor([n - 1 for n in lengths]).to(device, non_blocking=True)
        mask = valid.to(device, non_blocking=True)[:, None, None, :]
        logits = forward(toks, pos, up(write), up(gather), mask, (len(ids), 1))
        for r, t in zip(ids, sample(logits), strict=True):
            running[r]["tok"], running[r]["length"] = t, running[r]["length"] + 1
            running[r]["left"] -= 1
            produced += 1
            if running[r]["left"] == 0:
                free.extend(running.pop(r)["blocks"])
    return produced


if device == "cuda":
    print(f"model+pool {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    n = serve(WAVES[0])
if device == "cuda":
    print(
        f"wave0 {n} tokens peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    n = serve(WAVES[1])
if device == "cuda":
    print(
        f"wave1 {n} tokens peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
