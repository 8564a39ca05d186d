"""SiT-L/2-like flow-matching transformer (Ma et al., "Scalable Interpolant Transformers") on 32 x 32 x 4
latents, with the blocks built from timm's PatchEmbed, Attention and Mlp as the SiT/DiT code does.

Model: timm PatchEmbed (Conv2d 4 -> 1024, 2 x 2 patches: 256 tokens) plus a learned position embedding,
a sinusoidal timestep embedder and a class table with a null row (label dropout 0.1), 16 adaLN-Zero
blocks of width 1024 with 16 heads (timm Attention with qkv bias, fused SDPA; timm Mlp with GELU-tanh),
final adaLN layer, unpatchify.

Objective: rectified flow / linear interpolant x_t = (1 - t) x_0 + t eps with velocity target
v = eps - x_0; t drawn logit-normal (sigmoid of N(0, 1)) as in SD3's training recipe; MSE on v.

Training at batch 128 under fp16 autocast with torch.amp.GradScaler (scale, unscale_, clip_grad_norm_ at
1.0, step, update), fp32 weights, gradient checkpointing of every block
(torch.utils.checkpoint, use_reentrant=False), AdamW foreach (lr 1e-4, weight decay 0.01).

Then sampling under inference_mode: 6 Heun steps (second-order, 11 model evaluations) from t = 1 to 0
with classifier-free guidance 1.5 on 48 images (batch doubled with the null class) under fp16 autocast.
Then a validation loss with a `.half()` copy of the model (deepcopy) under no_grad at batch 256 over 4
fixed timesteps.

Phases: the first step; 3 more steps; Heun CFG sampling; half-model validation. 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import Attention, Mlp, PatchEmbed
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2002)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    B, LAT, HID, DEPTH, HEADS, STEPS, SAMPLE_B, HEUN, VAL_B = 4, 8, 64, 2, 4, 1, 2, 2, 4
else:
    B, LAT, HID, DEPTH, HEADS, STEPS, SAMPLE_B, HEUN, VAL_B = 128, 32, 1024, 16, 16, 3, 48, 6, 256
PATCH, C_LAT, N_CLASSES = 2, 4, 1000


def report(tag):
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"{tag}: max allocated {peak} reserved {reserved}")
        torch.cuda.reset_peak_memory_stats()


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class SiTBlock(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, num_heads=heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(hidden, hidden * 4, act_layer=lambda: nn.GELU(approximate="tanh"), drop=0)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))
        nn.init.zeros_(self.adaLN_modulation[-1].weight)
        nn.init.zeros_(self.adaLN_modulation[-1].bias)

    def forward(self, x, c):
        sm, cm, gm, sf, cf, gf = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gm.unsqueeze(1) * self.attn(modulate(self.norm1(x), sm, cm))
        return x + gf.unsqueeze(1) * self.mlp(modulate(self.norm2(x), sf, cf))


class SiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.x_embedder = PatchEmbed(LAT, PATCH, C_LAT, HID, bias=True)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.x_embedder.num_patches, HID))
        nn.init.normal_(self.pos_embed, std=0.02)
        self.t_mlp = nn.Sequential(nn.Linear(256, HID), nn.SiLU(), nn.Linear(HID, HID))
        self.y_table = nn.Embedding(N_CLASSES + 1, HID)
        self.blocks = nn.ModuleList([SiTBlock(HID, HEADS) for _ in range(DEPTH)])
        self.norm_final = nn.LayerNorm(HID, elementwise_affine=False, eps=1e-6)
        self.final_mod = nn.Sequential(nn.SiLU(), nn.Linear(HID, 2 * HID))
        self.final = nn.Linear(HID, PATCH * PATCH * C_LAT)
        nn.init.zeros_(self.final_mod[-1].weight)
        nn.init.zeros_(self.final_mod[-1].bias)
        nn.init.zeros_(self.final.weight)
        nn.init.zeros_(self.final.bias)
        self.grad_checkpointing = False

    def forward(self, x, t, y):
        if self.training:
            drop = torch.rand(y.shape[0], device=y.device) < 0.1
            y = torch.where(drop, N_CLASSES, y)
        x = self.x_embedder(x) + self.pos_embed
        t_freq = timestep_embedding(t * 1000, 256).to(self.pos_embed.dtype)
        c = self.t_mlp(t_freq) + self.y_table(y)
        for blk in self.blocks:
            if self.grad_checkpointing and self.training:
                x = checkpoint(blk, x, c, use_reentrant=False)
            else:
                x = blk(x, c)
        shift, scale = self.final_mod(c).chunk(2, dim=1)
        x = self.final(modulate(self.norm_final(x), shift, scale))
        h = w = LAT // PATCH
        x = x.reshape(x.shape[0], h, w, PATCH, PATCH, C_LAT).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(x.shape[0], C_LAT, LAT, LAT)


def flow_loss(model, x0, y, t=None):
    if t is None:
        t = torch.sigmoid(torch.randn(x0.shape[0], device=x0.device))
    eps = torch.randn_like(x0)
    tt = t.view(-1, 1, 1, 1)
    xt = (1 - tt) * x0 + tt * eps
    target = eps - x0
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        v = model(xt, t, y)
    return F.mse_loss(v.float(), target)


model = SiT().to(device)
model.grad_checkpointing = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"SiT parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")


def train_step():
    model.train()
    x0 = torch.randn(B, C_LAT, LAT, LAT, device=device)
    y = torch.randint(0, N_CLASSES, (B,), device=device)
    loss = flow_loss(model, x0, y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    return loss.item(), gn.item()


loss, gn = train_step()
print(f"step 0 loss {loss:.4f} grad norm {gn:.3f} scale {scaler.get_scale()}")
report("first step")
for _ in range(STEPS):
    loss, gn = train_step()
print(f"step {STEPS} loss {loss:.4f} grad norm {gn:.3f}")
report("train")


def velocity(model, x, t, y_in, cfg):
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        v = model(torch.cat([x, x]), t.expand(2 * x.shape[0]), y_in).float()
    cond, uncond = v.chunk(2)
    return uncond + cfg * (cond - uncond)


model.eval()
with torch.inference_mode():
    y = torch.randint(0, N_CLASSES, (SAMPLE_B,), device=device)
    y_in = torch.cat([y, torch.full_like(y, N_CLASSES)])
    x = torch.randn(SAMPLE_B, C_LAT, LAT, LAT, device=device)
    ts = torch.linspace(1.0, 0.0, HEUN + 1, device=device)
    for i in range(HEUN):
        t_cur, t_next = ts[i], ts[i + 1]
        d = velocity(model, x, t_cur, y_in, 1.5)
        x_next = x + (t_next - t_cur) * d
        if i < HEUN - 1:
            d2 = velocity(model, x_next, t_next, y_in, 1.5)
            x_next = x + (t_next - t_cur) * 0.5 * (d + d2)
        x = x_next
print(f"samples mean {x.mean().item():.4f} std {x.std().item():.4f}")
report("heun sampling")
del x, x_next, d

half = copy.deepcopy(model).half().eval()
with torch.no_grad():
    x0 = torch.randn(VAL_B, C_LAT, LAT, LAT, device=device, dtype=torch.float16)
    y = torch.randint(0, N_CLASSES, (VAL_B,), device=device)
    losses = []
    for tv in (0.1, 0.3, 0.6, 0.9):
        t = torch.full((VAL_B,), tv, device=device, dtype=torch.float16)
        eps = torch.randn_like(x0)
        xt = (1 - tv) * x0 + tv * eps
        v = half(xt, t, y)
        losses.append(F.mse_loss(v.float(), (eps - x0).float()).item())
print("val losses " + " ".join(f"{v:.4f}" for v in losses))
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()}")
