"""Continuous batching with a paged KV cache, written by hand in the vLLM style, for a Llama-style decoder
(RMSNorm, RoPE, GQA 16/4, SwiGLU, 2048 wide, 12 layers, 32k vocab) in bf16. One KV pool tensor
[layers, 2, blocks, 16, kv_heads, head_dim] is allocated up front; each request owns a block table and its
tokens' slots come from a slot mapping (index_copy_ into the flattened pool). A scheduler loop admits
waiting requests (prompts of 96-700 tokens, 24-96 new tokens each, drawn from a seeded generator, no EOS)
while free blocks and batch slots allow, prefills each newcomer alone (causal sdpa over its prompt), and
runs one batched decode step for all running requests: the block tables are padded into one tensor, the
pool is gathered with index_select into [batch, blocks*16, kv_heads, head_dim], and sdpa(enable_gqa) runs
with a per-row length mask; finished requests free their blocks. Then swap preemption: half of the running
requests have their blocks copied to pinned host memory and freed, a 2,048-token priority request is
prefilled and decoded, and the swapped requests come back into freshly allocated blocks.

Phases: 0 model and KV pool; 1 first admission wave (prefills); 2 40 scheduler steps; 3 swap-out,
priority request, swap-in; 4 drain to completion."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3274)
if SMALL:
    D, L, H, KVH, HD, FF, V = 64, 2, 4, 2, 16, 128, 512
    NBLOCKS, MAXB, NREQ, PMIN, PMAX, GMIN, GMAX, PRIO = 64, 4, 8, 8, 40, 4, 10, 64
else:
    D, L, H, KVH, HD, FF, V = 2048, 12, 16, 4, 128, 5632, 32000
    NBLOCKS, MAXB, NREQ, PMIN, PMAX, GMIN, GMAX, PRIO = 640, 8, 20, 96, 700, 24, 96, 2048
BS = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.bfloat16


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def rope(x, pos):
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, device=x.device, dtype=torch.float32) / HD))
    ang = pos[..., None].float() * inv
    cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
    x1, x2 = x[..., : HD // 2].float(), x[..., HD // 2 :].float()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv = nn.Linear(D, (H + 2 * KVH) * HD, bias=False)
        self.o = nn.Linear(H * HD, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def qkv_rope(self, x, pos):
        q, k, v = self.qkv(self.n1(x)).split([H * HD, KVH * HD, KVH * HD], dim=-1)
        q = rope(q.unflatten(-1, (H, HD)), pos)
        k = rope(k.unflatten(-1, (KVH, HD)), pos)
        return q, k, v.unflatten(-1, (KVH, HD))

    def mlp(self, x):
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)


model = Model().to(device=device, dtype=dt).eval()
pool = torch.zeros(L, 2, NBLOCKS * BS, KVH, HD, device=device, dtype=dt)
free_blocks = list(range(NBLOCKS))
report("model_and_pool")

gen = torch.Generator().manual_seed(7)
waiting = []
for rid in range(NREQ):
    plen = int(torch.randint(PMIN, PMAX + 1, (1,), generator=gen))
    glen = int(torch.randint(GMIN, GMAX + 1, (1,), generator=gen))
    waiting.append({"id": rid, "prompt": torch.randint(3, V, (plen,), generator=gen), "gen": glen})
running, finished = [], []


def blocks_needed(n):
    return (n + BS - 1) // BS


def slots(req, start, end):
    t = torch.arange(start, end)
    table = torch.tensor(req["blocks"])
    return (table[t // BS] * BS + t % BS).to(device)


def ensure_blocks(req, length):
    while len(req["blocks"]) < blocks_needed(length):
        req["blocks"].append(free_blocks.pop())


@torch.no_grad()
def prefill(req):
    ids = req["prompt"].to(device)
    n = ids.numel()
    ensure_blocks(req, n)
    slot = slots(req, 0, n)
    pos = torch.arange(n, device=device)
    x = model.emb(ids)[None]
    for i, blk in enumerate(model.blocks):
        q, k, v = blk.qkv_rope(x, pos)
        pool[i, 0].index_copy_(0, slot, k[0])
        pool[i, 1].index_copy_(0, slot, v[0])
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        x = blk.mlp(x + blk.o(a.transpose(1, 2).flatten(2)))
    logits = model.head(model.norm(x[:, -1]))
    req["len"] = n
    req["last"] = int(logits.argmax(-1))
    req["done"] = 0


@torch.no_grad()
def decode_step(batch):
    nb = len(batch)
    for r in batch:
        ensure_blocks(r, r["len"] + 1)
    maxblk = max(len(r["blocks"]) for r in batch)
    table = torch.tensor([r["blocks"] + [0] * (maxblk - len(r["blocks"])) for r in batch], device=device)
    lens = torch.tensor([r["len"] + 1 for r in batch], device=device)
    pos = lens - 1
    slot = torch.cat([slots(r, r["len"], r["len"] + 1) for r in batch])
    kv_idx = (table[:, :, None] * BS + torch.arange(BS, device=device)).flatten(1)
    mask = torch.arange(maxblk * BS, device=device)[None, :] < lens[:, None]
    x = model.emb(torch.tensor([r["last"] for r in batch], device=device))[:, None]
    for i, blk in enumerate(model.blocks):
        q, k, v = blk.qkv_rope(x, pos[:, None])
        pool[i, 0].index_copy_(0, slot, k[:, 0])
        pool[i, 1].index_copy_(0, slot, v[:, 0])
        keys = pool[i, 0].index_select(0, kv_idx.flatten()).view(nb, -1, KVH, HD)
        vals = pool[i, 1].index_select(0, kv_idx.flatten()).view(nb, -1, KVH, HD)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            keys.transpose(1, 2),
            vals.transpose(1, 2),
            attn_mask=mask[:, None, None, :],
            enable_gqa=True,
            scale=1 / math.sqrt(HD),
        )
        x = blk.mlp(x + blk.o(a.transpose(1, 2).flatten(2)))
    nxt = model.head(model.norm(x[:, 0])).argmax(-1).tolist()
    for r, t in zip(batch, nxt, strict=True):
        r["len"] += 1
        r["last"] = t
        r["done"] += 1


def schedule_step():
    while (
        waiting
        and len(running) < MAXB
        and len(free_blocks) >= blocks_needed(waiting[0]["prompt"].numel() + waiting[0]["gen"])
    ):
        req = waiting.pop(0)
        req["blocks"] = []
        prefill(req)
        running.append(req)
    if running:
        decode_step(running)
    for r in [r for r in running if r["done"] >= r["gen"]]:
        running.remove(r)
        free_blocks.extend(r.pop("blocks"))
        finished.append(r["id"])


while waiting and len(running) < MAXB:
    req = waiting.pop(0)
    req["blocks"] = []
    prefill(req)
    running.append(req)
print("admitted", len(running), "free blocks", len(free_blocks))
report("first_wave")

for _ in range(40):
    schedule_step()
print("running", len(running), "waiting", len(waiting), "finished", len(finished))
report("steps40")

swapped = running[len(running) // 2 :]
del running[len(running) // 2 :]
for r in swapped:
    idx = slots(r, 0, r["len"])
    r["host"] = torch.empty((L, 2, r["len"], KVH, HD), dtype=dt, pin_memory=device == "cuda")
    r["host"].copy_(pool[:, :, idx], non_blocking=True)
    free_blocks.extend(r.pop("blocks"))
if device == "cuda":
    torch.cuda.synchronize()
prio = {"id": -1, "prompt": torch.randint(3, V, (PRIO,), generator=gen), "gen": 16, "blocks": []}
prefill(prio)
for _ in range(16):
    decode_step([prio])
free_blocks.extend(prio.pop("blocks"))
for r in swapped:
    r["blocks"] = []
    ensure_blocks(r, r["len"])
    idx = slots(r, 0, r["len"])
    pool[:, :, idx] = r.pop("host").to(device, non_blocking=True)
    running.append(r)
print("swapped back", len(swapped), "free blocks", len(free_blocks))
report("swap_preemption")

steps = 0
while waiting or running:
    schedule_step()
    steps += 1
print("drained in", steps, "steps, finished", len(finished))
report("drain")
