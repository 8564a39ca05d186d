"""An orthogonal RNN on the copy-memory task as expRNN (Lezcano-Casado and Martinez-Rubio) is written
with torch.nn.utils.parametrizations.orthogonal: a 1,024-unit recurrent weight kept orthogonal by the
matrix exponential map (orthogonal_map="matrix_exp", trivialization on), a 1,024 x 10 input
projection orthonormal by Householder products, a modReLU nonlinearity with a learned bias, a
linear readout to 9 classes; the cell run as a Python loop over 320 steps (10 symbols, 300 blanks,
a marker and 9 recall steps) inside parametrize.cached() so each orthogonal weight is built once a
forward; fp32 with TF32 matmuls, RMSprop (lr 1e-4 for the orthogonal weights, 1e-3 for the rest),
batch 640; 3 steps; then an evaluation of 2 batches of 1,024 under no_grad inside
parametrize.cached(); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils.parametrizations import orthogonal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15106)
HID, NSYM, BLANK, B, EB, STEPS = (32, 10, 20, 4, 4, 1) if SMALL else (1024, 10, 300, 640, 1024, 3)
NCLS = 10  # symbols 1..8, blank 0, marker 9
T = NSYM + BLANK + NSYM
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


class ModReLU(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.empty(n).uniform_(-0.01, 0.01))

    def forward(self, z):
        return torch.sign(z) * F.relu(z.abs() + self.b)


class ExpRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_kernel = orthogonal(nn.Linear(NCLS, HID, bias=False), orthogonal_map="householder")
        self.recurrent_kernel = orthogonal(nn.Linear(HID, HID, bias=False), orthogonal_map="matrix_exp")
        self.nonlin = ModReLU(HID)
        self.readout = nn.Linear(HID, NCLS - 1)

    def forward(self, x):
        h = x.new_zeros(x.size(1), HID)
        outs = []
        for t in range(x.size(0)):
            h = self.nonlin(self.input_kernel(x[t]) + self.recurrent_kernel(h))
            outs.append(h)
        return self.readout(torch.stack(outs))


def copy_batch(n):
    seq = torch.randint(1, NCLS - 1, (NSYM, n), device=device)
    blanks = torch.zeros(BLANK - 1, n, dtype=torch.long, device=device)
    marker = torch.full((1, n), NCLS - 1, dtype=torch.long, device=device)
    tail = torch.zeros(NSYM, n, dtype=torch.long, device=device)
    x = torch.cat([seq, blanks, marker, tail])
    y = torch.cat([torch.zeros(NSYM + BLANK, n, dtype=torch.long, device=device), seq])
    return F.one_hot(x, NCLS).float(), y


model = ExpRNN().to(device)
orth = [p for n, p in model.named_parameters() if "parametrizations" in n]
rest = [p for n, p in model.named_parameters() if "parametrizations" not in n]
opt = torch.optim.RMSprop([{"params": orth, "lr": 1e-4}, {"params": rest, "lr": 1e-3}])
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x, y = copy_batch(B)
    with parametrize.cached():
        logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, NCLS - 1), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del logits, loss, x, y

model.eval()
correct = 0
with torch.no_grad(), parametrize.cached():
    for _ in range(2):
        x, y = copy_batch(EB)
        pred = model(x)[-NSYM:].argmax(-1)
        correct += int((pred == y[-NSYM:]).sum())
if device == "cuda":
    print(
        f"eval correct {correct} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
