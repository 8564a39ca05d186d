"""A GPT whose parameters are of two dtypes: bf16 attention and MLP matrices, fp32 RMSNorm weights,
fp32 token embedding and fp32 untied LM head (the head's input cast up), 8 blocks of 1024 wide,
16 heads, a 32,000-symbol vocabulary; two optimizers: fused AdamW over the blocks and norms (bf16 and
fp32 tensors in one group set: no decay for norms) and foreach Adagrad (lr decay, initial
accumulator 0.1) over the embedding and head; clip_grad_norm_ across both dtypes (foreach), a
SequentialLR of a LinearLR warm-up and a CosineAnnealingLR for each optimizer; batch 8 x 1024,
3 steps, then a no_grad evaluation of batch 16 returning fp32 logits; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10704)
V, D, H, NL, B, L = (128, 64, 4, 2, 2, 32) if SMALL else (32000, 1024, 16, 8, 8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
bf16 = torch.bfloat16


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (self.weight * h).to(x.dtype)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.qkv = nn.Linear(D, 3 * D, bias=False, dtype=bf16)
        self.o = nn.Linear(D, D, bias=False, dtype=bf16)
        self.up = nn.Linear(D, 8 * D // 3 * 2, bias=False, dtype=bf16)
        self.down = nn.Linear(8 * D // 3, D, bias=False, dtype=bf16)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, D))
        gate, up = self.up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(NL))
        self.norm = RMSNorm()
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids):
        x = self.emb(ids).to(bf16)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).float())


model = GPT().to(device)
norms = [p for n, p in model.named_parameters() if "blocks" in n and p.dim() == 1] + [model.norm.weight]
mats = [p for n, p in model.named_parameters() if "blocks" in n and p.dim() == 2]
fused = device == "cuda"
opt_body = torch.optim.AdamW(
    [{"params": mats, "weight_decay": 0.1}, {"params": norms, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=fused,
)
opt_io = torch.optim.Adagrad(
    [model.emb.weight, model.head.weight], lr=1e-2, lr_decay=1e-4, initial_accumulator_value=0.1, foreach=True
)
scheds = [
    torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10),
        ],
        milestones=[2],
    )
    for opt in (opt_body, opt_io)
]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    data = torch.randint(0, V, (B, L + 1), device=device)
    logits = model(data[:, :-1])
    loss = F.cross_entropy(logits.view(-1, V), data[:, 1:].reshape(-1))
    loss.backward()
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    for opt in (opt_body, opt_io):
        opt.step()
        opt.zero_grad(set_to_none=True)
    for s in scheds:
        s.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} ppl {math.exp(min(loss.item(), 20)):.1f}"
            f" gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del data, logits, loss, gnorm
model.eval()
with torch.no_grad():
    logits = model(torch.randint(0, V, (16, L), device=device))
if device == "cuda":
    print(
        f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
