"""Denoising diffusion over protein C-alpha coordinates with an E(n)-equivariant GNN (EGNN) written by hand.

Nodes: residue-type embeddings plus a sinusoidal diffusion-time embedding; coordinates centred (zero centre of
mass). Pairwise squared distances come from a custom torch.autograd.Function (forward by broadcasting,
backward written out from the saved coordinates: 2[(rowsum + colsum)(g) x - (g + g^T) x]). Each of 6 EGNN
layers: edge MLP over [h_i, h_j, d_ij^2, d0_ij^2] on the dense (B, N, N) graph with a 12 Angstrom radius mask
(dense float mask, no self-edges), soft edge gating, node update from the masked message sum, coordinate
update sum_j c_ij (x_i - x_j) written as x_i * sum_j c_ij - c @ x. DDPM with a cosine schedule (1,000 steps),
epsilon prediction, MSE plus a torch.cdist distance-map loss on the predicted clean structure.

Phases: the first step (8 proteins of 256 residues, fp32, AdamW amsgrad as EDM does, an EMA of the weights
by torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn); 2 more steps; ancestral DDPM sampling of
4 structures of 384 residues with the EMA model under no_grad (50 strided steps) and a clash count by cdist;
then bf16 autocast with every layer under torch.utils.checkpoint(use_reentrant=True), 4 proteins of 512
residues, 2 steps. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2066)
if SMALL:
    H, LAYERS, N, BATCH, N_SAMPLE, N_BIG, SAMPLE_STEPS = 32, 2, 32, 2, 48, 64, 5
else:
    H, LAYERS, N, BATCH, N_SAMPLE, N_BIG, SAMPLE_STEPS = 192, 6, 256, 8, 384, 512, 50
T, RADIUS, N_AA = 1000, 12.0, 20
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class SquaredDistance(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        diff = x.unsqueeze(2) - x.unsqueeze(1)
        return (diff * diff).sum(-1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        gs = g + g.transpose(1, 2)
        return 2 * (gs.sum(-1, keepdim=True) * x - gs @ x)


class EGNNLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.edge = nn.Sequential(nn.Linear(2 * H + 2, H), nn.SiLU(), nn.Linear(H, H), nn.SiLU())
        self.att = nn.Sequential(nn.Linear(H, 1), nn.Sigmoid())
        self.node = nn.Sequential(nn.Linear(2 * H, H), nn.SiLU(), nn.Linear(H, H))
        self.coord = nn.Sequential(nn.Linear(H, H), nn.SiLU(), nn.Linear(H, 1, bias=False))
        self.norm = nn.LayerNorm(H)

    def forward(self, h, x, d0, adj):
        b, n, _ = h.shape
        d2 = SquaredDistance.apply(x)
        e = torch.cat(
            [
                h.unsqueeze(2).expand(b, n, n, H),
                h.unsqueeze(1).expand(b, n, n, H),
                d2.unsqueeze(-1),
                d0.unsqueeze(-1),
            ],
            dim=-1,
        )
        m = self.edge(e)
        m = m * self.att(m) * adj.unsqueeze(-1)
        c = self.coord(m).squeeze(-1) * adj / (n - 1)
        x = x + c.sum(-1, keepdim=True) * x - c @ x
        h = h + self.node(torch.cat([self.norm(h), m.sum(2) / 32.0], dim=-1))
        return h, x


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)


class EGNNDenoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.aa = nn.Embedding(N_AA, H)
        self.time = nn.Sequential(nn.Linear(H, H), nn.SiLU(), nn.Linear(H, H))
        self.layers = nn.ModuleList([EGNNLayer() for _ in range(LAYERS)])
        self.use_checkpoint = False

    def forward(self, x_t, aa, t):
        h = self.aa(aa) + self.time(timestep_embedding(t, H))[:, None]
        d0 = SquaredDistance.apply(x_t).detach()
        adj = (d0 < RADIUS**2).float() * (1 - torch.eye(x_t.shape[1], device=x_t.device))
        x = x_t
        for layer in self.layers:
            if self.use_checkpoint and self.training:
                h, x = checkpoint(layer, h, x, d0, adj, use_reentrant=True)
            else:
                h, x = layer(h, x, d0, adj)
        x = x - x.mean(1, keepdim=True)
        return x - x_t  # the predicted noise direction


steps = torch.arange(T + 1, dtype=torch.float64) / T
alphas_bar = torch.cos((steps + 0.008) / 1.008 * math.pi / 2) ** 2
alphas_bar = (alphas_bar / alphas_bar[0]).clamp(min=1e-5).float().to(device)


def protein_batch(batch, n):
    # a random-walk C-alpha trace with 3.8 A steps, centred
    steps_ = F.normalize(torch.randn(batch, n, 3, device=device), dim=-1) * 3.8
    x0 = steps_.cumsum(1) / 3.0
    x0 = x0 - x0.mean(1, keepdim=True)
    aa = torch.randint(0, N_AA, (batch, n), device=device)
    return x0, aa


def diffusion_loss(model, x0, aa):
    t = torch.randint(1, T, (x0.shape[0],), device=device)
    ab = alphas_bar[t][:, None, None]
    eps = torch.randn_like(x0)
    eps = eps - eps.mean(1, keepdim=True)
    x_t = ab.sqrt() * x0 + (1 - ab).sqrt() * eps
    eps_hat = model(x_t, aa, t).float()
    x0_hat = (x_t - (1 - ab).sqrt() * eps_hat) / ab.sqrt()
    dist_loss = F.mse_loss(torch.cdist(x0_hat, x0_hat), torch.cdist(x0, x0))
    return F.mse_loss(eps_hat, eps) + 0.01 * dist_loss


model = EGNNDenoiser().to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, amsgrad=True, weight_decay=1e-12)

model.train()
for step in range(3):
    loss = diffusion_loss(model, *protein_batch(BATCH, N))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("fp32 training")

ema.eval()
with torch.no_grad():
    _, aa = protein_batch(4, N_SAMPLE)
    x = torch.randn(4, N_SAMPLE, 3, device=device)
    x = x - x.mean(1, keepdim=True)
    ts = torch.linspace(T - 1, 1, SAMPLE_STEPS, device=device).long()
    for i, t in enumerate(ts.tolist()):
        t_prev = ts[i + 1].item() if i + 1 < len(ts) else 0
        ab, ab_prev = alphas_bar[t], alphas_bar[t_prev]
        eps_hat = ema(x, aa, torch.full((4,), t, device=device))
        x0_hat = (x - (1 - ab).sqrt() * eps_hat) / ab.sqrt()
        noise = torch.randn_like(x) if t_prev > 0 else torch.zeros_like(x)
        sigma = ((1 - ab_prev) / (1 - ab) * (1 - ab / ab_prev)).clamp(min=0).sqrt()
        x = ab_prev.sqrt() * x0_hat + (1 - ab_prev - sigma**2).clamp(min=0).sqrt() * eps_hat + sigma * noise
        x = x - x.mean(1, keepdim=True)
    d = torch.cdist(x, x)
    clashes = ((d < 3.0).float().sum() - 4 * N_SAMPLE) / 2
    print(
        f"sampled {tuple(x.shape)} clashes {clashes.item():.0f} "
        f"radius of gyration {x.norm(dim=-1).mean().item():.2f}"
    )
del d, x
report("ema ddpm sampling")

model.use_checkpoint = True
for step in range(2):
    x0, aa = protein_batch(BATCH // 2, N_BIG)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = diffusion_loss(model, x0, aa)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    print(f"bf16 checkpointed step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
