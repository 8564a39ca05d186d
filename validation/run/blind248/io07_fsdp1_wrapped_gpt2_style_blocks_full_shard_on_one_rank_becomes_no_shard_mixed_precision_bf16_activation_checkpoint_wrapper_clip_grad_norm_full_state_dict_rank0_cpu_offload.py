"""The classic FSDP (FSDP1, `FullyShardedDataParallel`) as Hugging Face accelerate and many training
scripts still use it, on one GPU: a GPT-2-style model (8 blocks of LayerNorm, causal SDPA attention
(d 1024, 16 heads) and a GELU MLP (4096), vocab 50304, tied embedding and head) wrapped per block by
`ModuleWrapPolicy` with `ShardingStrategy.FULL_SHARD` (FSDP switches to NO_SHARD at world size 1),
`MixedPrecision(param_dtype=bf16, reduce_dtype=fp32, buffer_dtype=fp32)`, `use_orig_params=True`,
`limit_all_gathers=True`, `device_id=0`; activation checkpointing applied to the blocks with
`apply_activation_checkpointing(checkpoint_wrapper, CheckpointImpl.NO_REENTRANT)`. AdamW (foreach),
`model.clip_grad_norm_(1.0)`, batch 8 x 1024, 3 steps; then a full state dict with
`FullStateDictConfig(offload_to_cpu=True, rank0_only=True)` saved with `torch.save` to a temporary
file; then an evaluation of 2 batches under no_grad. Process group: init_process_group('nccl') with
rank 0 of 1 and MASTER_ADDR/PORT set by the script. 4 phases."""

import functools
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.distributed.fsdp import (
    FullStateDictConfig,
    FullyShardedDataParallel,
    MixedPrecision,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")

torch.manual_seed(2487)
V, D, H, L, T, B = 50304, 1024, 16, 8, 1024, 8


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
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


model = FullyShardedDataParallel(
    GPT(),
    auto_wrap_policy=ModuleWrapPolicy({Block}),
    sharding_strategy=ShardingStrategy.FULL_SHARD,
    mixed_precision=MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32
    ),
    use_orig_params=True,
    limit_all_gathers=True,
    device_id=0,
)
apply_activation_checkpointing(
    model,
    checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
    check_fn=lambda m: isinstance(m, Block),
)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
idx = torch.randint(0, V, (B, T), device="cuda")
tgt = torch.randint(0, V, (B, T), device="cuda")
report("fsdp1_wrap")

for _ in range(3):
    logits = model(idx)
    loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))
    del logits
    loss.backward()
    model.clip_grad_norm_(1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_3_steps")

cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
    sd = model.state_dict()
with tempfile.TemporaryDirectory() as tmp:
    torch.save(sd, os.path.join(tmp, "model.pt"))
del sd
report("full_state_dict_rank0_cpu")

model.eval()
with torch.no_grad():
    for _ in range(2):
        pred = model(torch.randint(0, V, (B, T), device="cuda")).argmax(-1)
        del pred
report("eval_no_grad")

dist.destroy_process_group()
