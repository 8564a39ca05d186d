"""torchtitan's order of parallelisms on one rank, for a Llama-style decoder (8 layers, d 768, 12 heads,
RMSNorm, rotary embeddings, SwiGLU 2048, vocab 32000, untied head, seq 1024, batch 4): `apply_ac`
(every block in `checkpoint_wrapper`, non-reentrant), then `apply_compile` (each block replaced by
`torch.compile(block, fullgraph=True)` through `register_module`), then `apply_fsdp` (`fully_shard`
per block with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, the last block with
`reshard_after_forward=False`, then the root). The compiled blocks trace an activation-checkpointed
body between FSDP2's pre- and post-forward hooks. AdamW (foreach, weight decay 0.1), `clip_grad_norm_`
(1.0) over DTensor gradients, 3 steps; then an evaluation of 2 batches under `torch.no_grad()` (a
recompile: no checkpointing, no saved activations); then 1 more step. Process group:
init_process_group('nccl') with rank 0 of 1 and MASTER_ADDR/PORT set by the script. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")
torch.manual_seed(2543)

D, H, L, FF, V, T, B = 768, 12, 8, 2048, 32000, 1024, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def rope_cache(t, hd):
    freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(t).float(), freqs)
    return torch.polar(torch.ones_like(ang), ang)


def apply_rope(x, freqs):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs.view(1, x.shape[1], 1, -1)).flatten(3)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv = (nn.Linear(D, D, bias=False) for _ in range(3))
        self.wo = nn.Linear(D, D, bias=False)

    def forward(self, x, freqs):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, H, D // H)
        k = self.wk(x).view(b, t, H, D // H)
        v = self.wv(x).view(b, t, H, D // H)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(o.transpose(1, 2).reshape(b, t, D))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.attention, self.feed_forward = Attention(), FeedForward()

    def forward(self, x, freqs):
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, D)
        self.register_buffer("freqs_cis", rope_cache(T, D // H), persistent=False)
        self.layers = nn.ModuleDict({str(i): TransformerBlock() for i in range(L)})
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.output = nn.Linear(D, V, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


with torch.device("cuda"):
    model = Transformer()
# apply_ac
for layer_id, block in model.layers.named_children():
    model.layers.register_module(layer_id, checkpoint_wrapper(block, preserve_rng_state=False))
# apply_compile
for layer_id, block in model.layers.named_children():
    model.layers.register_module(layer_id, torch.compile(block, fullgraph=True))
# apply_fsdp
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for i, (layer_id, block) in enumerate(model.layers.items()):
    fully_shard(block, mp_policy=mp, reshard_after_forward=i < L - 1)
fully_shard(model, mp_policy=mp)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
tokens = torch.randint(0, V, (B, T + 1), device="cuda")
inp, tgt = tokens[:, :-1], tokens[:, 1:]
report("setup")


def step():
    logits = model(inp)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt.flatten(0, 1))
    del logits
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    return loss.detach()


for _ in range(3):
    last = step()
report("train_ac_compiled_fsdp2_blocks")

model.eval()
with torch.no_grad():
    total = 0.0
    for _ in range(2):
        total += float(F.cross_entropy(model(inp).flatten(0, 1).float(), tgt.flatten(0, 1)))
model.train()
print("eval loss", total / 2)
report("eval_no_grad")

last = step()
print("loss", float(last))
report("train_after_eval")
dist.destroy_process_group()
