"""ZeRO-Offload written by hand on one GPU: a decoder of 8 blocks (width 1,024, 16 heads, RMSNorm,
SwiGLU of 2,816) whose bf16 parameters are views of one flat GPU buffer per block, freed with
untyped_storage().resize_(0) and refilled on a side stream (resize_ under the side stream, copy_
from a pinned bf16 host shard with non_blocking=True, an event the main stream waits on,
record_stream for the main stream), the next block prefetched while the current one runs (forward
pre-hooks, full backward pre-hooks); post-accumulate-grad hooks gather each block's bf16 gradients
into one flat tensor copied to a pinned host buffer on the side stream (record_stream) and free the
storage again; fp32 masters and AdamW live on the CPU (the host shards refreshed after the step);
embedding, final norm and head stay on the GPU in fp32 with a GPU AdamW; batch 8 x 1,024, 3 steps,
then a no_grad evaluation through the same hooks; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12803)
LAYERS, D, H, FF, V = (2, 64, 4, 128, 512) if SMALL else (8, 1024, 16, 2816, 32000)
B, T = (2, 32) if SMALL else (8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
PIN = device == "cuda"
side = torch.cuda.Stream() if device == "cuda" else None


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.norm2 = nn.RMSNorm(D)
        self.w13 = nn.Linear(D, 2 * FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(D, dim=2)
        q, k, v = (t.view(b, n, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, D))
        a, g = self.w13(self.norm2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(a) * g)


class Offloaded:
    """One block's parameters: fp32 master and pinned bf16 shard on the host, bf16 views on the GPU."""

    def __init__(self, block):
        self.params = list(block.parameters())
        self.numel = sum(p.numel() for p in self.params)
        self.master = torch.cat([p.detach().reshape(-1).float().cpu() for p in self.params])
        self.master.requires_grad_(True)
        self.shard = torch.empty(self.numel, dtype=torch.bfloat16, pin_memory=PIN)
        self.shard.copy_(self.master.detach())
        self.grad_host = torch.empty(self.numel, dtype=torch.bfloat16, pin_memory=PIN)
        self.flat = torch.empty(self.numel, dtype=torch.bfloat16, device=device)
        offset = 0
        for p in self.params:
            p.data = self.flat[offset : offset + p.numel()].view(p.shape)
            offset += p.numel()
            p.register_post_accumulate_grad_hook(self.grad_ready)
        self.ready = None
        self.pending = 0
        self.reshard()

    def prefetch(self):
        storage = self.flat.untyped_storage()
        if storage.size() != 0 or self.ready is not None:
            return
        if side is None:
            storage.resize_(self.numel * 2)
            self.flat.copy_(self.shard)
            return
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            storage.resize_(self.numel * 2)
            with torch.no_grad():
                self.flat.copy_(self.shard, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record(side)

    def wait(self):
        self.prefetch()
        if self.ready is not None:
            torch.cuda.current_stream().wait_event(self.ready)
            self.flat.record_stream(torch.cuda.current_stream())
            self.ready = None

    def reshard(self):
        self.flat.untyped_storage().resize_(0)

    def grad_ready(self, p):
        self.pending += 1
        if self.pending < len(self.params):
            return
        self.pending = 0
        with torch.no_grad():
            g = torch.cat([q.grad.reshape(-1) for q in self.params])
        for q in self.params:
            q.grad = None
        if side is None:
            self.grad_host.copy_(g)
        else:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.grad_host.copy_(g, non_blocking=True)
            g.record_stream(side)
        del g
        self.reshard()

    def cpu_grad(self):
        g = self.grad_host.float()
        self.master.grad = g if self.master.grad is None else self.master.grad.add_(g)

    def refresh(self):
        self.shard.copy_(self.master.detach())


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.embed(ids).to(torch.bfloat16)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x.float()))


model = Model()
model.embed.to(device)
model.norm.to(device)
model.head.to(device)
for blk in model.blocks:
    blk.to(device, torch.bfloat16)
shards = [Offloaded(blk) for blk in model.blocks]
for i, (blk, sh) in enumerate(zip(model.blocks, shards, strict=True)):
    nxt = shards[i + 1] if i + 1 < LAYERS else None
    prv = shards[i - 1] if i > 0 else None

    def pre(m, args, sh=sh, nxt=nxt):
        sh.wait()
        if nxt is not None:
            nxt.prefetch()

    def post(m, args, out, sh=sh):
        sh.reshard()

    def bwd_pre(m, grad_out, sh=sh, prv=prv):
        sh.wait()
        if prv is not None:
            prv.prefetch()

    blk.register_forward_pre_hook(pre)
    blk.register_forward_hook(post)
    blk.register_full_backward_pre_hook(bwd_pre)
gpu_params = [p for n, p in model.named_parameters() if not n.startswith("blocks.")]
gpu_opt = torch.optim.AdamW(gpu_params, lr=3e-4, weight_decay=0.1)
cpu_opt = torch.optim.AdamW([sh.master for sh in shards], lr=3e-4, weight_decay=0.1)

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
    for sh in shards:
        sh.cpu_grad()
    gpu_opt.step()
    cpu_opt.step()
    gpu_opt.zero_grad(set_to_none=True)
    cpu_opt.zero_grad(set_to_none=True)
    for sh in shards:
        sh.refresh()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} allocated {torch.cuda.memory_allocated()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, logits, loss
with torch.no_grad():
    ids = torch.randint(0, V, (B, T + 1), device=device)
    val = F.cross_entropy(model(ids[:, :-1]).reshape(-1, V), ids[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"eval loss {val.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke eval {val.item():.3f}")
