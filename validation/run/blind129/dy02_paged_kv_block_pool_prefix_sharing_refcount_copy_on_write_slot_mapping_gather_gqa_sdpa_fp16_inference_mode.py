"""A hand-written Llama-style decoder (16 layers, 2,048 wide, 16 heads with 4 KV heads of 128, SwiGLU
of 5,632, rotary, vocabulary 32,000, fp16) served from a paged KV cache under inference_mode: per
layer a pool of 2,048 blocks of 16 positions for K and V, a host free list and per-request block
tables; a 520-token system prompt is prefilled once into 33 blocks that every request shares by
reference count, its last partial block copied on write when a request first writes into it; 24
requests' suffixes (64 to 256 tokens, right-padded, padding slots written into a reserved block) are
prefilled in one batch through a slot mapping (index_copy_ into the flat pool) and attention over the
gathered block tables (bool masks, SDPA with enable_gqa); 64 decode steps; then 12 requests finish,
their blocks return to the free list and 12 new requests sharing the prefix are admitted, prefilled
and decoded with the rest for 32 steps; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12902)
if SMALL:
    LAYERS, D, H, KVH, FF, V = 2, 64, 4, 2, 128, 500
    BLOCKS, BS, PREFIX, NREQ, SLO, SHI, STEPS, NEWREQ, STEPS2 = 128, 4, 10, 4, 3, 9, 5, 2, 3
else:
    LAYERS, D, H, KVH, FF, V = 16, 2048, 16, 4, 5632, 32000
    BLOCKS, BS, PREFIX, NREQ, SLO, SHI, STEPS, NEWREQ, STEPS2 = 2048, 16, 520, 24, 64, 256, 64, 12, 32
HD = D // H
MAXPOS = 4096
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32

inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=device).float() / HD))
ang = torch.outer(torch.arange(MAXPOS, device=device).float(), inv)
COS, SIN = ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, pos):
    c, s = COS[pos].unsqueeze(-2), SIN[pos].unsqueeze(-2)
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.q = nn.Linear(D, H * HD, bias=False)
        self.kv = nn.Linear(D, 2 * KVH * HD, bias=False)
        self.o = nn.Linear(H * HD, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, pos, slots, table, mask, k_pool, v_pool):
        b, n, _ = x.shape
        h = self.n1(x)
        q = rope(self.q(h).view(b, n, H, HD), pos)
        k, v = self.kv(h).view(b, n, 2, KVH, HD).unbind(2)
        k = rope(k, pos)
        k_pool.view(-1, KVH, HD).index_copy_(0, slots.flatten(), k.reshape(-1, KVH, HD))
        v_pool.view(-1, KVH, HD).index_copy_(0, slots.flatten(), v.reshape(-1, KVH, HD))
        keys = k_pool[table].flatten(1, 2).transpose(1, 2)
        values = v_pool[table].flatten(1, 2).transpose(1, 2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, n, D))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, pos, slots, table, mask, last):
        x = self.emb(ids)
        for layer, (kp, vp) in zip(self.layers, pools, strict=True):
            x = layer(x, pos, slots, table, mask, kp, vp)
        x = x.gather(1, last.view(-1, 1, 1).expand(-1, 1, D))
        return self.head(self.norm(x)).float()


model = Decoder().to(device=device, dtype=dtype).eval()
pools = [
    (
        torch.zeros(BLOCKS, BS, KVH, HD, device=device, dtype=dtype),
        torch.zeros(BLOCKS, BS, KVH, HD, device=device, dtype=dtype),
    )
    for _ in range(LAYERS)
]
free = list(range(BLOCKS - 1, 0, -1))  # block 0 takes the padding slots
refs = [0] * BLOCKS


def alloc():
    blk = free.pop()
    refs[blk] = 1
    return blk


def release(blk):
    refs[blk] -= 1
    if refs[blk] == 0:
        free.append(blk)


def report(name):
    if device == "cuda":
        print(
            f"{name} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()} free blocks {len(free)}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name} free blocks {len(free)}")


def run(ids, starts, lengths, tables):
    """Writes lengths[i] tokens of request i at positions starts[i]..; returns the last logits."""
    b, n = ids.shape
    pos = torch.zeros(b, n, dtype=torch.long)
    slots = torch.zeros(b, n, dtype=torch.long)
    for i in range(b):
        p = torch.arange(starts[i], starts[i] + lengths[i])
        pos[i, : lengths[i]] = p
        blocks = torch.tensor(tables[i])
        slots[i, : lengths[i]] = blocks[p // BS] * BS + p % BS
    width = max(len(t) for t in tables)
    table = torch.zeros(b, width, dtype=torch.long)
    for i, t in enumerate(tables):
        table[i, : len(t)] = torch.tensor(t)
    key_pos = torch.arange(width * BS)
    ends = torch.tensor([s + n_ for s, n_ in zip(starts, lengths, strict=True)])
    mask = (key_pos[None, None] <= pos[:, :, None]) & (key_pos[None, None] < ends[:, None, None])
    mask[:, :, 0] |= ~mask.any(-1)  # padded queries see one key
    last = torch.tensor(lengths) - 1
    return model(
        ids,
        pos.to(device),
        slots.to(device),
        table.to(device),
        mask[:, None].to(device),
        last.to(device),
    )


def grow(table, start, count):
    while len(table) * BS < start + count:
        table.append(alloc())


def admit(count):
    """New requests share the prefix blocks; the partial last one is copied on write."""
    tables, lengths = [], []
    for _ in range(count):
        t = list(prefix_blocks)
        for blk in t:
            refs[blk] += 1
        if PREFIX % BS:
            shared = t[-1]
            t[-1] = alloc()
            release(shared)
            for kp, vp in pools:
                kp[t[-1]].copy_(kp[shared])
                vp[t[-1]].copy_(vp[shared])
        n = int(torch.randint(SLO, SHI + 1, ()))
        grow(t, PREFIX, n)
        tables.append(t)
        lengths.append(n)
    ids = torch.randint(0, V, (count, max(lengths)), device=device)
    logits = run(ids, [PREFIX] * count, lengths, tables)
    ctx = [PREFIX + n for n in lengths]
    return tables, ctx, logits.argmax(-1)


def decode(tables, ctx, tok, steps):
    for _ in range(steps):
        for t, c in zip(tables, ctx, strict=True):
            grow(t, c, 1)
        logits = run(tok, ctx, [1] * len(ctx), tables)
        tok = logits.argmax(-1)
        ctx = [c + 1 for c in ctx]
    return ctx, tok


with torch.inference_mode():
    if device == "cuda":
        print(f"model and pools {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    prefix_blocks = []
    grow(prefix_blocks, 0, PREFIX)
    system = torch.randint(0, V, (1, PREFIX), device=device)
    run(system, [0], [PREFIX], [prefix_blocks])
    report("prefix")
    tables, ctx, tok = admit(NREQ)
    report("suffix prefill")
    ctx, tok = decode(tables, ctx, tok, STEPS)
    report("decode")
    for t in tables[:NEWREQ]:
        for blk in t:
            release(blk)
    new_tables, new_ctx, new_tok = admit(NEWREQ)
    tables = tables[NEWREQ:] + new_tables
    ctx = ctx[NEWREQ:] + new_ctx
    tok = torch.cat([tok[NEWREQ:], new_tok])
    ctx, tok = decode(tables, ctx, tok, STEPS2)
    report("second wave")
