"""A GPT (16 pre-norm blocks of width 1024, 16 heads, causal SDPA, GELU MLP, vocab 50,304, weight-tied
head) whose blocks run eagerly under torch.utils.checkpoint.checkpoint_sequential (4 segments,
non-reentrant) while the LM head and its cross entropy are one function compiled by torch.compile in
its default mode; fp16 autocast with GradScaler, AdamW (fused), batch 12 x 1024, 3 steps; then the
loss of 24 sequences under no_grad through the same compiled function (a second compile); 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11408)
V, D, H, NL, T, B, BE = (512, 64, 4, 4, 64, 2, 4) if SMALL else (50304, 1024, 16, 16, 1024, 12, 24)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        nn.init.normal_(self.proj.weight, std=0.02 / math.sqrt(2 * NL))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.Sequential(*[Block() for _ in range(NL)])
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        if self.training:
            x = checkpoint_sequential(self.blocks, 4, x, use_reentrant=False)
        else:
            x = self.blocks(x)
        return self.ln_f(x)


@torch.compile
def lm_head_loss(h, w, targets):
    logits = h @ w.t()
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), fused=device == "cuda")
scaler = torch.amp.GradScaler(device, init_scale=1024.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    idx = torch.randint(0, V, (B, T + 1), device=device)
    x, y = idx[:, :-1], idx[:, 1:]
    with torch.autocast(device, dtype=torch.float16):
        loss = lm_head_loss(model(x), model.wte.weight, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del idx, x, y, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    idx = torch.randint(0, V, (BE, T + 1), device=device)
    loss = lm_head_loss(model(idx[:, :-1]), model.wte.weight, idx[:, 1:])
if device == "cuda":
    print(
        f"eval loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
