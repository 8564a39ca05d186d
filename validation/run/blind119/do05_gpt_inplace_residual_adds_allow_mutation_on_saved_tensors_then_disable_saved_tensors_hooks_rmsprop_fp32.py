"""A GPT (12 layers, width 1024, 16 heads, vocab 32,000) written with in-place residual adds
(`x += attn(ln1(x))`, `x += mlp(ln2(x))`), which plain autograd rejects because
LayerNorm saved x; the training steps run inside torch.autograd.graph.allow_mutation_on_saved_tensors(),
which clones each saved tensor when it is mutated; fp32, batch 8 x 1,024, RMSprop (foreach), 3 steps;
then the same model with out-of-place residuals for two steps under
torch.autograd.graph.disable_saved_tensors_hooks (a library's guard against hooks), and a no_grad
evaluation; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11905)
LAYERS, D, H, V = (2, 128, 4, 1000) if SMALL else (12, 1024, 16, 32000)
B, T = (2, 64) if SMALL else (8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)
        self.inplace = True

    def attn(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(b, n, H, D // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, n, D))

    def forward(self, x):
        if self.inplace:
            x += self.attn(self.ln1(x))
            x += self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return x
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Parameter(torch.randn(T, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        for p in self.parameters():
            if p.dim() == 2 and p is not self.wpe:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * LAYERS))

    def forward(self, ids):
        x = self.wte(ids) + self.wpe[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT().to(device)
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-4, alpha=0.99, momentum=0.9, foreach=True)


def step():
    ids = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def report(what):
    if device == "cuda":
        print(
            f"{what} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


report("model")
for i in range(3):
    with torch.autograd.graph.allow_mutation_on_saved_tensors():
        loss = step()
    if i == 0:
        report(f"first in-place step loss {loss:.3f}")
report(f"in-place steps loss {loss:.3f}")
for blk in model.blocks:
    blk.inplace = False
with torch.autograd.graph.disable_saved_tensors_hooks(
    "this training loop does not support saved tensor hooks"
):
    for _ in range(2):
        loss = step()
report(f"out-of-place steps loss {loss:.3f}")
model.eval()
with torch.no_grad():
    ids = torch.randint(0, V, (2 * B, T), device=device)
    nll = F.cross_entropy(model(ids[:, :-1]).reshape(-1, V), ids[:, 1:].reshape(-1))
report(f"eval nll {nll.item():.3f}")
