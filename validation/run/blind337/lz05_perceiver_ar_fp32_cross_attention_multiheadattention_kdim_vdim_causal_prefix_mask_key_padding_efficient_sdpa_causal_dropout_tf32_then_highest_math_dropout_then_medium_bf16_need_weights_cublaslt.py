"""A Perceiver AR language model in fp32: a long context of 2048 tokens embedded at width 512 is read by
the last 256 positions (the latents, projected to width 1024) through one `nn.MultiheadAttention`
cross-attention with kdim=vdim=512 (separate q/k/v projection weights), a boolean (256, 2048) causal
prefix `attn_mask` (latent i sees context positions up to 1792 + i) and a boolean `key_padding_mask`
for left-padded documents; then 8 latent self-attention blocks call
`F.scaled_dot_product_attention(..., is_causal=True, dropout_p=0.1)` in training; batch 16,
vocabulary 32000, AdamW (foreach) with a cosine schedule.

Phases: 0 model and optimizer; 1 two training steps in fp32 with `torch.set_float32_matmul_precision("high")`
(TF32) and the latent attention restricted to `sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION])`
(the memory-efficient kernel's own dropout), the cross-attention with need_weights=False; 2 one step
with `set_float32_matmul_precision("highest")` and `sdpa_kernel([SDPBackend.MATH])` (dropout through
the math path); 3 evaluation with precision "medium", `preferred_blas_library("cublaslt")` and
`allow_bf16_reduced_precision_reduction = False` under bf16 autocast and no_grad, the cross-attention
called with need_weights=True (head-averaged (B, 256, 2048) maps) to compute how far back each latent
looks (attention-weighted distance)."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(3375)
gen = torch.Generator().manual_seed(3375)
dev = "cuda"
V, DC, D, H, L, CTX, NL, B = 32000, 512, 1024, 16, 8, 2048, 256, 16
PREFIX = CTX - NL


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class LatentBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * D, D))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        p = 0.1 if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
        return x + self.mlp(self.n2(x))


class PerceiverAR(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, DC)
        self.pos = nn.Embedding(CTX, DC)
        self.to_latent = nn.Linear(DC, D)
        self.ctx_norm = nn.LayerNorm(DC)
        self.cross = nn.MultiheadAttention(D, H, dropout=0.1, batch_first=True, kdim=DC, vdim=DC)
        self.blocks = nn.ModuleList(LatentBlock() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)
        i = torch.arange(NL)[:, None]
        j = torch.arange(CTX)[None, :]
        self.register_buffer("prefix_mask", j > PREFIX + i, persistent=False)

    def forward(self, ids, pad, need_weights=False):
        ctx = self.tok(ids) + self.pos.weight
        latents = self.to_latent(ctx[:, PREFIX:])
        kv = self.ctx_norm(ctx)
        a, w = self.cross(
            latents,
            kv,
            kv,
            attn_mask=self.prefix_mask,
            key_padding_mask=pad,
            need_weights=need_weights,
        )
        x = latents + a
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)), w


def batch():
    lengths = torch.randint(CTX // 2, CTX + 1, (B,), generator=gen).to(dev)
    ids = torch.randint(0, V, (B, CTX + 1), device=dev)
    pad = torch.arange(CTX, device=dev)[None, :] < (CTX - lengths)[:, None]
    return ids, pad


model = PerceiverAR().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / 3)))
report("model and optimizer")


def train_step():
    ids, pad = batch()
    logits, _ = model(ids[:, :-1], pad)
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, PREFIX + 1 :].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


torch.set_float32_matmul_precision("high")
with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
    for step in range(2):
        print(f"tf32 step {step} loss {train_step():.4f}")
report("fp32 tf32 training efficient attention causal dropout")

torch.set_float32_matmul_precision("highest")
with sdpa_kernel([SDPBackend.MATH]):
    print(f"highest step loss {train_step():.4f}")
report("fp32 highest training math attention dropout")

torch.set_float32_matmul_precision("medium")
torch.backends.cuda.preferred_blas_library("cublaslt")
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
model.eval()
ids, pad = batch()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    logits, maps = model(ids[:, :-1], pad, need_weights=True)
    distance = PREFIX + torch.arange(NL, device=dev)[:, None] - torch.arange(CTX, device=dev)[None, :]
    lookback = (maps.float() * distance.clamp(min=0)).sum(-1)
print("maps", tuple(maps.shape), "mean lookback", round(lookback.mean().item(), 2))
report("bf16 eval need_weights averaged maps cublaslt")
