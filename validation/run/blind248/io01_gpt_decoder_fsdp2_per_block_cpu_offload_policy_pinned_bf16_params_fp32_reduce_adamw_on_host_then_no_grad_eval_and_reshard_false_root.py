"""FSDP2 with CPU offload on one GPU: a GPT-style decoder (8 blocks of LayerNorm, causal SDPA attention
(d 1024, 16 heads) and a GELU MLP (4096), vocab 32000, untied head: 0.17 B parameters) built on the CPU,
`fully_shard` on every block and on the root with `MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)` and `CPUOffloadPolicy(pin_memory=True)`: the sharded fp32 parameters, their
gradients and AdamW's states stay on the host (the optimizer steps on the CPU); each block's bf16
parameters are copied to the GPU for its forward and backward and its fp32-reduced gradient is copied
back. Process group: init_process_group('nccl') with RANK/WORLD_SIZE=0/1 and MASTER_ADDR/PORT set by the
script (one process). Batch 8 x 1024, 2 steps; an evaluation under no_grad of 2 batches of 16; then the
root's reshard_after_forward set to False and 1 more step. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")

torch.manual_seed(2481)
V, D, H, L, T, B = 32000, 1024, 16, 8, 1024, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
off = CPUOffloadPolicy(pin_memory=True)
for blk in model.blocks:
    fully_shard(blk, mp_policy=mp, offload_policy=off)
fully_shard(model, mp_policy=mp, offload_policy=off)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
idx = torch.randint(0, V, (B, T), device="cuda")
tgt = torch.randint(0, V, (B, T), device="cuda")
report("setup_sharded_on_host")

for _ in range(2):
    logits = model(idx)
    loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))
    del logits
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_cpu_offload_2_steps")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ev = torch.randint(0, V, (16, T), device="cuda")
        pred = model(ev).argmax(-1)
        del ev, pred
report("eval_no_grad")

model.train()
model.set_reshard_after_forward(False, recurse=False)
logits = model(idx)
loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))
del logits
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
del loss
report("train_root_no_reshard")

dist.destroy_process_group()
