"""µP (maximal update parametrization) GPT-2-like model with schedule-free AdamW written by hand.

Model: 12 blocks of width 1536 (base width 256: width multiplier 6), 12 heads of 128, LayerNorm with
bias, GELU(tanh) MLP 4x, learned positions, vocabulary 50,257 (not padded) with the lm_head tied to the
token embedding. µP: attention logits scaled 1/d_head (SDPA scale=), output logits divided by the width
multiplier, hidden matrices initialised with std 0.02/sqrt(mult) and given the Adam learning rate divided
by the multiplier, embeddings / norms / biases at the base learning rate (per-group learning rates).

Optimizer: schedule-free AdamW (Defazio et al. 2024) by hand with torch._foreach ops: the parameters hold
y, the state holds z and the second moment; each step interpolates y towards z by c = 1/(t+1), adds the
normalized gradient (plus weight decay on y) with lr * (beta1 * (1 - c) - 1) and takes z down by lr;
eval() and train() move the parameters between y and x by lerp with z.

Phases: the first step (4 micro-batches of 4 x 1024 under bf16 autocast, loss / 4); 3 more steps;
evaluation at the x point (opt.eval()) under inference_mode at batch 16, then opt.train(); then every
block under reentrant torch.utils.checkpoint at batch 16 without accumulation, 3 steps. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2144)
if SMALL:
    VOCAB, D, BASE, LAYERS, HEADS, CTX, MICRO = 500, 192, 64, 2, 3, 64, 2
else:
    VOCAB, D, BASE, LAYERS, HEADS, CTX, MICRO = 50257, 1536, 256, 12, 12, 1024, 4
HD = D // HEADS
MULT = D / BASE
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / HD)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class MuGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(CTX, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.checkpointing = False
        for name, p in self.named_parameters():
            if p.ndim == 2 and name.startswith("blocks"):
                nn.init.normal_(p, std=0.02 / math.sqrt(MULT))
            elif p.ndim == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            if self.checkpointing:
                x = checkpoint(blk, x, use_reentrant=True)
            else:
                x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight) / MULT
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


class ScheduleFreeAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.k = 0
        self.train_mode = True

    @torch.no_grad()
    def eval(self):
        if self.train_mode:
            for group in self.param_groups:
                ps = [p for p in group["params"] if "z" in self.state[p]]
                zs = [self.state[p]["z"] for p in ps]
                torch._foreach_lerp_(ps, zs, 1 - 1 / group["betas"][0])
        self.train_mode = False

    @torch.no_grad()
    def train(self):
        if not self.train_mode:
            for group in self.param_groups:
                ps = [p for p in group["params"] if "z" in self.state[p]]
                zs = [self.state[p]["z"] for p in ps]
                torch._foreach_lerp_(ps, zs, 1 - group["betas"][0])
        self.train_mode = True

    @torch.no_grad()
    def step(self):
        self.k += 1
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, ckp1 = group["lr"], 1 / self.k
            ps = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in ps]
            for p in ps:
                if "z" not in self.state[p]:
                    self.state[p]["z"] = p.clone()
                    self.state[p]["exp_avg_sq"] = torch.zeros_like(p)
            zs = [self.state[p]["z"] for p in ps]
            vs = [self.state[p]["exp_avg_sq"] for p in ps]
            torch._foreach_mul_(vs, beta2)
            torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(vs)
            torch._foreach_div_(denom, math.sqrt(1 - beta2**self.k))
            torch._foreach_add_(denom, group["eps"])
            gn = torch._foreach_div(grads, denom)
            del denom
            if group["weight_decay"]:
                torch._foreach_add_(gn, ps, alpha=group["weight_decay"])
            torch._foreach_lerp_(ps, zs, ckp1)
            torch._foreach_add_(ps, gn, alpha=lr * (beta1 * (1 - ckp1) - 1))
            torch._foreach_add_(zs, gn, alpha=-lr)


model = MuGPT().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
LR = 3e-3
hidden = [p for n, p in model.blocks.named_parameters() if p.ndim == 2]
other = [p for n, p in model.named_parameters() if not (n.startswith("blocks") and p.ndim == 2)]
opt = ScheduleFreeAdamW(
    [
        dict(params=hidden, lr=LR / MULT, weight_decay=0.1),
        dict(params=other, lr=LR, weight_decay=0.0),
    ],
    betas=(0.9, 0.95),
)


def batch(n):
    idx = torch.randint(0, VOCAB, (n, CTX + 1), device=device)
    return idx[:, :-1], idx[:, 1:]


def train_step(micro, n):
    total = 0.0
    for _ in range(micro):
        x, y = batch(n)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(x, y) / micro
        loss.backward()
        total += loss.item()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


model.train()
opt.train()
print(f"step 0 loss {train_step(4, MICRO):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(4, MICRO)
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
opt.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x, y = batch(4 * MICRO)
    print(f"eval loss at x {model(x, y).item():.4f}")
opt.train()
report("eval")

model.train()
model.checkpointing = True
for i in range(3):
    print(f"checkpointed step {i} loss {train_step(1, 4 * MICRO):.4f}")
report("checkpointing")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
