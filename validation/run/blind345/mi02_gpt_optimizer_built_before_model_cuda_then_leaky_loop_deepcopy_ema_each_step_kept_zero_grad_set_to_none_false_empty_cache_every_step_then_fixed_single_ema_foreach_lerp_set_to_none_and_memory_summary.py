"""A small GPT language model (8 blocks of 768, 12 heads, MLP 3,072, vocabulary 32,000, untied head,
hand-written blocks with `F.scaled_dot_product_attention(is_causal=True)`, fp32 weights under bf16
autocast, AdamW) trained the way a "my GPU memory keeps growing" post does it, then the way the replies
fix it.

The post's code builds AdamW before moving the model (`model.cuda()` after `AdamW(model.parameters())`:
harmless, `Module.cuda` swaps `param.data` in place, the optimizer keeps the same parameters and creates
its state on the device at the first step); clears gradients with `zero_grad(set_to_none=False)` (the
gradients stay allocated between steps); calls `torch.cuda.empty_cache()` after every step "to free
memory"; and makes its EMA model with `copy.deepcopy(model)` inside the loop, keeping every copy in a list
of snapshots (one more model per step). The fix: one EMA copy made before the loop (`requires_grad_(False)`)
and updated in place by `torch._foreach_lerp_`, `zero_grad()` (set_to_none=True by default), no
`empty_cache()` in the loop.

Phases: 0 AdamW built, then `model.cuda()` and the batches; 1 four leaky steps (allocated printed per step);
2 the snapshots dropped, `empty_cache()`, four fixed steps; 3 evaluation of the EMA model under `no_grad` +
bf16 autocast at twice the batch, `torch.cuda.memory_summary(abbreviated=True)` printed. 4 phases. Batch
8 x 1,024 tokens. Seeded."""

import copy
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3452)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, L, H, T, B, STEPS = 512, 64, 2, 4, 32, 2, 2
else:
    V, D, L, H, T, B, STEPS = 32000, 768, 8, 12, 1024, 8, 4


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} max reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def batch(n):
    data = torch.randint(0, V, (n, T + 1), device=device)
    return data[:, :-1], data[:, 1:]


def lm_loss(model, x, y):
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))


model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
model.cuda() if cuda else model.to(device)
n_params = sum(p.numel() for p in model.parameters())
same = all(a is b for a, b in zip(optimizer.param_groups[0]["params"], model.parameters(), strict=True))
print(f"{n_params / 1e6:.1f}M parameters, the optimizer holds the moved tensors: {same}")
report("AdamW built before model.cuda()")

snapshots = []
ema = None
for step in range(STEPS):
    x, y = batch(B)
    loss = lm_loss(model, x, y)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer.step()
    new_ema = copy.deepcopy(model)
    if ema is not None:
        with torch.no_grad():
            for pe, pn in zip(new_ema.parameters(), ema.parameters(), strict=True):
                pe.mul_(0.001).add_(pn, alpha=0.999)
    ema = new_ema
    snapshots.append(ema)
    if cuda:
        torch.cuda.empty_cache()
        mib = torch.cuda.memory_allocated() / 2**20
        print(f"  leaky step {step}: loss {loss.item():.3f} allocated {mib:.0f} MiB")
report("deepcopy EMA every step, zero_grad(set_to_none=False), empty_cache every step")

snapshots.clear()
del ema, new_ema
if cuda:
    torch.cuda.empty_cache()
ema = copy.deepcopy(model).requires_grad_(False)
ema_params, params = list(ema.parameters()), list(model.parameters())
for step in range(STEPS):
    x, y = batch(B)
    loss = lm_loss(model, x, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, params, 0.001)
    if cuda:
        mib = torch.cuda.memory_allocated() / 2**20
        print(f"  fixed step {step}: loss {loss.item():.3f} allocated {mib:.0f} MiB")
report("one EMA copy, foreach lerp, set_to_none")

ema.eval()
x, y = batch(2 * B)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    logits = ema(x)
    val = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1)).item()
print(f"EMA perplexity {math.exp(min(val, 20)):.1f}")
del logits
if cuda:
    print(torch.cuda.memory_summary(abbreviated=True))
report("EMA evaluation under no_grad")
