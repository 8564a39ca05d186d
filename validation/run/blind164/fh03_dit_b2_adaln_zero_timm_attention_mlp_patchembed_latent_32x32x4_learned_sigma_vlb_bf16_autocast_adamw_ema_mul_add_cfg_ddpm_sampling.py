"""DiT as facebookresearch/DiT (models.py, train.py, diffusion/) writes it: DiT-B/2 (hidden 768,
depth 12, 12 heads, patch 2) over 4 x 32 x 32 latents (a 256 x 256 image's SD-VAE latents, here random
numbers scaled by 0.18215), timm's PatchEmbed, Attention and Mlp (GELU tanh), fixed 2-D sin-cos
position embeddings, TimestepEmbedder (256 frequencies into a 768-wide SiLU MLP), LabelEmbedder of
1,000 classes with the null class and label dropout 0.1 by torch.rand, DiTBlocks with adaLN-zero
(a SiLU + Linear(768, 6 x 768) modulation, zero-initialised), the final adaLN layer, unpatchify,
learned sigma (8 output channels): the MSE on epsilon plus the variational bound term of the
detached mean (the normal KL between q's posterior and the model's, fp64 schedule tables gathered by
timestep). Batch 64, bf16 autocast, AdamW (lr 1e-4, weight decay 0), an EMA copy updated by
update_ema's mul_(decay).add_(param, alpha=1 - decay) over named_parameters. Phases: three training
steps (each its own phase), then forward_with_cfg sampling under no_grad: 16 class-conditional latents
by 25 ancestral DDPM steps of the respaced schedule at guidance 4 (4 phases after the models'
creation)."""

import copy
import math
import os
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
from timm.models.vision_transformer import Attention, Mlp, PatchEmbed

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16403)
if SMALL:
    HIDDEN, DEPTH, HEADS, B, LAT, NS, NSTEPS = 64, 2, 4, 4, 8, 2, 5
else:
    HIDDEN, DEPTH, HEADS, B, LAT, NS, NSTEPS = 768, 12, 12, 64, 32, 16, 25
NUM_CLASSES, T = 1000, 1000
device = "cuda" if torch.cuda.is_available() else "cpu"


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size, frequency_embedding_size=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size, bias=True),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size, bias=True),
        )
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
        ).to(device=t.device)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size))


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, hidden_size)
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob

    def token_drop(self, labels, force_drop_ids=None):
        if force_drop_ids is None:
            drop_ids = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
        else:
            drop_ids = force_drop_ids == 1
        return torch.where(drop_ids, self.num_classes, labels)

    def forward(self, labels, train):
        if train and self.dropout_prob > 0:
            labels = self.token_drop(labels)
        return self.embedding_table(labels)


class DiTBlock(nn.Module):
    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        approx_gelu = lambda: nn.GELU(approximate="tanh")  # noqa: E731
        self.mlp = Mlp(
            in_features=hidden_size,
            hidden_features=int(hidden_size * mlp_ratio),
            act_layer=approx_gelu,
            drop=0,
        )
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size, bias=True))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(
            6, dim=1
        )
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class FinalLayer(nn.Module):
    def __init__(self, hidden_size, patch_size, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size, bias=True))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        x = modulate(self.norm_final(x), shift, scale)
        return self.linear(x)


def get_2d_sincos_pos_embed(embed_dim, grid_size):
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0).reshape([2, 1, grid_size, grid_size])

    def emb_1d(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    return np.concatenate([emb_1d(embed_dim // 2, grid[0]), emb_1d(embed_dim // 2, grid[1])], axis=1)


class DiT(nn.Module):
    def __init__(
        self,
        input_size=32,
        patch_size=2,
        in_channels=4,
        hidden_size=768,
        depth=12,
        num_heads=12,
        class_dropout_prob=0.1,
        num_classes=1000,
        learn_sigma=True,
    ):
        super().__init__()
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = in_channels * 2 if learn_sigma else in_channels
        self.patch_size = patch_size
        self.num_heads = num_heads
        self.x_embedder = PatchEmbed(input_size, patch_size, in_channels, hidden_size, bias=True)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        num_patches = self.x_embedder.num_patches
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, hidden_size), requires_grad=False)
        self.blocks = nn.ModuleList([DiTBlock(hidden_size, num_heads) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)
        self.initialize_weights()

    def initialize_weights(self):
        def _basic_init(module):
            if isinstance(module, nn.Linear):
                torch.nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)

        self.apply(_basic_init)
        pos_embed = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], int(self.x_embedder.num_patches**0.5))
        self.pos_embed.data.copy_(torch.from_numpy(pos_embed).float().unsqueeze(0))
        w = self.x_embedder.proj.weight.data
        nn.init.xavier_uniform_(w.view([w.shape[0], -1]))
        nn.init.constant_(self.x_embedder.proj.bias, 0)
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
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
        c = self.out_channels
        p = self.x_embedder.patch_size[0]
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(shape=(x.shape[0], c, h * p, h * p))

    def forward(self, x, t, y):
        x = self.x_embedder(x) + self.pos_embed
        t = self.t_embedder(t)
        y = self.y_embedder(y, self.training)
        c = t + y
        for block in self.blocks:
            x = block(x, c)
        x = self.final_layer(x, c)
        return self.unpatchify(x)

    def forward_with_cfg(self, x, t, y, cfg_scale):
        half = x[: len(x) // 2]
        combined = torch.cat([half, half], dim=0)
        model_out = self.forward(combined, t, y)
        eps, rest = model_out[:, :3], model_out[:, 3:]
        cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
        half_eps = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
        eps = torch.cat([half_eps, half_eps], dim=0)
        return torch.cat([eps, rest], dim=1)


betas = np.linspace(0.0001, 0.02, T, dtype=np.float64)
alphas_cumprod = np.cumprod(1.0 - betas)
alphas_cumprod_prev = np.append(1.0, alphas_cumprod[:-1])
posterior_variance = betas * (1.0 - alphas_cumprod_prev) / (1.0 - alphas_cumprod)
posterior_log_variance_clipped = np.log(np.append(posterior_variance[1], posterior_variance[1:]))
posterior_mean_coef1 = betas * np.sqrt(alphas_cumprod_prev) / (1.0 - alphas_cumprod)
posterior_mean_coef2 = (1.0 - alphas_cumprod_prev) * np.sqrt(1.0 - betas) / (1.0 - alphas_cumprod)


def _extract(arr, timesteps, broadcast_shape):
    res = torch.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
    while len(res.shape) < len(broadcast_shape):
        res = res[..., None]
    return res.expand(broadcast_shape)


def normal_kl(mean1, logvar1, mean2, logvar2):
    return 0.5 * (
        -1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2) + ((mean1 - mean2) ** 2) * torch.exp(-logvar2)
    )


def p_mean_variance(model_output, x_t, t):
    eps, model_var_values = torch.split(model_output, x_t.shape[1], dim=1)
    min_log = _extract(posterior_log_variance_clipped, t, x_t.shape)
    max_log = _extract(np.log(betas), t, x_t.shape)
    frac = (model_var_values + 1) / 2
    model_log_variance = frac * max_log + (1 - frac) * min_log
    pred_xstart = (
        _extract(np.sqrt(1.0 / alphas_cumprod), t, x_t.shape) * x_t
        - _extract(np.sqrt(1.0 / alphas_cumprod - 1), t, x_t.shape) * eps
    )
    mean = (
        _extract(posterior_mean_coef1, t, x_t.shape) * pred_xstart
        + _extract(posterior_mean_coef2, t, x_t.shape) * x_t
    )
    return mean, model_log_variance, eps


def training_losses(model, x_start, t, y):
    noise = torch.randn_like(x_start)
    x_t = (
        _extract(np.sqrt(alphas_cumprod), t, x_start.shape) * x_start
        + _extract(np.sqrt(1.0 - alphas_cumprod), t, x_start.shape) * noise
    )
    model_output = model(x_t, t, y).float()
    eps, var_values = torch.split(model_output, x_start.shape[1], dim=1)
    frozen = torch.cat([eps.detach(), var_values], dim=1)
    mean, log_var, _ = p_mean_variance(frozen, x_t, t)
    true_mean = (
        _extract(posterior_mean_coef1, t, x_t.shape) * x_start
        + _extract(posterior_mean_coef2, t, x_t.shape) * x_t
    )
    true_log_var = _extract(posterior_log_variance_clipped, t, x_t.shape)
    kl = normal_kl(true_mean, true_log_var, mean, log_var).mean(dim=[1, 2, 3]) / math.log(2.0)
    mse = ((noise - eps) ** 2).mean(dim=[1, 2, 3])
    return mse + kl * T / 1000.0


@torch.no_grad()
def update_ema(ema_model, model, decay=0.9999):
    ema_params = OrderedDict(ema_model.named_parameters())
    model_params = OrderedDict(model.named_parameters())
    for name, param in model_params.items():
        ema_params[name].mul_(decay).add_(param.data, alpha=1 - decay)


model = DiT(input_size=LAT, hidden_size=HIDDEN, depth=DEPTH, num_heads=HEADS, num_classes=NUM_CLASSES).to(
    device
)
ema = copy.deepcopy(model).to(device)
ema.requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0)
update_ema(ema, model, decay=0)
model.train()
ema.eval()
g = torch.Generator().manual_seed(16403)
latents = torch.randn(3 * B, 4, LAT, LAT, generator=g)
labels = torch.randint(0, NUM_CLASSES, (3 * B,), generator=g)
if device == "cuda":
    print(f"params {sum(p.numel() for p in model.parameters())} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = latents[step * B : (step + 1) * B].to(device).mul_(0.18215)
    y = labels[step * B : (step + 1) * B].to(device)
    t = torch.randint(0, T, (x.shape[0],), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = training_losses(model, x, t, y).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    update_ema(ema, model)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss
spaced = list(range(0, T, T // NSTEPS))
last = 1.0
new_betas = []
for i in spaced:
    new_betas.append(1 - alphas_cumprod[i] / last)
    last = alphas_cumprod[i]
s_betas = np.array(new_betas)
s_ac = np.cumprod(1.0 - s_betas)
s_ac_prev = np.append(1.0, s_ac[:-1])
s_post_var = s_betas * (1.0 - s_ac_prev) / (1.0 - s_ac)
s_post_logvar = np.log(np.append(s_post_var[1], s_post_var[1:]))
s_coef1 = s_betas * np.sqrt(s_ac_prev) / (1.0 - s_ac)
s_coef2 = (1.0 - s_ac_prev) * np.sqrt(1.0 - s_betas) / (1.0 - s_ac)
map_t = torch.tensor(spaced, device=device)

with torch.no_grad():
    z = torch.randn(NS, 4, LAT, LAT, device=device)
    z = torch.cat([z, z], 0)
    y = torch.randint(0, NUM_CLASSES, (NS,), device=device)
    y = torch.cat([y, torch.full((NS,), NUM_CLASSES, device=device)], 0)
    for i in reversed(range(NSTEPS)):
        t = torch.full((z.shape[0],), i, device=device, dtype=torch.long)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            out = ema.forward_with_cfg(z, map_t[t], y, 4.0).float()
        eps, var_values = torch.split(out, 4, dim=1)
        min_log = _extract(s_post_logvar, t, z.shape)
        max_log = _extract(np.log(s_betas), t, z.shape)
        frac = (var_values + 1) / 2
        log_var = frac * max_log + (1 - frac) * min_log
        x0 = (
            _extract(np.sqrt(1.0 / s_ac), t, z.shape) * z
            - _extract(np.sqrt(1.0 / s_ac - 1), t, z.shape) * eps
        )
        mean = _extract(s_coef1, t, z.shape) * x0 + _extract(s_coef2, t, z.shape) * z
        noise = torch.randn_like(z)
        nonzero_mask = (t != 0).float().view(-1, 1, 1, 1)
        z = mean + nonzero_mask * torch.exp(0.5 * log_var) * noise
    samples, _ = z.chunk(2, dim=0)
    samples = samples / 0.18215
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"sample {tuple(samples.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
