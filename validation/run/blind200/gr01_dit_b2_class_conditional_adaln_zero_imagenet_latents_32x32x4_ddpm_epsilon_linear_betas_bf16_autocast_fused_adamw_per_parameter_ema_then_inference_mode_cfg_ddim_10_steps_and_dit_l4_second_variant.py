"""Class-conditional DiT-B/2 (Peebles & Xie) on ImageNet-256-like VAE latents, written by hand.

Model: latents 4 x 32 x 32 cut into 2 x 2 patches by a Conv2d (256 tokens), fixed 2-D sin-cos position
embedding (a buffer), timestep embedder (256 frequencies -> MLP) plus a class embedding table with one
extra "null" row for classifier-free guidance (labels dropped to the null class with probability 0.1), 12
DiT blocks of width 768 with 12 heads (qkv Linear, F.scaled_dot_product_attention, GELU-tanh MLP x4) and
adaLN-Zero conditioning (SiLU + Linear to 6 x 768 shift/scale/gate, zero-initialised), a zero-initialised
final adaLN layer and unpatchify. Objective: DDPM epsilon prediction with 1,000 linear betas (1e-4 to
0.02), x_t = sqrt(abar) x_0 + sqrt(1 - abar) eps, MSE on the noise.

Training at batch 96 under bf16 autocast, fp32 weights, AdamW(fused=True, lr 1e-4, weight decay 0), an
EMA copy of the model (deepcopy, requires_grad False) updated after each step parameter by parameter
(ema.mul_(0.9999).add_(p, alpha=1e-4)) as DiT's update_ema does.

Then sampling from the EMA model under inference_mode: 10 DDIM steps (eta 0) with classifier-free
guidance 4.0 on 32 images (the batch doubled with the null class, one forward per step, eps = uncond +
s (cond - uncond)) under bf16 autocast.

Then a second variant: DiT-L/4-shaped (width 1024, 24 blocks, 16 heads, 4 x 4 patches: 64 tokens), one
training step at batch 128 with the same objective and a fresh fused AdamW.

Phases: the first DiT-B/2 step (with the EMA update); 3 more steps; CFG DDIM sampling; the DiT-L/4 step.
4 phases."""

import copy
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2001)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    B, LAT, STEPS, SAMPLE_B, NFE = 4, 8, 1, 2, 2
    B_CFG = dict(hidden=64, depth=2, heads=4, patch=2)
    L_CFG = dict(hidden=64, depth=2, heads=4, patch=4)
    B_L = 4
else:
    B, LAT, STEPS, SAMPLE_B, NFE = 96, 32, 3, 32, 10
    B_CFG = dict(hidden=768, depth=12, heads=12, patch=2)
    L_CFG = dict(hidden=1024, depth=24, heads=16, patch=4)
    B_L = 128
C_LAT, N_CLASSES, T_STEPS = 4, 1000, 1000


def report(tag):
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated() / 2**20, torch.cuda.memory_reserved() / 2**20
        print(f"{tag}: peak {peak:.1f} MiB reserved {reserved:.1f} MiB")
        torch.cuda.reset_peak_memory_stats()


def get_2d_sincos_pos_embed(embed_dim, grid_size):
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)
    grid = np.stack(grid, axis=0).reshape([2, 1, grid_size, grid_size])

    def one_d(dim, pos):
        omega = np.arange(dim // 2, dtype=np.float64) / (dim / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    emb_h = one_d(embed_dim // 2, grid[0])
    emb_w = one_d(embed_dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq=256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.freq = freq

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(0, half, dtype=torch.float32, device=t.device) / half
        )
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.freq))


class LabelEmbedder(nn.Module):
    def __init__(self, n_classes, hidden, dropout_prob):
        super().__init__()
        self.table = nn.Embedding(n_classes + 1, hidden)
        self.n_classes = n_classes
        self.dropout_prob = dropout_prob

    def forward(self, labels, train):
        if train and self.dropout_prob > 0:
            drop = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
            labels = torch.where(drop, self.n_classes, labels)
        return self.table(labels)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        mlp_hidden = int(hidden * mlp_ratio)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, mlp_hidden), nn.GELU(approximate="tanh"), nn.Linear(mlp_hidden, hidden)
        )
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(
            6, dim=1
        )
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class FinalLayer(nn.Module):
    def __init__(self, hidden, patch, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, patch * patch * out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    def __init__(self, input_size, patch, hidden, depth, heads, in_channels=4, n_classes=1000):
        super().__init__()
        self.patch = patch
        self.in_channels = in_channels
        self.x_embedder = nn.Conv2d(in_channels, hidden, patch, stride=patch)
        self.t_embedder = TimestepEmbedder(hidden)
        self.y_embedder = LabelEmbedder(n_classes, hidden, 0.1)
        grid = input_size // patch
        pos = torch.from_numpy(get_2d_sincos_pos_embed(hidden, grid)).float().unsqueeze(0)
        self.register_buffer("pos_embed", pos, persistent=False)
        self.blocks = nn.ModuleList([DiTBlock(hidden, heads) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden, patch, in_channels)
        self.initialize_weights()

    def initialize_weights(self):
        def _basic_init(module):
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)

        self.apply(_basic_init)
        w = self.x_embedder.weight.data
        nn.init.xavier_uniform_(w.view([w.shape[0], -1]))
        nn.init.normal_(self.y_embedder.table.weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)
        for block in self.blocks:
            nn.init.constant_(block.adaLN_modulation[-1].weight, 0)
            nn.init.constant_(block.adaLN_modulation[-1].bias, 0)
        nn.init.constant_(self.final_layer.adaLN_modulation[-1].weight, 0)
        nn.init.constant_(self.final_layer.adaLN_modulation[-1].bias, 0)
        nn.init.constant_(self.final_layer.linear.weight, 0)
        nn.init.constant_(self.final_layer.linear.bias, 0)

    def unpatchify(self, x):
        c, p = self.in_channels, self.patch
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(x.shape[0], h, w, p, p, c)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], c, h * p, w * p)

    def forward(self, x, t, y):
        x = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y, self.training)
        for block in self.blocks:
            x = block(x, c)
        return self.unpatchify(self.final_layer(x, c))


betas = torch.linspace(1e-4, 0.02, T_STEPS, dtype=torch.float64)
alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).float().to(device)


def diffusion_loss(model, x0, y):
    t = torch.randint(0, T_STEPS, (x0.shape[0],), device=device)
    noise = torch.randn_like(x0)
    abar = alphas_cumprod[t].view(-1, 1, 1, 1)
    xt = abar.sqrt() * x0 + (1 - abar).sqrt() * noise
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        eps = model(xt, t, y)
    return F.mse_loss(eps.float(), noise)


@torch.no_grad()
def update_ema(ema_model, model, decay=0.9999):
    ema_params = dict(ema_model.named_parameters())
    for name, param in model.named_parameters():
        ema_params[name].mul_(decay).add_(param.data, alpha=1 - decay)


model = DiT(LAT, **B_CFG).to(device)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0, fused=amp)
print(f"DiT-B/2 parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")


def train_step(x0, y):
    model.train()
    loss = diffusion_loss(model, x0, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    update_ema(ema, model)
    return loss.item()


latents = torch.randn(B, C_LAT, LAT, LAT, device=device) * 0.18215 * 5
labels = torch.randint(0, N_CLASSES, (B,), device=device)
print(f"step 0 loss {train_step(latents, labels):.4f}")
report("first step")
for _ in range(STEPS):
    latents = torch.randn(B, C_LAT, LAT, LAT, device=device) * 0.18215 * 5
    labels = torch.randint(0, N_CLASSES, (B,), device=device)
    loss = train_step(latents, labels)
print(f"step {STEPS} loss {loss:.4f}")
report("train")

ema.eval()
with torch.inference_mode():
    ts = torch.linspace(T_STEPS - 1, 0, NFE, device=device).long()
    z = torch.randn(SAMPLE_B, C_LAT, LAT, LAT, device=device)
    y = torch.randint(0, N_CLASSES, (SAMPLE_B,), device=device)
    y_in = torch.cat([y, torch.full_like(y, N_CLASSES)])
    for i in range(NFE):
        t = ts[i]
        abar_t = alphas_cumprod[t]
        abar_prev = alphas_cumprod[ts[i + 1]] if i + 1 < NFE else torch.tensor(1.0, device=device)
        z_in = torch.cat([z, z])
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            eps = ema(z_in, t.expand(2 * SAMPLE_B), y_in).float()
        cond, uncond = eps.chunk(2)
        eps = uncond + 4.0 * (cond - uncond)
        x0_pred = (z - (1 - abar_t).sqrt() * eps) / abar_t.sqrt()
        z = abar_prev.sqrt() * x0_pred + (1 - abar_prev).sqrt() * eps
    samples = (z / 0.18215).cpu()
print(f"samples {tuple(samples.shape)} std {samples.std():.3f}")
report("cfg ddim sampling")

model = ema = opt = None
model = DiT(LAT, **L_CFG).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0, fused=amp)
print(f"DiT-L/4 parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")
model.train()
x0 = torch.randn(B_L, C_LAT, LAT, LAT, device=device)
yl = torch.randint(0, N_CLASSES, (B_L,), device=device)
loss = diffusion_loss(model, x0, yl)
opt.zero_grad(set_to_none=True)
loss.backward()
opt.step()
print(f"DiT-L/4 loss {loss.item():.4f}")
if device == "cuda":
    print(f"DiT-L/4 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
