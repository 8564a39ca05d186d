"""A torchrun-style GPT language model trained with DDP, two communication schemes one after the
other, on one GPU (`torchrun --standalone --nproc_per_node 1`, or plain `python`: without RANK in the
environment the script makes a world of one itself, `init_process_group('nccl', init_method=tcp://...)`
on a free port). The model: 8 pre-norm blocks (d 1024, 16 heads, causal SDPA, GELU MLP 4096), vocab
32768, tied embeddings (0.13 B parameters). Data: a host TensorDataset of token windows read through a
DistributedSampler and a DataLoader with pinned memory, copied with non_blocking.
Phases: (0) process group, model built on the GPU; (1) DDP with bucket_cap_mb=10,
gradient_as_bucket_view=True and the `bf16_compress_hook` comm hook, fused AdamW, 3 steps of 8 x 512
under bf16 autocast; (2) that model dropped, a fresh DDP model with the `post_localSGD_hook`
(PostLocalSGDState over intra-node subgroups from
`new_subgroups`, local SGD from iteration 2) and `PostLocalSGDOptimizer` wrapping AdamW (foreach)
with a `PeriodicModelAverager` (period 2, warm-up 2), 5 steps; (3) evaluation of 4 batches under
no_grad on the DDP module's `.module`. 4 phases."""

import itertools
import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.algorithms.model_averaging.averagers as averagers
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.distributed.optim import PostLocalSGDOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

if "RANK" in os.environ:
    dist.init_process_group("nccl")
else:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)

torch.manual_seed(3391)
V, D, H, FF, L, T, B = 32768, 1024, 16, 4096, 8, 512, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.fc = nn.Linear(D, FF)
        self.out = nn.Linear(FF, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


tokens = torch.randint(0, V, (64, T + 1))
dataset = TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
sampler = DistributedSampler(dataset, shuffle=True, seed=339)
loader = DataLoader(dataset, batch_size=B, sampler=sampler, pin_memory=True, drop_last=True)


def batches(epoch):
    sampler.set_epoch(epoch)
    for x, y in loader:
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def step(model, opt, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


model = GPT().to(device)
torch.cuda.reset_peak_memory_stats()

ddp = DDP(model, device_ids=[local_rank], bucket_cap_mb=10, gradient_as_bucket_view=True)
ddp.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
for x, y in itertools.islice(batches(0), 3):
    loss = step(ddp, opt, x, y)
print("bf16 compress loss", float(loss))
del ddp, model, opt, loss
torch.cuda.reset_peak_memory_stats()

model = GPT().to(device)
subgroup, _ = dist.new_subgroups(group_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))  # intra-node
state = PostLocalSGDState(process_group=None, subgroup=subgroup, start_localSGD_iter=2)
ddp = DDP(model, device_ids=[local_rank])
ddp.register_comm_hook(state, post_localSGD_hook)
local_opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, foreach=True)
opt = PostLocalSGDOptimizer(
    optim=local_opt, averager=averagers.PeriodicModelAverager(period=2, warmup_steps=2)
)
for x, y in itertools.islice(batches(1), 5):
    loss = step(ddp, opt, x, y)
print("post-local SGD loss", float(loss))
torch.cuda.reset_peak_memory_stats()

ddp.module.eval()
total = torch.zeros((), device=device)
with torch.no_grad():
    for x, y in itertools.islice(batches(2), 4):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = ddp.module(x)
        total += F.cross_entropy(logits.float().view(-1, V), y.view(-1))
dist.all_reduce(total)
print("eval loss", float(total) / 4 / dist.get_world_size())
dist.destroy_process_group()
