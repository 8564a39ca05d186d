"""A mixture-of-experts transformer trained with hand-written data and expert parallelism, as a torchrun
program (world of one GPU here; without RANK in the environment the script makes it itself,
`init_process_group('nccl', init_method=tcp://...)`). The model: 6 blocks of causal SDPA (d 1024,
16 heads) and a top-2 MoE feed-forward of 8 SwiGLU experts (2816) with a fixed capacity (factor 1.25):
tokens are scattered into an [experts, capacity, d] buffer by `index_put`, exchanged with the autograd
`torch.distributed.nn.functional.all_to_all_single` to the ranks that own the experts (8 / world each),
run as batched matmuls, exchanged back and gathered; vocab 32000 (0.51 B parameters), bf16 autocast.
Phases: (0) group, model on the GPU; (1) 3 steps of 4 x 1024 with the gradients all-reduced by hand:
flattened into 25 MB buckets (`_flatten_dense_tensors`), `all_reduce(async_op=True)` per bucket, the
works waited, averaged and copied back, then fused AdamW; (2) ZeRO-1 by hand: the parameters viewed from
one padded flat fp32 buffer, the gradient flattened and `reduce_scatter_tensor`'d (AVG) into this rank's
shard, AdamW on an fp32 master shard (`torch._foreach`-free, plain ops), the updated shard
`all_gather_into_tensor`'d back into the flat buffer, 3 steps; (3) evaluation of 2 batches under no_grad,
per-rank losses gathered with `all_gather_into_tensor`. 4 phases."""

import math
import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
import torch.nn as nn
import torch.nn.functional as F
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
else:
    dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(device)

torch.manual_seed(3394 + rank)
V, D, H, E, FF, L, T, B, TOPK = 32000, 1024, 16, 8, 2816, 6, 1024, 4, 2
E_LOCAL = E // world
CAP = math.ceil(B * T * TOPK / E * 1.25)


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E, bias=False)
        self.w1 = nn.Parameter(torch.randn(E_LOCAL, D, FF) * 0.02)
        self.w3 = nn.Parameter(torch.randn(E_LOCAL, D, FF) * 0.02)
        self.w2 = nn.Parameter(torch.randn(E_LOCAL, FF, D) * 0.02)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, D)
        n = x.shape[0]
        probs = self.router(x).float().softmax(-1)
        gate, expert = probs.topk(TOPK, dim=-1)  # [n, k]
        gate = gate / gate.sum(-1, keepdim=True)
        flat_e = expert.reshape(-1)
        onehot = F.one_hot(flat_e, E)
        pos = (onehot.cumsum(0) - 1).gather(1, flat_e[:, None]).squeeze(1)
        keep = pos < CAP
        slot = torch.where(keep, flat_e * CAP + pos, torch.full_like(pos, E * CAP))  # overflow slot
        token = torch.arange(n, device=x.device).repeat_interleave(TOPK)
        buf = x.new_zeros(E * CAP + 1, D).index_put((slot,), x[token], accumulate=False)[:-1]
        recv = dist_fn.all_to_all_single(torch.empty_like(buf), buf.contiguous())
        h = recv.view(world, E_LOCAL, CAP, D).transpose(0, 1).reshape(E_LOCAL, world * CAP, D)
        h = torch.bmm(
            F.silu(torch.bmm(h, self.w1.to(h.dtype))) * torch.bmm(h, self.w3.to(h.dtype)), self.w2.to(h.dtype)
        )
        h = h.view(E_LOCAL, world, CAP, D).transpose(0, 1).reshape(E * CAP, D).contiguous()
        back = dist_fn.all_to_all_single(torch.empty_like(h), h)
        back = torch.cat([back, back.new_zeros(1, D)])
        out = back[slot] * (gate.reshape(-1, 1) * keep[:, None]).to(back.dtype)
        return out.view(n, TOPK, D).sum(1).view(shape)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.moe = MoE()

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        )
        return x + self.moe(self.n2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


model = LM().to(device)
expert_params = {id(p) for n, p in model.named_parameters() if ".moe.w" in n}
dense = [p for p in model.parameters() if id(p) not in expert_params]
torch.cuda.reset_peak_memory_stats()


def loss_of(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, V), y.view(-1))


def batch():
    return torch.randint(0, V, (B, T), device=device), torch.randint(0, V, (B, T), device=device)


def allreduce_buckets(params, cap_bytes=25 * 1024 * 1024):
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        cur.append(p)
        size += p.grad.numel() * p.grad.element_size()
        if size >= cap_bytes:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    pending = []
    for bucket in buckets:
        flat = _flatten_dense_tensors([p.grad for p in bucket])
        pending.append((bucket, flat, dist.all_reduce(flat, async_op=True)))
    for bucket, flat, work in pending:
        work.wait()
        flat.div_(world)
        for p, g in zip(bucket, _unflatten_dense_tensors(flat, [p.grad for p in bucket]), strict=True):
            p.grad.copy_(g)


opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
for _ in range(3):
    x, y = batch()
    loss = loss_of(x, y)
    loss.backward()
    allreduce_buckets(dense)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("ep loss", loss.item())
del opt, loss
torch.cuda.reset_peak_memory_stats()

params = list(model.parameters())
numel = sum(p.numel() for p in params)
padded = -(-numel // world) * world
flat_param = torch.zeros(padded, device=device)
offset = 0
for p in params:
    flat_param[offset : offset + p.numel()].copy_(p.data.view(-1))
    p.data = flat_param[offset : offset + p.numel()].view_as(p)
    offset += p.numel()
shard = padded // world
master = flat_param[rank * shard : (rank + 1) * shard].clone()
exp_avg, exp_avg_sq = torch.zeros_like(master), torch.zeros_like(master)
for step in range(1, 4):
    x, y = batch()
    loss_of(x, y).backward()
    flat_grad = torch.zeros(padded, device=device)
    flat_grad[:numel].copy_(torch.cat([p.grad.view(-1) for p in params]))
    for p in params:
        p.grad = None
    grad_shard = torch.empty(shard, device=device)
    dist.reduce_scatter_tensor(grad_shard, flat_grad, op=dist.ReduceOp.AVG)
    del flat_grad
    exp_avg.mul_(0.9).add_(grad_shard, alpha=0.1)
    exp_avg_sq.mul_(0.95).addcmul_(grad_shard, grad_shard, value=0.05)
    denom = (exp_avg_sq / (1 - 0.95**step)).sqrt_().add_(1e-8)
    master.mul_(1 - 3e-4 * 0.1).addcdiv_(exp_avg, denom, value=-3e-4 / (1 - 0.9**step))
    dist.all_gather_into_tensor(flat_param, master)
    del grad_shard, denom
torch.cuda.reset_peak_memory_stats()

model.eval()
losses = []
with torch.no_grad():
    for _ in range(2):
        losses.append(loss_of(*batch()))
local = torch.stack(losses)
everyone = torch.empty(world * local.numel(), device=device)
dist.all_gather_into_tensor(everyone, local)
print("eval", everyone.mean().item())
dist.destroy_process_group()
