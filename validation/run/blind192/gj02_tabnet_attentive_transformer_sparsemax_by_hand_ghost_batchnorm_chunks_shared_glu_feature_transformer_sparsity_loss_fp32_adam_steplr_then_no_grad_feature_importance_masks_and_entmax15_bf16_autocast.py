"""TabNet (Arik & Pfister 2019) written by hand, the way pytorch-tabnet builds it, for a wide numeric
table (128 features, 2 classes).

Ghost batch normalization splits each batch into virtual batches of 1,024 rows with torch.chunk and runs
one BatchNorm1d (momentum 0.02) over each, concatenating the results. A feature transformer is 2 GLU
layers shared across all decision steps plus 2 step-specific GLU layers (Linear without bias to 2 x 128,
ghost BN, GLU), the residual scaled by sqrt(0.5). The attentive transformer is Linear(n_a=64 -> 128) +
ghost BN, multiplied by the prior scales and passed through sparsemax written by hand (sort, cumsum,
support size, threshold tau); the prior is updated by (gamma=1.3 - mask). 5 decision steps with
n_d = n_a = 64; the ReLU'd decision outputs summed and mapped to the logits. Loss: cross-entropy plus
1e-3 times the mask-entropy sparsity regularizer. Batch 65,536 rows generated on the device, fp32, Adam
(lr 2e-2) with StepLR.

Phases: the first step; 3 more steps; a no_grad evaluation of 131,072 rows in chunks of 32,768 that also
aggregates the per-feature importance from the masks (explain), moved to the host; then a second TabNet
whose attentive transformers use entmax-1.5 (by hand, sort-based exact) trained 2 steps under bf16
autocast with the same Adam settings. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19202)
if SMALL:
    B, VBS, STEPS, EVAL_ROWS, EVAL_CHUNK = 256, 64, 1, 512, 256
else:
    B, VBS, STEPS, EVAL_ROWS, EVAL_CHUNK = 65536, 1024, 3, 131072, 32768
N_FEAT = 128
N_CLASSES = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def sparsemax(z, dim=-1):
    z = z - z.max(dim=dim, keepdim=True).values
    zs, _ = torch.sort(z, dim=dim, descending=True)
    k = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=z.dtype)
    cs = zs.cumsum(dim) - 1
    support = (k * zs) > cs
    k_z = support.sum(dim=dim, keepdim=True)
    tau = cs.gather(dim, k_z - 1) / k_z.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def entmax15(z, dim=-1):
    z = (z - z.max(dim=dim, keepdim=True).values) / 2
    zs, _ = torch.sort(z, dim=dim, descending=True)
    k = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=z.dtype)
    mean = zs.cumsum(dim) / k
    mean_sq = (zs**2).cumsum(dim) / k
    ss = k * (mean_sq - mean**2)
    delta = (1 - ss) / k
    tau = mean - torch.sqrt(torch.clamp(delta, min=0))
    support = (tau <= zs).sum(dim=dim, keepdim=True)
    tau_star = tau.gather(dim, support - 1)
    return torch.clamp(z - tau_star, min=0) ** 2


class GBN(nn.Module):
    def __init__(self, d, vbs=VBS, momentum=0.02):
        super().__init__()
        self.bn = nn.BatchNorm1d(d, momentum=momentum)
        self.vbs = vbs

    def forward(self, x):
        chunks = x.chunk(math.ceil(x.shape[0] / self.vbs), 0)
        return torch.cat([self.bn(c) for c in chunks], 0)


class GLULayer(nn.Module):
    def __init__(self, d_in, d_out, fc=None):
        super().__init__()
        self.fc = fc if fc is not None else nn.Linear(d_in, 2 * d_out, bias=False)
        self.bn = GBN(2 * d_out)

    def forward(self, x):
        return F.glu(self.bn(self.fc(x)), dim=-1)


class FeatTransformer(nn.Module):
    def __init__(self, d_in, d_out, shared_fcs, n_indep=2):
        super().__init__()
        self.shared = nn.ModuleList(
            GLULayer(d_in if i == 0 else d_out, d_out, fc) for i, fc in enumerate(shared_fcs)
        )
        self.indep = nn.ModuleList(GLULayer(d_out, d_out) for _ in range(n_indep))

    def forward(self, x):
        scale = math.sqrt(0.5)
        x = self.shared[0](x)
        for layer in list(self.shared[1:]) + list(self.indep):
            x = (x + layer(x)) * scale
        return x


class AttentiveTransformer(nn.Module):
    def __init__(self, n_a, n_feat, mask_fn):
        super().__init__()
        self.fc = nn.Linear(n_a, n_feat, bias=False)
        self.bn = GBN(n_feat)
        self.mask_fn = mask_fn

    def forward(self, prior, a):
        return self.mask_fn(self.bn(self.fc(a)) * prior)


class TabNet(nn.Module):
    def __init__(self, n_feat, n_out, n_d=64, n_a=64, n_steps=5, gamma=1.3, mask_fn=sparsemax):
        super().__init__()
        self.n_d, self.n_steps, self.gamma = n_d, n_steps, gamma
        self.initial_bn = nn.BatchNorm1d(n_feat, momentum=0.01)
        shared = nn.ModuleList(
            [
                nn.Linear(n_feat, 2 * (n_d + n_a), bias=False),
                nn.Linear(n_d + n_a, 2 * (n_d + n_a), bias=False),
            ]
        )
        self.initial = FeatTransformer(n_feat, n_d + n_a, shared)
        self.steps = nn.ModuleList(FeatTransformer(n_feat, n_d + n_a, shared) for _ in range(n_steps))
        self.att = nn.ModuleList(AttentiveTransformer(n_a, n_feat, mask_fn) for _ in range(n_steps))
        self.final = nn.Linear(n_d, n_out, bias=False)

    def forward(self, x):
        x = self.initial_bn(x)
        prior = torch.ones_like(x)
        a = self.initial(x)[:, self.n_d :]
        out = 0
        m_loss = 0
        masks = []
        for step in range(self.n_steps):
            m = self.att[step](prior, a)
            m_loss = m_loss + torch.mean(torch.sum(m * torch.log(m + 1e-15), dim=1))
            prior = (self.gamma - m) * prior
            h = self.steps[step](m * x)
            d = F.relu(h[:, : self.n_d])
            out = out + d
            a = h[:, self.n_d :]
            masks.append((m, d.sum(1, keepdim=True)))
        return self.final(out), m_loss / self.n_steps, masks


def batch(n):
    x = torch.randn(n, N_FEAT, device=device)
    y = (x[:, :8].sum(1) + 0.5 * torch.randn(n, device=device) > 0).long()
    return x, y


model = TabNet(N_FEAT, N_CLASSES).to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.95)
print(f"TabNet params {sum(p.numel() for p in model.parameters())}")


def step_fn(net, optimizer, autocast=False):
    x, y = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and amp):
        logits, m_loss, _ = net(x)
        loss = F.cross_entropy(logits.float(), y) - 1e-3 * m_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


model.train()
print(f"step 0 loss {step_fn(model, opt):.4f}")
sched.step()
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss = step_fn(model, opt)
    sched.step()
    print(f"step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
importance = torch.zeros(N_FEAT, device=device)
correct = 0
with torch.no_grad():
    for _ in range(EVAL_ROWS // EVAL_CHUNK):
        x, y = batch(EVAL_CHUNK)
        logits, _, masks = model(x)
        correct += (logits.argmax(1) == y).sum().item()
        for m, w in masks:
            importance += (m * w).sum(0)
importance = (importance / importance.sum()).cpu()
print(f"eval accuracy {correct / EVAL_ROWS:.4f} top feature {int(importance.argmax())}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model2 = TabNet(N_FEAT, N_CLASSES, mask_fn=entmax15).to(device)
opt2 = torch.optim.Adam(model2.parameters(), lr=2e-2)
model2.train()
for step in range(2):
    loss = step_fn(model2, opt2, autocast=True)
    print(f"entmax step {step} loss {loss:.4f}")
if device == "cuda":
    print(
        f"entmax allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
