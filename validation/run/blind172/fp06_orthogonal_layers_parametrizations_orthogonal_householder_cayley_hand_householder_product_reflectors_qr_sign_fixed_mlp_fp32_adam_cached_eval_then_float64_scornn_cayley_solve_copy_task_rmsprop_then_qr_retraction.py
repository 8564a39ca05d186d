"""Orthogonal layers trained three ways, as users write them: (1) an MLP classifier over 3,072 inputs
(fp32, batch 16,384) whose layers are kept orthogonal by torch.nn.utils.parametrizations.orthogonal:
the 3,072 -> 1,024 stem by its default map for a non-square weight (Householder), two 1,024 x 1,024
layers with orthogonal_map="householder" and one with orthogonal_map="cayley"; a hand-made
Householder layer (1,024 x 1,024 from 512 reflectors: torch.linalg.householder_product of the
unit-lower reflector matrix and taus 2 / ||v||^2); a QR layer (torch.linalg.qr of a free 1,024 x 1,024
parameter with the sign fix Q * sign(diag R)); LayerNorm and GELU between, a 100-way head; Adam lr
1e-3, 4 steps, the first its own phase; (2) an eval pass of 32,768 samples under
`parametrize.cached()`; (3) an orthogonal RNN in float64 (scoRNN-style, Helfrich et al. 2018: the
recurrent 512 x 512 matrix the Cayley transform (I + A)^-1 (I - A) of a skew-symmetric parameter by
torch.linalg.solve once per sequence, modrelu) on the copy task (10 symbols, 60 blank steps, batch
256), RMSprop (lr 1e-3 on the input and output maps, 1e-4 on the skew parameter), 3 steps; (4) the
projection of the QR layer's free weight and the head back onto orthonormal rows (`torch.linalg.qr`
retraction written in place under no_grad) and a final eval batch. Phases: step 0, steps 1-3, cached
eval, RNN, retraction; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils.parametrizations import orthogonal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17206)
if SMALL:
    IN, D, REFL, CLASSES, B, STEPS, EVAL_N = 48, 32, 16, 10, 16, 3, 32
    HID, BLANK, RNN_B = 16, 6, 4
else:
    IN, D, REFL, CLASSES, B, STEPS, EVAL_N = 3072, 1024, 512, 100, 16384, 4, 32768
    HID, BLANK, RNN_B = 512, 60, 256
SYMBOLS, COPY = 10, 10
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(17206)


class HouseholderLinear(nn.Module):
    def __init__(self, n, k):
        super().__init__()
        self.v = nn.Parameter(torch.randn(n, k) / n**0.5)
        self.bias = nn.Parameter(torch.zeros(n))

    def weight(self):
        v = self.v.tril(-1) + torch.eye(*self.v.shape, device=self.v.device)
        tau = 2.0 / (v * v).sum(dim=0)
        full = F.pad(v, (0, v.size(0) - v.size(1)))  # (n, n): the reflectors, then columns orgqr ignores
        return torch.linalg.householder_product(full, tau)  # (n, n) orthogonal, k reflectors

    def forward(self, x):
        return F.linear(x, self.weight(), self.bias)


class QRLinear(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.raw = nn.Parameter(torch.randn(n, n) / n**0.5)
        self.bias = nn.Parameter(torch.zeros(n))

    def weight(self):
        q, r = torch.linalg.qr(self.raw)
        return q * torch.sign(torch.diagonal(r)).unsqueeze(0)

    def forward(self, x):
        return F.linear(x, self.weight(), self.bias)


class OrthoMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = orthogonal(nn.Linear(IN, D))
        self.l1 = orthogonal(nn.Linear(D, D), orthogonal_map="householder")
        self.l2 = orthogonal(nn.Linear(D, D), orthogonal_map="householder")
        self.l3 = orthogonal(nn.Linear(D, D), orthogonal_map="cayley")
        self.hh = HouseholderLinear(D, REFL)
        self.qr = QRLinear(D)
        self.norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(6))
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        for layer, norm in zip(
            (self.stem, self.l1, self.l2, self.l3, self.hh, self.qr), self.norms, strict=False
        ):
            x = F.gelu(norm(layer(x)))
        return self.head(x)


class ModReLU(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.empty(n, dtype=torch.float64).uniform_(-0.01, 0.01))

    def forward(self, z):
        return torch.sign(z) * F.relu(z.abs() + self.b)


class CayleyRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(SYMBOLS + 2, HID, dtype=torch.float64)
        self.skew = nn.Parameter(torch.randn(HID, HID, dtype=torch.float64) * 0.01)
        self.act = ModReLU(HID)
        self.out = nn.Linear(HID, SYMBOLS + 1, dtype=torch.float64)

    def forward(self, x):
        a = self.skew.triu(1)
        a = a - a.mT
        eye = torch.eye(HID, dtype=a.dtype, device=a.device)
        rec = torch.linalg.solve(eye + a, eye - a)
        h = x.new_zeros(x.size(1), HID)
        outs = []
        for t in range(x.size(0)):
            h = self.act(self.inp(x[t]) + h @ rec.mT)
            outs.append(self.out(h))
        return torch.stack(outs)


model = OrthoMLP().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
proj = torch.randn(IN, CLASSES, generator=gen).to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    x = torch.randn(n, IN, generator=gen).to(device)
    return x, (x @ proj).argmax(1)


model.train()
for step in range(STEPS):
    x, y = batch(B)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad(), parametrize.cached():
    for _i in range(0, EVAL_N, B):
        x, y = batch(B)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"eval acc {correct / EVAL_N:.4f}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

rnn = CayleyRNN().to(device)
rnn_opt = torch.optim.RMSprop(
    [
        dict(params=[rnn.inp.weight, rnn.inp.bias, rnn.out.weight, rnn.out.bias, rnn.act.b], lr=1e-3),
        dict(params=[rnn.skew], lr=1e-4),
    ]
)
L_SEQ = COPY + BLANK + COPY
for step in range(3):
    seq = torch.randint(0, SYMBOLS, (RNN_B, COPY), generator=gen)
    inp = torch.full((RNN_B, L_SEQ), SYMBOLS, dtype=torch.long)
    inp[:, :COPY] = seq
    inp[:, COPY + BLANK - 1] = SYMBOLS + 1
    tgt = torch.full((RNN_B, L_SEQ), SYMBOLS, dtype=torch.long)
    tgt[:, -COPY:] = seq
    x = F.one_hot(inp, SYMBOLS + 2).to(torch.float64).transpose(0, 1).to(device)
    logits = rnn(x)
    loss = F.cross_entropy(logits.reshape(-1, SYMBOLS + 1), tgt.t().reshape(-1).to(device))
    rnn_opt.zero_grad()
    loss.backward()
    rnn_opt.step()
    print(f"copy step {step} loss {loss.item():.4f}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    for w in (model.qr.raw, model.head.weight):
        transposed = w.size(0) < w.size(1)
        q, r = torch.linalg.qr(w.mT if transposed else w)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        w.copy_(q.mT if transposed else q)
    x, y = batch(B)
    print(f"after retraction loss {F.cross_entropy(model(x), y).item():.4f}")
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")
