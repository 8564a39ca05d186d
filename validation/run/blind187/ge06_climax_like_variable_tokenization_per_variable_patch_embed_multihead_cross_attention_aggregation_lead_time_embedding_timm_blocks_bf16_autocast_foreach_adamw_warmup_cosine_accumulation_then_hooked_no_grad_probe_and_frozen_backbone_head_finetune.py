"""A ClimaX-like foundation model for weather and climate (after microsoft/ClimaX's arch.py), written
with timm's vision_transformer.Block: 48 input variables on a 1.40625-degree 128 x 256 grid, each
variable tokenized by its own Conv2d patch embedding (patch 4, 1 -> 768) into 32 x 64 = 2,048 tokens,
plus a learned variable embedding; variable aggregation by an nn.MultiheadAttention (12 heads) whose
single learned query attends over the 48 variable tokens of every spatial position (the batch of B x
2,048 sequences of length 48); a learned position embedding and a lead-time embedding (Linear(1,
768) of the lead time in hundreds of hours) added; 8 timm Blocks of 768 (12 heads, fused SDPA
attention, MLP ratio 4, drop path 0.1); a prediction head (two Linear + GELU layers, then Linear to
48 x 4 x 4) unpatchified back to the grid.

Batch 4 per micro-batch, 2 micro-batches accumulated per optimizer step, bf16 autocast, AdamW
(foreach, lr 5e-4, betas (0.9, 0.95), weight decay 1e-5) with a LinearLR warm-up followed by
CosineAnnealingLR through SequentialLR, loss the latitude-weighted MSE, lead times drawn from 6 to 168
hours. Phases: the first optimizer step; 2 more; a no_grad evaluation with forward hooks on every
block collecting the spatially pooled token features (a linear-probe style feature dump moved to the
host); then the backbone frozen (requires_grad_(False)) and a new head for 5 downstream variables
fine-tuned for 2 steps with a fused Adam. 4 phases."""

import os

import torch
import torch.nn as nn
from timm.models.vision_transformer import Block

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18706)
if SMALL:
    B, V, NLAT, NLON, P, D, DEPTH, HEADS, STEPS = 1, 6, 16, 32, 4, 64, 2, 4, 1
else:
    B, V, NLAT, NLON, P, D, DEPTH, HEADS, STEPS = 4, 48, 128, 256, 4, 768, 8, 12, 2
ACCUM, N_DOWN = 2, 5
L = (NLAT // P) * (NLON // P)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class ClimaXLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embeds = nn.ModuleList([nn.Conv2d(1, D, P, stride=P) for _ in range(V)])
        self.var_embed = nn.Parameter(torch.zeros(1, V, D))
        self.var_query = nn.Parameter(torch.zeros(1, 1, D))
        self.var_agg = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.pos_embed = nn.Parameter(torch.zeros(1, L, D))
        self.lead_time_embed = nn.Linear(1, D)
        dpr = torch.linspace(0, 0.1, DEPTH).tolist()
        self.blocks = nn.ModuleList(
            [Block(D, HEADS, mlp_ratio=4.0, qkv_bias=True, drop_path=dpr[i]) for i in range(DEPTH)]
        )
        self.norm = nn.LayerNorm(D)
        self.head = self.make_head(V)
        nn.init.trunc_normal_(self.var_embed, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    @staticmethod
    def make_head(nv):
        return nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, nv * P * P))

    def aggregate_variables(self, x):
        b, v, n, d = x.shape
        x = x.permute(0, 2, 1, 3).reshape(b * n, v, d)
        q = self.var_query.expand(b * n, -1, -1)
        x, _ = self.var_agg(q, x, x)
        return x.squeeze(1).reshape(b, n, d)

    def encode(self, x, lead_times):
        tokens = [self.token_embeds[i](x[:, i : i + 1]).flatten(2).transpose(1, 2) for i in range(V)]
        x = torch.stack(tokens, dim=1) + self.var_embed[:, :, None]
        x = self.aggregate_variables(x)
        x = x + self.pos_embed
        x = x + self.lead_time_embed(lead_times[:, None])[:, None]
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def unpatchify(self, x, nv):
        b = x.shape[0]
        h, w = NLAT // P, NLON // P
        x = x.reshape(b, h, w, P, P, nv).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, nv, h * P, w * P)

    def forward(self, x, lead_times, head=None):
        feats = self.encode(x, lead_times)
        head = head if head is not None else self.head
        out = head(feats)
        return self.unpatchify(out, out.shape[-1] // (P * P))


lat = torch.linspace(-88.6, 88.6, NLAT)
lat_w = torch.cos(torch.deg2rad(lat))
lat_w = (lat_w / lat_w.mean()).view(1, 1, NLAT, 1).to(device)


def lat_mse(pred, target):
    return ((pred.float() - target) ** 2 * lat_w).mean()


def batch(nv_out=V):
    x = torch.randn(B, V, NLAT, NLON, device=device)
    y = torch.randn(B, nv_out, NLAT, NLON, device=device)
    lead = torch.randint(1, 29, (B,), device=device).float() * 6 / 100
    return x, y, lead


model = ClimaXLike().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.95), weight_decay=1e-5, foreach=True)
sched = torch.optim.lr_scheduler.SequentialLR(
    opt,
    [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=100),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10000),
    ],
    milestones=[100],
)


def optimizer_step():
    model.train()
    opt.zero_grad(set_to_none=True)  # noqa: F821 (deleted before the last phase, which does not call this)
    total = 0.0
    for _ in range(ACCUM):
        x, y, lead = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            pred = model(x, lead)
        loss = lat_mse(pred, y) / ACCUM
        loss.backward()
        total += loss.item()
    opt.step()  # noqa: F821
    sched.step()  # noqa: F821
    return total


print(f"step 0 loss {optimizer_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {optimizer_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

features = {}


def make_hook(name):
    def hook(module, inputs, output):
        features.setdefault(name, []).append(output.float().mean(dim=1))

    return hook


handles = [blk.register_forward_hook(make_hook(f"block{i}")) for i, blk in enumerate(model.blocks)]
model.eval()
with torch.no_grad():
    x, y, lead = batch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = model(x, lead)
    val = lat_mse(pred, y).item()
for h in handles:
    h.remove()
dump = {k: torch.cat(v).cpu() for k, v in features.items()}
print(f"val loss {val:.4f}, probed {len(dump)} blocks of {tuple(dump['block0'].shape)}")
if device == "cuda":
    print(f"probe peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt, sched, pred
model.requires_grad_(False)
down_head = ClimaXLike.make_head(N_DOWN).to(device)
ft_opt = torch.optim.Adam(down_head.parameters(), lr=1e-4, fused=amp)
model.train()
for step in range(2):
    x, y, lead = batch(N_DOWN)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = model(x, lead, head=down_head)
    loss = lat_mse(pred, y)
    ft_opt.zero_grad(set_to_none=True)
    loss.backward()
    ft_opt.step()
    print(f"downstream step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"frozen finetune peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
