"""FSDP2 first, then the whole model compiled: a GPT-2-style decoder (10 layers, d 640, 10 heads,
MLP 2560 with tanh GELU, learned positions, vocab 50257, tied head, seq 512, batch 8) with `fully_shard`
per block and on the root under `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, then
`model = torch.compile(model)`: dynamo skips FSDP2's module hooks (`skip_fsdp_hooks`, on by default),
so the compiled forward breaks around each block's all-gather and reshard. Gradient accumulation with
`model.set_requires_gradient_sync(False)` on the first of 2 micro-batches and True on the second
(the reduce-scatter once per step), AdamW (fused), 3 steps; then an evaluation under `torch.no_grad()`
(a recompile) of 3 batches, logits' argmax only; then 2 steps with `reshard_after_forward` off on
every block (`set_reshard_after_forward(False)` from the root, recursing: each block's bf16 unsharded
parameters stay from its forward to its backward). Process group: init_process_group('nccl') with rank 0 of 1 and
MASTER_ADDR/PORT set by the script. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")
torch.manual_seed(2544)

D, H, L, V, T, B, MICRO = 640, 10, 10, 50257, 512, 8, 2


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


model = GPT2().cuda()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.h:
    fully_shard(block, mp_policy=mp)
fully_shard(model, mp_policy=mp)
fsdp_model = model
model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
data = torch.randint(0, V, (MICRO, B, T + 1), device="cuda")
report("setup")


def steps(n):
    for _ in range(n):
        for m in range(MICRO):
            fsdp_model.set_requires_gradient_sync(m == MICRO - 1)
            x, y = data[m, :, :-1], data[m, :, 1:]
            loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten(0, 1)) / MICRO
            loss.backward()
            del loss
        opt.step()
        opt.zero_grad(set_to_none=True)


steps(3)
report("train_fsdp2_then_compile_accum")

model.eval()
with torch.no_grad():
    hits = 0
    for i in range(3):
        x = data[i % MICRO, :, :-1]
        hits += int((model(x).argmax(-1) == data[i % MICRO, :, 1:]).sum())
model.train()
print("eval hits", hits)
report("eval_no_grad")

fsdp_model.set_reshard_after_forward(False)
steps(2)
report("train_no_reshard_after_forward")
dist.destroy_process_group()
