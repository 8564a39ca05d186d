"""torch.compile(model) in its default mode (Inductor, no CUDA graphs) on a small GPT language model
written by hand, as the nanoGPT-style tutorials train it: 4 pre-norm blocks of 768 wide, 12 heads
through F.scaled_dot_product_attention(is_causal=True), GELU MLP, dropout 0.1, tied input and output
embeddings over a 32,768-token vocabulary, context 1,024. Trained under bf16 autocast with fused AdamW
(weight decay on the 2-D weights only), linear warm-up then cosine decay, gradient clipping at 1.0,
batch 12, for 3 steps; then model.eval() and a validation pass of 2 batches of 24 under no_grad (a second
compiled graph, without dropout and without the backward). 5 phases: the model and optimizer, each
training step, the validation."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15501)
if SMALL:
    V, T, D, H, L, B, EB = 256, 32, 64, 4, 2, 2, 4
else:
    V, T, D, H, L, B, EB = 32768, 1024, 768, 12, 4, 12, 24
device = "cuda" if torch.cuda.is_available() else "cpu"


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)
        self.resid_drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.c_proj(y))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(
            nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D), nn.Dropout(0.1)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


model = GPT().to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
WARMUP, TOTAL = 2, 10


def lr_at(it):
    if it < WARMUP:
        return 6e-4 * (it + 1) / WARMUP
    return 6e-5 + 0.5 * (1 + math.cos(math.pi * (it - WARMUP) / (TOTAL - WARMUP))) * (6e-4 - 6e-5)


cmodel = torch.compile(model)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} params {sum(p.numel() for p in model.parameters())}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for it in range(3):
    for group in optimizer.param_groups:
        group["lr"] = lr_at(it)
    x = torch.randint(0, V, (B, T), device=device)
    y = torch.randint(0, V, (B, T), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        _, loss = cmodel(x, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {it} loss {loss.item():.4f} norm {norm.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss, norm
model.eval()
total = 0.0
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for _ in range(2):
        x = torch.randint(0, V, (EB, T), device=device)
        _, loss = cmodel(x, torch.roll(x, -1, dims=1))
        total += loss.item()
if device == "cuda":
    print(
        f"val loss {total / 2:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
