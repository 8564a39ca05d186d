"""Compiled autograd through its context manager, as torchtitan and PyTorch's tests turn it on: the
model compiled with `torch.compile(model)` and each `loss.backward()` run under
`torch._dynamo.compiled_autograd._enable(torch.compile(backend="inductor"))`. A Llama-style decoder
written by hand (6 layers, width 1024, 16 heads, RMSNorm, rotary embeddings, SDPA causal, SwiGLU
2816, vocabulary 32000, untied head), fp32 parameters under bf16 autocast, fused AdamW, gradient
clipping (`clip_grad_norm_`, foreach). Each step accumulates two micro-batches of 4 x 1024: the first
backward finds no gradients (compiled autograd's AccumulateGrad assigns them), the second adds into
them (another capture). Three steps with `zero_grad(set_to_none=True)`; then two with
`set_to_none=False` (gradients kept as zeros: both backwards accumulate); then an evaluation loss
under no_grad and autocast at batch 8. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo import compiled_autograd

torch.manual_seed(25704)
V, D, L, H, F_, T, MB = 32000, 1024, 6, 16, 2816, 1024, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def rope_tables():
    inv = 1.0 / (10000 ** (torch.arange(0, D // H, 2, dtype=torch.float32) / (D // H)))
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    return ang.cos().cuda(), ang.sin().cuda()


COS, SIN = rope_tables()


def rope(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = COS[: x.shape[-2]], SIN[: x.shape[-2]]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(D, F_, bias=False), nn.Linear(D, F_, bias=False)
        self.w2 = nn.Linear(F_, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.n1(x)
        q, k, v = (w(h).view(b, t, H, D // H).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.out = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


model = Llama().cuda()
cmodel = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)


def batch(b):
    idx = torch.randint(0, V, (b, T), device="cuda")
    return idx, torch.roll(idx, -1, dims=1)


def train_step(set_to_none):
    for _ in range(2):
        idx, tgt = batch(MB)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = cmodel(idx)
        loss = F.cross_entropy(logits.float().view(-1, V), tgt.view(-1)) / 2
        del logits
        with compiled_autograd._enable(torch.compile(backend="inductor")):
            loss.backward()
        del loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    opt.zero_grad(set_to_none=set_to_none)


report("setup")

train_step(True)
report("step0_two_micro_batches_compile")

for _ in range(2):
    train_step(True)
report("steps1_2_set_to_none")

for _ in range(2):
    train_step(False)
report("steps3_4_zero_grads_kept")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    idx, tgt = batch(8)
    loss = F.cross_entropy(cmodel(idx).float().view(-1, V), tgt.view(-1))
    del loss
report("eval_no_grad_bf16_batch8")
