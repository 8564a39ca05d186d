"""Checkpointing an FSDP2 model with torch.distributed.checkpoint on one GPU: a Llama-style decoder
(6 blocks of RMSNorm, causal SDPA attention (d 1536, 12 heads) and SwiGLU (4096), vocab 32000: 0.22 B
parameters) built on the GPU, `fully_shard` per block (reshard after forward) and on the root
(reshard_after_forward=False), bf16 parameters with fp32 reduction, AdamW (foreach); 2 steps of 2
micro-batches of 4 x 1024 with `set_requires_gradient_sync(False)` on the first. Then `dcp.save` of
`get_state_dict(model, opt)` (sharded DTensors) to a temporary directory; then a full state dict
gathered to the host (`get_model_state_dict` with `full_state_dict=True, cpu_offload=True`); then a
fresh model and optimizer sharded the same way, `dcp.load` of the checkpoint into their state dicts,
`set_state_dict`, the first model dropped, and 1 resumed step. Process group: init_process_group('nccl')
with rank 0 of 1 and MASTER_ADDR/PORT set by the script. 5 phases."""

import os
import shutil
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")

torch.manual_seed(2482)
V, D, H, FF, L, T, B = 32000, 1536, 12, 4096, 6, 1024, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.out = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def build():
    m = LM().cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in m.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(m, mp_policy=mp, reshard_after_forward=False)
    return m, torch.optim.AdamW(m.parameters(), lr=2e-4, foreach=True)


def train_step(m, o, batches):
    for i, (x, y) in enumerate(batches):
        m.set_requires_gradient_sync(i == len(batches) - 1)
        loss = F.cross_entropy(m(x).float().view(-1, V), y.view(-1)) / len(batches)
        loss.backward()
        del loss
    o.step()
    o.zero_grad(set_to_none=True)


model, opt = build()
batches = [
    (torch.randint(0, V, (B, T), device="cuda"), torch.randint(0, V, (B, T), device="cuda")) for _ in range(2)
]
for _ in range(2):
    train_step(model, opt, batches)
report("train_accum_2_steps")

ckpt = tempfile.mkdtemp(prefix="io02_")
msd, osd = get_state_dict(model, opt)
dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
del msd, osd
report("dcp_save_sharded")

full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
n_full = sum(t.numel() for t in full.values())
del full
report("full_state_dict_to_host")

model2, opt2 = build()
train_step(model2, opt2, batches[:1])  # materialise the optimizer states before loading into them
msd2, osd2 = get_state_dict(model2, opt2)
dcp.load({"model": msd2, "optim": osd2}, checkpoint_id=ckpt)
set_state_dict(model2, opt2, model_state_dict=msd2, optim_state_dict=osd2)
del msd2, osd2, model, opt
report("fresh_model_dcp_load")

train_step(model2, opt2, batches)
report("resumed_step")

shutil.rmtree(ckpt, ignore_errors=True)
print("full state dict elements", n_full)
dist.destroy_process_group()
