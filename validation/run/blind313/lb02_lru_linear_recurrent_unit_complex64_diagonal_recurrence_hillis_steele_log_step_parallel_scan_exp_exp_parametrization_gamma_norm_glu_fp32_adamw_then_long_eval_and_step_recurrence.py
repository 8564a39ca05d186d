"""The Linear Recurrent Unit (Orvieto et al. 2023, "Resurrecting Recurrent Neural Networks") written by
hand: a complex diagonal recurrence x_k = lambda * x_{k-1} + gamma * (B u_k) with lambda =
exp(-exp(nu_log) + i exp(theta_log)) (the paper's exponential parametrisation, ring initialisation),
normalisation gamma = sqrt(1 - |lambda|^2), complex64 B and C matrices, y = Re(C x) + D u. The sequence
is computed by a Hillis-Steele log-step parallel scan over the time axis in a Python loop (log2(L)
rounds of shifted complex multiplies and adds), not by a sequential loop. Blocks are pre-LayerNorm,
GLU after the recurrence, residual; the model classifies sequences of a synthetic copy-ish task.
Training in fp32 with AdamW (no weight decay on the recurrence parameters, as in the paper).

Phases: 0 model and data built; 1 training steps (batch 32, length 2048, 4 layers, width 256, state 256);
2 evaluation on length-8192 sequences under no_grad; 3 step-by-step recurrent inference over 256
steps with the complex state carried in a loop under inference_mode."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)
device = "cuda"


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def parallel_scan(a, b):
    """x_t = a_t * x_{t-1} + b_t with x_{-1} = 0, along dim 1, by log-step doubling."""
    L = a.shape[1]
    shift = 1
    while shift < L:
        a_prev = torch.cat([torch.ones_like(a[:, :shift]), a[:, :-shift]], 1)
        b_prev = torch.cat([torch.zeros_like(b[:, :shift]), b[:, :-shift]], 1)
        b = b + a * b_prev
        a = a * a_prev
        shift *= 2
    return b


class LRU(nn.Module):
    def __init__(self, d, n, r_min=0.9, r_max=0.999, max_phase=2 * math.pi):
        super().__init__()
        u1, u2 = torch.rand(n), torch.rand(n)
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(u1 * (r_max**2 - r_min**2) + r_min**2)))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2))
        self.B = nn.Parameter(torch.complex(torch.randn(n, d), torch.randn(n, d)) / math.sqrt(2 * d))
        self.C = nn.Parameter(torch.complex(torch.randn(d, n), torch.randn(d, n)) / math.sqrt(n))
        self.D = nn.Parameter(torch.randn(d))

    def lam(self):
        return torch.exp(torch.complex(-torch.exp(self.nu_log), torch.exp(self.theta_log)))

    def gamma(self, lam):
        return torch.sqrt(1 - lam.abs() ** 2)

    def forward(self, u):  # u: B, L, d real
        lam = self.lam()
        bu = (u.to(torch.complex64) @ self.B.t()) * self.gamma(lam)
        x = parallel_scan(lam.expand_as(bu), bu)
        return (x @ self.C.t()).real + u * self.D

    def step(self, u, x):  # u: B, d; x: B, n complex
        lam = self.lam()
        x = lam * x + (u.to(torch.complex64) @ self.B.t()) * self.gamma(lam)
        return (x @ self.C.t()).real + u * self.D, x


class Block(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.lru = LRU(d, n)
        self.glu = nn.Linear(d, 2 * d)

    def forward(self, x):
        return x + F.glu(self.glu(F.gelu(self.lru(self.norm(x)))), -1)


class Net(nn.Module):
    def __init__(self, vocab=16, d=256, n=256, layers=4, classes=10):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, n) for _ in range(layers))
        self.head = nn.Linear(d, classes)

    def forward(self, tok):
        x = self.emb(tok)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(1))


model = Net().to(device)
rec = [p for n, p in model.named_parameters() if "nu_log" in n or "theta_log" in n]
rest = [p for n, p in model.named_parameters() if "nu_log" not in n and "theta_log" not in n]
opt = torch.optim.AdamW(
    [{"params": rest, "weight_decay": 0.05}, {"params": rec, "weight_decay": 0.0, "lr": 5e-4}], lr=1e-3
)
report("phase0 build")

for step in range(6):
    tok = torch.randint(0, 16, (32, 2048), device=device)
    y = tok[:, :64].sum(1) % 10
    loss = F.cross_entropy(model(tok), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print("train loss", loss.item())
report("phase1 train")

model.eval()
with torch.no_grad():
    tok = torch.randint(0, 16, (8, 8192), device=device)
    acc = (model(tok).argmax(-1) == tok[:, :64].sum(1) % 10).float().mean()
print("eval acc", acc.item())
report("phase2 long eval")

with torch.inference_mode():
    B = 64
    states = [torch.zeros(B, 256, dtype=torch.complex64, device=device) for _ in model.blocks]
    tok = torch.randint(0, 16, (B, 256), device=device)
    acc_h = torch.zeros(B, 256, device=device)
    for t in range(256):
        x = model.emb(tok[:, t])
        for i, b in enumerate(model.blocks):
            yv, states[i] = b.lru.step(b.norm(x), states[i])
            x = x + F.glu(b.glu(F.gelu(yv)), -1)
        acc_h += x
    logits = model.head(acc_h / 256)
print("recurrent logits", logits.shape, logits.float().abs().mean().item())
report("phase3 recurrent")
