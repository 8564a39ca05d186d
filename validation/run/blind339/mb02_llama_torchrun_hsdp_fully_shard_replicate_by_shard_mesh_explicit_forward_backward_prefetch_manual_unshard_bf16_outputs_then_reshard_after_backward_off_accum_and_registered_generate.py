"""A torchrun-style Llama decoder under FSDP2 as hybrid sharding (HSDP) on one GPU: a 2-D device mesh
("replicate", "shard") of 1 x 1 from `init_device_mesh`, `fully_shard(mesh=...)` per block and on the
root, MixedPrecisionPolicy with bf16 parameters, fp32 reduction and bf16 outputs, explicit prefetching
(`set_modules_to_forward_prefetch` of the next two blocks, `set_modules_to_backward_prefetch` of the
previous two) and the root's `unshard(async_op=True)` before each forward. The model: 8 blocks of
RMSNorm, grouped-query causal SDPA (d 2048, 16 heads, 4 KV heads, rotary) and SwiGLU (5632), vocab 32000
(0.49 B parameters), AdamW (foreach). Without RANK in the environment the script makes a world of one
itself (MASTER_ADDR/PORT set, a free port).
Phases: (0) group, mesh, model built on the meta device, sharded, `to_empty` + init on the GPU;
(1) 2 steps of 2 x 1024 with explicit prefetching; (2) 2 steps of 2 micro-batches each with
`set_reshard_after_backward(False)` and `set_requires_gradient_sync(False)` on the first micro-batch,
both back on for the last; (3) `generate`, registered with `register_fsdp_forward_method`, greedy
decoding of 32 tokens for 4 prompts of 128 (no KV cache: the whole prefix each step) under no_grad.
4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
world = dist.get_world_size()
mesh = init_device_mesh("cuda", (1, world), mesh_dim_names=("replicate", "shard"))

torch.manual_seed(3392)
V, D, H, KV, FF, L, T, B = 32000, 2048, 16, 4, 5632, 8, 1024, 2
HD = D // H


def rope(t, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, HD, 2, device="cuda", dtype=torch.float32) / HD)
    f = torch.outer(torch.arange(t, device="cuda", dtype=torch.float32), inv)
    return torch.cos(f), torch.sin(f)


def apply_rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(D), nn.RMSNorm(D)
        self.wq = nn.Linear(D, D, bias=False)
        self.wkv = nn.Linear(D, 2 * KV * HD, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, H, HD).transpose(1, 2)
        k, v = self.wkv(h).view(b, t, 2, KV, HD).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.out = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        cos, sin = rope(idx.shape[1])
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.out(self.norm(x))

    @torch.no_grad()
    def generate(self, idx, n):
        for _ in range(n):
            nxt = self(idx)[:, -1].argmax(-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


with torch.device("meta"):
    model = Llama()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.bfloat16)
for layer in model.layers:
    fully_shard(layer, mesh=mesh, mp_policy=mp)
fully_shard(model, mesh=mesh, mp_policy=mp)
for i, layer in enumerate(model.layers):
    layer.set_modules_to_forward_prefetch(list(model.layers[i + 1 : i + 3]))
    layer.set_modules_to_backward_prefetch(list(reversed(model.layers[max(0, i - 2) : i])))
register_fsdp_forward_method(model, "generate")
model.to_empty(device="cuda")
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), foreach=True)
torch.cuda.reset_peak_memory_stats()


def loss_of(x, y):
    return F.cross_entropy(model(x).float().view(-1, V), y.view(-1))


data = [
    (torch.randint(0, V, (B, T), device="cuda"), torch.randint(0, V, (B, T), device="cuda")) for _ in range(2)
]
for x, y in data:
    model.unshard(async_op=True)
    loss = loss_of(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("prefetch loss", loss.item())
torch.cuda.reset_peak_memory_stats()

for _ in range(2):
    for i, (x, y) in enumerate(data):
        last = i == len(data) - 1
        model.set_reshard_after_backward(last)
        model.set_requires_gradient_sync(last)
        (loss_of(x, y) / len(data)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.reset_peak_memory_stats()

model.eval()
prompts = torch.randint(0, V, (4, 128), device="cuda")
out = model.generate(prompts, 32)
print("generated", tuple(out.shape))
dist.destroy_process_group()
