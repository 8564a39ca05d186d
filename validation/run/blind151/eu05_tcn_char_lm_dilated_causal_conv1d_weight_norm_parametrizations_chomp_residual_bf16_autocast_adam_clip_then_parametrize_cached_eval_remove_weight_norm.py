"""A temporal convolutional network language model after Bai, Kolter and Koltun's TCN, with the weight
normalization written as today's PyTorch wants it (torch.nn.utils.parametrizations.weight_norm, the
weight rebuilt from original0 = g and original1 = v at each access): a byte embedding of 384, 6
temporal blocks of two dilated causal Conv1d (kernel 3, dilation 1..32, 768 channels, padding
cut off by a Chomp1d, ReLU, dropout 0.1) with a 1 x 1 downsample where the widths differ, a
weight-normalized linear decoder tied to nothing; bf16 autocast, Adam (lr 2e-3), gradients clipped
at 0.5; batch 48 of 1,024 bytes; 4 steps; then an evaluation of 3 batches under no_grad inside
parametrize.cached(); then every weight norm removed (remove_parametrizations, leave_parametrized)
and one more evaluation batch; 7 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils.parametrizations import weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15105)
V, EMB, CH, LEVELS, T, B, STEPS, EVAL = (
    (256, 16, 32, 3, 64, 2, 2, 1) if SMALL else (256, 384, 768, 6, 1024, 48, 4, 3)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Chomp1d(nn.Module):
    def __init__(self, chomp):
        super().__init__()
        self.chomp = chomp

    def forward(self, x):
        return x[:, :, : -self.chomp].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, cin, cout, dilation):
        super().__init__()
        pad = 2 * dilation
        self.net = nn.Sequential(
            weight_norm(nn.Conv1d(cin, cout, 3, padding=pad, dilation=dilation)),
            Chomp1d(pad),
            nn.ReLU(),
            nn.Dropout(0.1),
            weight_norm(nn.Conv1d(cout, cout, 3, padding=pad, dilation=dilation)),
            Chomp1d(pad),
            nn.ReLU(),
            nn.Dropout(0.1),
        )
        self.downsample = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        res = x if self.downsample is None else self.downsample(x)
        return F.relu(self.net(x) + res)


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(V, EMB)
        self.blocks = nn.Sequential(*[TemporalBlock(EMB if i == 0 else CH, CH, 2**i) for i in range(LEVELS)])
        self.decoder = weight_norm(nn.Linear(CH, V))

    def forward(self, x):
        h = self.blocks(self.encoder(x).transpose(1, 2))
        return self.decoder(h.transpose(1, 2))


model = TCN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    ids = torch.randint(0, V, (n, T + 1), device=device)
    return ids[:, :-1], ids[:, 1:]


model.train()
for step in range(STEPS):
    x, y = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del logits, loss, x, y


def evaluate(tag, n, reset=True):
    total = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        for _ in range(n):
            x, y = batch(B)
            total += F.cross_entropy(model(x).reshape(-1, V).float(), y.reshape(-1)).item()
    if device == "cuda":
        print(
            f"{tag} bpc {total / n / 0.6931:.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


model.eval()
with parametrize.cached():
    evaluate("cached eval", EVAL)
for m in model.modules():
    if parametrize.is_parametrized(m, "weight"):
        parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
evaluate("plain eval", 1, reset=False)
