"""A Llama-style decoder (16 blocks of RMSNorm, rotary causal SDPA attention and SwiGLU, d 2048,
ffn 5632, vocab 32000, untied embeddings: 0.95 B parameters) written as torchtitan writes it, on
one GPU before scaling out: init_process_group('nccl', rank=0, world_size=1) with MASTER_ADDR/PORT
in the environment (a free port), the model built on the meta device, FSDP2's fully_shard on every
block and on the root with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) and
reshard_after_forward=True, then to_empty(device='cuda') and the weights initialised in place;
AdamW (foreach, weight decay 0.1), gradients clipped to 1.0 (over DTensors); batch 4 x 2048,
2 steps; then 2 steps with the blocks' reshard_after_forward set to False; then an evaluation of
2 batches of 8 under no_grad; 6 phases."""

import math
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14803)
D, FF, L, H, V = (64, 128, 2, 4, 256) if SMALL else (2048, 5632, 16, 16, 32000)
B, T, EB = (2, 32, 2) if SMALL else (4, 2048, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ["MASTER_ADDR"] = "127.0.0.1"
dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
if device == "cuda":
    torch.cuda.set_device(0)


def rope_cache(t, hd, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = torch.outer(torch.arange(t, dtype=torch.float32), inv)
    return torch.cos(f), torch.sin(f)


def apply_rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.RMSNorm(D, eps=1e-5)
        self.wqkv = nn.Linear(D, 3 * D, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.ffn_norm = nn.RMSNorm(D, eps=1e-5)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).view(b, t, 3, H, D // H).unbind(2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.out = nn.Linear(D, V, bias=False)

    def init_weights(self):
        nn.init.normal_(self.tok.weight, std=1.0)
        for i, blk in enumerate(self.layers):
            std = 0.02 / math.sqrt(2 * (i + 1))
            for lin in (blk.wqkv, blk.w1, blk.w3):
                nn.init.trunc_normal_(lin.weight, std=0.02)
            for lin in (blk.wo, blk.w2):
                nn.init.trunc_normal_(lin.weight, std=std)
            blk.attn_norm.reset_parameters()
            blk.ffn_norm.reset_parameters()
        self.norm.reset_parameters()
        nn.init.trunc_normal_(self.out.weight, std=D**-0.5)

    def forward(self, ids):
        cos, sin = rope_cache(ids.shape[1], D // H)
        cos, sin = cos.to(ids.device)[:, None, :], sin.to(ids.device)[:, None, :]
        x = self.tok(ids)
        for blk in self.layers:
            x = blk(x, cos, sin)
        return self.out(self.norm(x))


with torch.device("meta"):
    model = Decoder()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for blk in model.layers:
    fully_shard(blk, mp_policy=mp, reshard_after_forward=True)
fully_shard(model, mp_policy=mp)
model.to_empty(device=device)
with torch.no_grad():
    model.init_weights()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(step):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.full_tensor().item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
for step in range(2):
    train_step(step)
# keep the blocks' bf16 parameters gathered between forward and backward
for blk in model.layers:
    blk.set_reshard_after_forward(False)
for step in range(2, 4):
    train_step(step)

model.eval()
total = 0.0
with torch.no_grad():
    for _ in range(2):
        ids = torch.randint(0, V, (EB, T + 1), device=device)
        logits = model(ids[:, :-1])
        total += F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten()).item()
        del logits
if device == "cuda":
    print(f"eval loss {total / 2:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
