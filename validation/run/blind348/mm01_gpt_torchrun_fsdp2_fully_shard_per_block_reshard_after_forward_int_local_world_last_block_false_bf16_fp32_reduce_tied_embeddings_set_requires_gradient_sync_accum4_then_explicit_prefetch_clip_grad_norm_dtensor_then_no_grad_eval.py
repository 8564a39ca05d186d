"""A torchrun-style GPT language model under FSDP2 on one GPU (a world of one made by the script when RANK
is unset): 16 blocks of pre-LayerNorm causal SDPA attention (d 1024, 16 heads) and a GELU MLP (4096), vocab
50304 with the LM head tied to the token embedding (0.25 B parameters), built on the meta device,
`fully_shard` on every block with `reshard_after_forward` an int (the node size, LOCAL_WORLD_SIZE, as
torchtitan's "reshard to the node" option: 1 here, which FSDP takes as False) except the last block
(False) and on the root (default), `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, fused AdamW.
Phases: (0) group, mesh, model sharded, `to_empty` + init; (1) 2 steps of 4 micro-batches of 4 x 1024 with
`set_requires_gradient_sync(False)` on the first three (gradients accumulate unsharded); (2) every block set
to reshard after forward, explicit prefetching (`set_modules_to_forward_prefetch` of the next two blocks,
`set_modules_to_backward_prefetch` of the previous one), 2 steps of 8 x 1024 with `clip_grad_norm_` over the
DTensor gradients; then an evaluation of 8 x 1024 under no_grad. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

SMALL = bool(os.environ.get("SMOKE"))
if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
local_rank = int(os.environ["LOCAL_RANK"])
use_cuda = torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if use_cuda else "gloo")
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
world = dist.get_world_size()
node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))

torch.manual_seed(3481)
V, D, H, L, T, B = (512, 64, 4, 3, 64, 2) if SMALL else (50304, 1024, 16, 16, 1024, 4)


def report(tag, reset=True):
    if use_cuda:
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


with torch.device("meta"):
    model = GPT()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for i, blk in enumerate(model.blocks):
    fully_shard(blk, mesh=mesh, mp_policy=mp, reshard_after_forward=node if i < L - 1 else False)
fully_shard(model, mesh=mesh, mp_policy=mp)
model.to_empty(device=device)
with torch.no_grad():
    for name, p in model.named_parameters():
        if "ln" in name:
            p.fill_(1.0 if name.endswith("weight") else 0.0)
        elif name.endswith("bias"):
            p.zero_()
        else:
            p.normal_(0.0, 0.02)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=use_cuda)
print("parameters", sum(p.numel() for p in model.parameters()))
report("built")


def loss_of(x, y):
    return F.cross_entropy(model(x).float().view(-1, V), y.view(-1))


def batch(b):
    return torch.randint(0, V, (b, T), device=device), torch.randint(0, V, (b, T), device=device)


ACCUM = 4
for step in range(2):
    for micro in range(ACCUM):
        model.set_requires_gradient_sync(micro == ACCUM - 1)
        x, y = batch(B)
        (loss_of(x, y) / ACCUM).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("accum step", step)
report("accumulation")

for i, blk in enumerate(model.blocks):
    blk.set_reshard_after_forward(True)
    blk.set_modules_to_forward_prefetch(list(model.blocks[i + 1 : i + 3]))
    if i > 0:
        blk.set_modules_to_backward_prefetch([model.blocks[i - 1]])
for step in range(2):
    x, y = batch(2 * B)
    loss = loss_of(x, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("prefetch step", step, loss.item(), norm.full_tensor().item())
report("prefetch")

model.eval()
with torch.no_grad():
    x, y = batch(2 * B)
    print("eval loss", loss_of(x, y).item())
report("eval", reset=False)
dist.destroy_process_group()
