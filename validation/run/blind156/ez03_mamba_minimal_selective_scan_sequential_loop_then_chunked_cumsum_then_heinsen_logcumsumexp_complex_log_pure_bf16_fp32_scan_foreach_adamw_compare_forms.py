"""A Mamba language model in plain PyTorch after johnma2006's mamba-minimal (no CUDA kernels): each
residual block an RMSNorm, an input projection to 2 x 1,536, a causal depthwise Conv1d of width 4,
SiLU, the x projection to (dt rank 48, B 16, C 16), softplus step sizes, A = -exp(A_log) over a
state of 16, the selective scan, a SiLU gate and the output projection; 768 wide, 4 layers,
vocabulary 32,000, tied head. The model is pure bf16 and the scan runs in fp32, in three forms the
user trains in turn to compare them: (1) mamba-minimal's sequential loop over time (x = deltaA[:, i]
* x + deltaB_u[:, i], an einsum with C[:, i] a step, torch.stack) at batch 8 x 256; (2) a chunked
parallel form over chunks of 128 (the log decays cumsum'd inside the chunk, the inputs rescaled by
exp(-cumsum), cumsum'd and rescaled back, the state carried between chunks) at batch 4 x 1,024;
(3) Heinsen's log-space scan over the whole sequence (the inputs' logs taken as complex64 so
negative values have one, a_star = cumsum of the log decays, torch.logcumsumexp over the complex
log inputs minus a_star, exp and .real) at batch 2 x 1,024. Foreach AdamW, one step a form (each its
own phase), then the three forms evaluated on one batch of 2 x 512 under no_grad with their largest
difference printed; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15603)
if SMALL:
    V, D, LAYERS, N, CHUNK = 128, 32, 2, 4, 16
    SEQ_BT, PAR_BT, LOG_BT, EVAL_BT = (2, 16), (2, 32), (1, 32), (1, 32)
else:
    V, D, LAYERS, N, CHUNK = 32000, 768, 4, 16, 128
    SEQ_BT, PAR_BT, LOG_BT, EVAL_BT = (8, 256), (4, 1024), (2, 1024), (2, 512)
E, DT_RANK, CONV = 2 * D, math.ceil(D / 16), 4
device = "cuda" if torch.cuda.is_available() else "cpu"
MODE = ["sequential"]


def scan_sequential(u, delta, A, B, C):
    b, l, d_in = u.shape
    deltaA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
    deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
    x = torch.zeros((b, d_in, A.shape[1]), device=u.device, dtype=u.dtype)
    ys = []
    for i in range(l):
        x = deltaA[:, i] * x + deltaB_u[:, i]
        y = torch.einsum("bdn,bn->bd", x, C[:, i, :])
        ys.append(y)
    return torch.stack(ys, dim=1)  # (b, l, d_in)


def scan_chunked(u, delta, A, B, C):
    b, l, d_in = u.shape
    log_a = torch.einsum("bld,dn->bldn", delta, A)  # log decays, <= 0
    deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
    h = torch.zeros((b, d_in, A.shape[1]), device=u.device, dtype=u.dtype)
    ys = []
    for s in range(0, l, CHUNK):
        a_star = torch.cumsum(log_a[:, s : s + CHUNK], dim=1)
        hs = torch.exp(a_star) * (
            h.unsqueeze(1) + torch.cumsum(deltaB_u[:, s : s + CHUNK] * torch.exp(-a_star), dim=1)
        )
        ys.append(torch.einsum("bldn,bln->bld", hs, C[:, s : s + CHUNK]))
        h = hs[:, -1]
    return torch.cat(ys, dim=1)


def scan_logspace(u, delta, A, B, C):
    log_a = torch.einsum("bld,dn->bldn", delta, A)
    deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
    a_star = torch.cumsum(log_a, dim=1)
    log_b = torch.log(deltaB_u.to(torch.complex64))
    log_h = a_star + torch.logcumsumexp(log_b - a_star, dim=1)
    hs = torch.exp(log_h).real
    return torch.einsum("bldn,bln->bld", hs, C)


SCANS = {"sequential": scan_sequential, "chunked": scan_chunked, "logspace": scan_logspace}


class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MambaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(D, E * 2, bias=False)
        self.conv1d = nn.Conv1d(E, E, kernel_size=CONV, groups=E, padding=CONV - 1)
        self.x_proj = nn.Linear(E, DT_RANK + N * 2, bias=False)
        self.dt_proj = nn.Linear(DT_RANK, E)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1).float().repeat(E, 1)))
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, D, bias=False)

    def forward(self, x):
        b, l, _ = x.shape
        x, res = self.in_proj(x).split([E, E], dim=-1)
        x = self.conv1d(x.transpose(1, 2))[:, :, :l].transpose(1, 2)
        x = F.silu(x)
        y = self.ssm(x)
        return self.out_proj(y * F.silu(res))

    def ssm(self, x):
        A = -torch.exp(self.A_log.float())
        delta, B, C = self.x_proj(x).split([DT_RANK, N, N], dim=-1)
        delta = F.softplus(self.dt_proj(delta)).float()
        y = SCANS[MODE[0]](x.float(), delta, A, B.float(), C.float())
        y = y + x.float() * self.D.float()
        return y.to(x.dtype)


class ResidualBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.mixer = MambaBlock()
        self.norm = RMSNorm(D)

    def forward(self, x):
        return self.mixer(self.norm(x)) + x


class Mamba(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, D)
        self.layers = nn.ModuleList(ResidualBlock() for _ in range(LAYERS))
        self.norm_f = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.embedding.weight

    def forward(self, input_ids):
        x = self.embedding(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm_f(x))


model = Mamba().to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for mode, (bsz, seqlen) in (("sequential", SEQ_BT), ("chunked", PAR_BT), ("logspace", LOG_BT)):
    MODE[0] = mode
    ids = torch.randint(0, V, (bsz, seqlen + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.view(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del logits
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"{mode} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, ids
model.eval()
with torch.no_grad():
    ids = torch.randint(0, V, EVAL_BT, device=device)
    outs = {}
    for mode in SCANS:
        MODE[0] = mode
        outs[mode] = model(ids).float()
    diff = max((outs[m] - outs["sequential"]).abs().max().item() for m in ("chunked", "logspace"))
if device == "cuda":
    print(
        f"eval diff {diff:.3e} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
