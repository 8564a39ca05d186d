"""Hunting a NaN the way the PyTorch docs suggest: a GPT-style language model (hand-written, pre-LN,
8 layers, d 768, 12 heads, SDPA causal, GELU MLP, vocab 32,000 untied head), fp32 weights, AdamW
(lr 3e-4, foreach default), batch 12 x 512 tokens (synthetic, seeded).
Phase 1: one ordinary step (anomaly mode off), the baseline.
Phase 2: two steps inside `with torch.autograd.detect_anomaly():` (check_nan=True, the default): the
backward engine checks every Node's outputs for NaNs (`isnan(out)._is_any_true().item()`) as it goes,
and the forward records each Node's creation traceback.
Phase 3: `torch.autograd.set_detect_anomaly(True, check_nan=False)` (tracebacks only, no NaN checks) for
two steps, the loss and gradient norm checked by hand with `torch.isfinite`, then switched off again.
Phase 4: anomaly mode off, bf16 autocast, two steps with `clip_grad_norm_` (error_if_nonfinite=True).
Phase 5: evaluation under `torch.no_grad()` inside `detect_anomaly()` (no backward: nothing to check), at
batch 24, mean cross-entropy and top-1 accuracy.
5 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2881)
dev = "cuda"
V, D, H, L, T, B = 32000, 768, 12, 8, 512, 12


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
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
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, T, D))
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        for n, p in self.named_parameters():
            if n.endswith("out.weight") or n.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
data = torch.randint(0, V, (16, B, T + 1), device=dev)
print("params", sum(p.numel() for p in model.parameters()))


def step(i, autocast=False, clip=False):
    x, y = data[i, :, :-1], data[i, :, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, V).float(), y.reshape(-1))
    loss.backward()
    if clip:
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    else:
        gn = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach(), gn


loss, gn = step(0)
print("baseline loss", round(loss.item(), 4))
report("plain_step")

with torch.autograd.detect_anomaly():
    for i in range(1, 3):
        loss, gn = step(i)
        print("anomaly step", i, "loss", round(loss.item(), 4), "grad norm", round(gn.item(), 3))
report("detect_anomaly_check_nan")

torch.autograd.set_detect_anomaly(True, check_nan=False)
print("anomaly on", torch.is_anomaly_enabled(), "check nan", torch.is_anomaly_check_nan_enabled())
for i in range(3, 5):
    loss, gn = step(i)
    ok = bool(torch.isfinite(loss).item() and torch.isfinite(gn).item())
    print("traceback-only step", i, "finite", ok, "loss", round(loss.item(), 4))
torch.autograd.set_detect_anomaly(False)
report("set_detect_anomaly_no_nan_check")

for i in range(5, 7):
    loss, gn = step(i, autocast=True, clip=True)
    print("bf16 step", i, "loss", round(loss.item(), 4), "grad norm", round(gn.item(), 3))
report("anomaly_off_bf16_autocast")

model.eval()
tot, correct, n = 0.0, 0, 0
with torch.autograd.detect_anomaly(), torch.no_grad():
    for i in range(7, 15, 2):
        x = torch.cat([data[i, :, :-1], data[i + 1, :, :-1]])
        y = torch.cat([data[i, :, 1:], data[i + 1, :, 1:]])
        logits = model(x)
        tot += F.cross_entropy(logits.view(-1, V), y.reshape(-1), reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += y.numel()
print("eval ce", round(tot / n, 4), "acc", round(correct / n, 5))
report("no_grad_eval_under_anomaly")
