"""Deep Linear Recurrent Unit (Orvieto et al., ICML 2023, "Resurrecting Recurrent Neural Networks for Long
Sequences") written by hand in plain PyTorch from the paper's appendix code, on sequential CIFAR (synthetic
class-patterned 32 x 32 RGB images read pixel by pixel: L = 1,024 steps of 3 features).
Each LRU keeps its diagonal complex recurrence in the paper's exponential parametrisation: nu_log and
theta_log (ring init r in [0.9, 0.999], phase in [0, pi/5]), Lambda = exp(-exp(nu_log) + i exp(theta_log)),
B (complex, N x H) scaled by the learned gamma = exp(gamma_log) normalisation, C complex, D real. The real
input is cast to complex64, B u by a complex matmul, the states x_t = Lambda x_{t-1} + B u_t by a
Hillis-Steele doubling scan written by hand (log2 L rounds of `x + Lambda^s * shift(x, s)`, the shift a
`torch.cat` with zeros, Lambda^s squared each round), y = Re(C x) + D u (the `.real` view). Blocks: pre-LN,
LRU, GELU, a GLU (Linear H -> 2H, `F.glu`), dropout, residual; a linear encoder, mean pooling, a linear head.
AdamW with two parameter groups (the recurrent parameters at half the learning rate and no weight decay, as
the paper trains them), cosine schedule with warmup, cross-entropy.
Phase 1: 6 steps at batch 64 (6 layers, H = 128, N = 256). Phase 2: no_grad evaluation at batch 256.
Phase 3: inference_mode recurrent (streaming) mode: 256 pixels fed one step at a time through all layers at
batch 256, each layer's complex state updated in place, running-mean predictions.
3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2892)
dev = "cuda"
H, N, LAYERS, L, CLASSES = 128, 256, 6, 1024, 10


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- synthetic sequential CIFAR ---------------------------------------------------------------------------
protos = torch.randn(CLASSES, 3, 32, 32, device=dev).cumsum(-1).cumsum(-2) / 32


def batch(b):
    y = torch.randint(0, CLASSES, (b,), device=dev)
    img = protos[y] + 0.8 * torch.randn(b, 3, 32, 32, device=dev)
    return img.flatten(2).transpose(1, 2).contiguous(), y  # (B, 1024, 3)


# --- the LRU ---------------------------------------------------------------------------------------------
class LRU(nn.Module):
    def __init__(self, h, n, r_min=0.9, r_max=0.999, max_phase=math.pi / 5):
        super().__init__()
        u1, u2 = torch.rand(n), torch.rand(n)
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(u1 * (r_max**2 - r_min**2) + r_min**2)))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2))
        lam_abs = torch.exp(-torch.exp(self.nu_log.detach()))
        self.gamma_log = nn.Parameter(torch.log(torch.sqrt(1 - lam_abs**2)))
        self.B_re = nn.Parameter(torch.randn(n, h) / math.sqrt(2 * h))
        self.B_im = nn.Parameter(torch.randn(n, h) / math.sqrt(2 * h))
        self.C_re = nn.Parameter(torch.randn(h, n) / math.sqrt(n))
        self.C_im = nn.Parameter(torch.randn(h, n) / math.sqrt(n))
        self.D = nn.Parameter(torch.randn(h))

    def lam(self):
        return torch.exp(torch.complex(-torch.exp(self.nu_log), torch.exp(self.theta_log)))

    def b_norm(self):
        return torch.complex(self.B_re, self.B_im) * torch.exp(self.gamma_log).unsqueeze(-1)

    def c(self):
        return torch.complex(self.C_re, self.C_im)

    def forward(self, u):  # u (B, L, H) real
        lam = self.lam()
        bu = u.to(torch.complex64) @ self.b_norm().T  # (B, L, N)
        x, lam_pow, s = bu, lam, 1
        while s < u.shape[1]:
            shifted = torch.cat([torch.zeros_like(x[:, :s]), x[:, :-s]], dim=1)
            x = x + lam_pow * shifted
            lam_pow = lam_pow * lam_pow
            s *= 2
        return (x @ self.c().T).real + self.D * u

    def step(self, state, u_t):  # state (B, N) complex, updated in place
        state.mul_(self.lam()).add_(u_t.to(torch.complex64) @ self.b_norm().T)
        return (state @ self.c().T).real + self.D * u_t


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(H)
        self.lru = LRU(H, N)
        self.out = nn.Linear(H, 2 * H)
        self.drop = nn.Dropout(0.1)

    def mix(self, z):
        return self.drop(F.glu(self.out(F.gelu(z)), dim=-1))

    def forward(self, x):
        return x + self.mix(self.lru(self.norm(x)))

    def step(self, state, x_t):
        return x_t + self.mix(self.lru.step(state, self.norm(x_t)))


class DeepLRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, H)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(H, CLASSES)

    def forward(self, x):
        x = self.enc(x)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x.mean(1))


model = DeepLRU().to(dev)
recurrent = [
    p for n, p in model.named_parameters() if any(k in n for k in ("nu_log", "theta_log", "gamma_log", "B_"))
]
rec_ids = {id(p) for p in recurrent}
other = [p for p in model.parameters() if id(p) not in rec_ids]
opt = torch.optim.AdamW(
    [{"params": other, "weight_decay": 0.05}, {"params": recurrent, "weight_decay": 0.0, "lr": 5e-4}], lr=1e-3
)
STEPS, WARM = 6, 2
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: (s + 1) / WARM if s < WARM else 0.5 * (1 + math.cos(math.pi * (s - WARM) / (STEPS - WARM)))
)

# --- phase 1: training --------------------------------------------------------------------------------------
model.train()
for step in range(STEPS):
    x, y = batch(64)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step} loss {loss.item():.4f}")
report("phase1 train b64")

# --- phase 2: parallel-scan evaluation ----------------------------------------------------------------------
model.eval()
with torch.no_grad():
    x, y = batch(256)
    acc = (model(x).argmax(-1) == y).float().mean()
print("eval acc", acc.item())
report("phase2 eval b256")

# --- phase 3: recurrent streaming mode ----------------------------------------------------------------------
T = 256
with torch.inference_mode():
    x, y = batch(256)
    states = [torch.zeros(256, N, dtype=torch.complex64, device=dev) for _ in range(LAYERS)]
    running = torch.zeros(256, H, device=dev)
    for t in range(T):
        h = model.enc(x[:, t])
        for blk, st in zip(model.blocks, states, strict=True):
            h = blk.step(st, h)
        running += h
    pred = model.head(running / T).argmax(-1)
print("streaming acc after 256 px", (pred == y).float().mean().item())
report("phase3 recurrent streaming")
