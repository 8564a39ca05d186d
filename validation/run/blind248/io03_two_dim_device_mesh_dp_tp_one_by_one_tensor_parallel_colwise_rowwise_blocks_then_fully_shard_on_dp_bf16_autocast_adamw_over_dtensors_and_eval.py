"""torchtitan-style 2-D parallelism on one GPU: `init_device_mesh("cuda", (1, 1), mesh_dim_names=("dp",
"tp"))`; a GPT-style model (6 blocks, d 1024, 16 heads, MLP 4096, vocab 32000) built on the GPU with
separate q/k/v projections, each block tensor-parallel over the "tp" mesh with `parallelize_module`
(`ColwiseParallel` on q, k, v and the MLP's up projection, `RowwiseParallel` on the attention output
and the MLP's down projection), then `fully_shard` on every block and the root over the "dp" mesh.
fp32 parameters, the forward under bf16 autocast, AdamW (foreach) over the DTensors (no clipping:
clip_grad_norm_ cannot stack norms of the 1-D and 2-D meshes' parameters); batch 8 x 1024, 3 steps;
then an evaluation of 2 batches under no_grad. Process group: init_process_group('nccl') with rank 0
of 1 and MASTER_ADDR/PORT set by the script. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")

torch.manual_seed(2483)
V, D, H, L, T, B = 32000, 1024, 16, 6, 1024, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.o = nn.Linear(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds its share of the heads
        q, k, v = (p(x).view(b, t, -1, D // H).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn, self.mlp = Attention(), MLP()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


mesh = init_device_mesh("cuda", (1, 1), mesh_dim_names=("dp", "tp"))
model = GPT().cuda()
plan = {
    "attn.q": ColwiseParallel(),
    "attn.k": ColwiseParallel(),
    "attn.v": ColwiseParallel(),
    "attn.o": RowwiseParallel(),
    "mlp.up": ColwiseParallel(),
    "mlp.down": RowwiseParallel(),
}
for blk in model.blocks:
    parallelize_module(blk, mesh["tp"], plan)
    fully_shard(blk, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
idx = torch.randint(0, V, (B, T), device="cuda")
tgt = torch.randint(0, V, (B, T), device="cuda")
report("setup_2d_parallel")

for step in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
    loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))
    del logits
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
    if step == 0:
        report("first_step")
report("train_steps_2_3")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        pred = model(torch.randint(0, V, (B, T), device="cuda")).argmax(-1)
        del pred
report("eval_no_grad")

dist.destroy_process_group()
