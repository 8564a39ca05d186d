"""Megatron-style tensor and sequence parallelism written by hand on PyTorch 2.11's differentiable
functional collectives, run as one rank (`init_process_group("nccl")`, RANK 0 / WORLD_SIZE 1, set by
the script; `init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))`). Column-parallel QKV and MLP-up
projections, row-parallel output projections whose partial sums go through
`torch.distributed._functional_collectives.all_reduce(x, "sum", mesh)` (2.11 registers its backward:
an all_reduce of the gradient), and, in the sequence-parallel half of the blocks, the LayerNorm'd
activations sharded along the sequence are gathered with `all_gather_tensor_autograd` before the
column-parallel matmul and the row-parallel result is scattered back with
`reduce_scatter_tensor_autograd` (their backwards a reduce-scatter and an all-gather). The GPT:
8 blocks of d 1,536 (12 heads, MLP 6,144, GELU), vocabulary 32,768, the vocabulary-parallel loss
summed with a differentiable all_reduce; batch 8 x 1,024 under bf16 autocast, AdamW (foreach), 5
steps; then 3 batches under no_grad. Fixed sizes throughout. 3 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("tp",))
TP = mesh.size()

torch.manual_seed(2653)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, D, H, MLP, L, T, B = 32768, 1536, 12, 6144, 8, 1024, 8


class Block(nn.Module):
    def __init__(self, seq_parallel):
        super().__init__()
        self.sp = seq_parallel
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D // TP)  # column parallel
        self.proj = nn.Linear(D // TP, D, bias=False)  # row parallel
        self.ln2 = nn.LayerNorm(D)
        self.up = nn.Linear(D, MLP // TP)
        self.down = nn.Linear(MLP // TP, D, bias=False)

    def enter(self, x):
        # sequence-parallel: (T / tp) rows per rank -> gathered along dim 1 before the column matmul
        return funcol.all_gather_tensor_autograd(x, gather_dim=1, group=mesh) if self.sp else x

    def leave(self, y):
        if self.sp:
            return funcol.reduce_scatter_tensor_autograd(y, "sum", scatter_dim=1, group=mesh)
        return funcol.all_reduce(y, "sum", mesh)

    def forward(self, x):
        b = x.shape[0]
        h = self.enter(self.ln1(x))
        t = h.shape[1]
        q, k, v = self.qkv(h).view(b, t, 3, H // TP, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D // TP)
        x = x + self.leave(self.proj(a))
        h = self.enter(self.ln2(x))
        return x + self.leave(self.down(F.gelu(self.up(h), approximate="tanh")))


class TPGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V // TP, D)  # vocabulary parallel
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.blocks = nn.ModuleList(Block(seq_parallel=i % 2 == 1) for i in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V // TP, bias=False)

    def forward(self, idx, targets):
        x = funcol.all_reduce(self.emb(idx), "sum", mesh) + self.pos
        for blk in self.blocks:
            if blk.sp:
                x = x.chunk(TP, dim=1)[dist.get_rank()]
            x = blk(x)
            if blk.sp:
                x = funcol.all_gather_tensor_autograd(x, gather_dim=1, group=mesh)
        logits = self.head(self.ln(x)).float()
        # vocabulary-parallel cross entropy: the max and the sum of exponentials all-reduced
        m = funcol.all_reduce(logits.detach().amax(-1, keepdim=True), "max", mesh)
        z = funcol.all_reduce((logits - m).exp().sum(-1, keepdim=True), "sum", mesh)
        picked = funcol.all_reduce(logits.gather(-1, targets[..., None]), "sum", mesh)
        return (z.log() + m - picked).mean()


model = TPGPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
print(sum(p.numel() for p in model.parameters()) / 1e6, "M parameters per rank, tp", TP)
report("tp_model_built")

for step in range(5):
    idx = torch.randint(0, V, (B, T + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("train_differentiable_collectives")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    total = 0.0
    for _ in range(3):
        idx = torch.randint(0, V, (B, T + 1), device="cuda")
        total += model(idx[:, :-1], idx[:, 1:]).item()
print("eval", round(total / 3, 3))
report("eval_no_grad")

dist.destroy_process_group()
