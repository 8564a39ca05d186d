"""Torchtitan-style tensor parallelism with sequence parallelism on a torchrun world of one GPU: a 1-D
device mesh ("tp") from `init_device_mesh`, a Llama-style decoder (6 blocks, d 1536, 12 heads, SwiGLU
4096, vocab 49152: 0.40 B parameters) parallelized with `parallelize_module`: the embedding
RowwiseParallel to a sequence-sharded output, the norms SequenceParallel, attention and feed-forward
behind PrepareModuleInput (Shard(1) -> Replicate), wq/wk/wv/w1/w3 ColwiseParallel, wo/w2
RowwiseParallel back to Shard(1), the output projection ColwiseParallel to a vocab-sharded DTensor
(`use_local_output=False`) and the cross entropy under `loss_parallel()`. AdamW (foreach) over the
DTensor parameters, bf16 autocast. Without RANK in the environment the script makes a world of one itself.
Phases: (0) group, mesh, model on the GPU, parallelized; (1) 3 steps of 4 x 1024; (2) DTensor
bookkeeping as users write it: `distribute_tensor` of a 8192 x 8192 fp32 matrix as Shard(0),
`redistribute` to Replicate and to Shard(1), a Partial DTensor from `from_local` reduced by
`redistribute(Replicate())`, `full_tensor()`, and a gathered copy of every parameter
(`full_tensor()` per DTensor) summed into a checksum; (3) evaluation of 2 batches under no_grad with
`loss_parallel()`. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
else:
    dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
tp = dist.get_world_size()
mesh = init_device_mesh("cuda", (tp,), mesh_dim_names=("tp",))

torch.manual_seed(3393)
V, D, H, FF, L, T, B = 49152, 1536, 12, 4096, 6, 1024, 4
HD = D // H


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(D, D, bias=False)
        self.wk = nn.Linear(D, D, bias=False)
        self.wv = nn.Linear(D, D, bias=False)
        self.wo = nn.Linear(D, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, -1, HD).transpose(1, 2)  # local heads: H // tp
        k = self.wk(x).view(b, t, -1, HD).transpose(1, 2)
        v = self.wv(x).view(b, t, -1, HD).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(a.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(D), nn.RMSNorm(D)
        self.attention, self.feed_forward = Attention(), FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.output = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


model = Transformer().cuda()
parallelize_module(
    model,
    mesh,
    {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    },
)
for block in model.layers:
    parallelize_module(
        block,
        mesh,
        {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        },
    )
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
torch.cuda.reset_peak_memory_stats()

for _ in range(3):
    x = torch.randint(0, V, (B, T), device="cuda")
    y = torch.randint(0, V, (B, T), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        pred = model(x)
    with loss_parallel():
        loss = F.cross_entropy(pred.flatten(0, 1).float(), y.flatten())
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del pred
print("train loss", loss.full_tensor().item() if isinstance(loss, DTensor) else loss.item())
del loss
torch.cuda.reset_peak_memory_stats()

big = torch.randn(8192, 8192, device="cuda")
rows = distribute_tensor(big, mesh, [Shard(0)])
rep = rows.redistribute(mesh, [Replicate()])
cols = rep.redistribute(mesh, [Shard(1)])
part = DTensor.from_local(big.mul(0.5), mesh, [Partial()], run_check=False)
summed = part.redistribute(mesh, [Replicate()]).full_tensor()
checksum = torch.zeros((), device="cuda")
for p in model.parameters():
    checksum += p.full_tensor().float().abs().sum()
print("dtensor", tuple(cols.to_local().shape), float(summed.sum() - big.sum() * 0.5 * tp), float(checksum))
del big, rows, rep, cols, part, summed
torch.cuda.reset_peak_memory_stats()

model.eval()
total = 0.0
with torch.no_grad():
    for _ in range(2):
        x = torch.randint(0, V, (B, T), device="cuda")
        y = torch.randint(0, V, (B, T), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = model(x)
        with loss_parallel():
            total += F.cross_entropy(pred.flatten(0, 1).float(), y.flatten()).full_tensor().item()
print("eval loss", total / 2)
dist.destroy_process_group()
