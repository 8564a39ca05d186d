"""A Pangu-Weather-like 3-D Earth-specific transformer written after the paper's pseudocode: upper-air
fields (5 variables: Z, Q, T, U, V on 13 pressure levels) and surface fields (4 variables plus 3
constant masks) on a 192 x 384 lat-lon grid. The upper air is padded to 14 levels and embedded by a
Conv3d with patch (2, 4, 4), the surface by a Conv2d with patch 4, stacked along the level axis into
8 x 48 x 96 tokens of 192. Encoder: 2 blocks at 192 channels, patch merging (2 x 2 in lat/lon, LayerNorm
and Linear(4C, 2C)) to 8 x 24 x 48 tokens of 384, 6 blocks; decoder: 6 blocks at 384, upsampling
(Linear(C, 4C') and a pixel-shuffle reshape, LayerNorm, Linear) back to 192, 2 blocks, the encoder's
first-stage output concatenated, then patch recovery by ConvTranspose3d / ConvTranspose2d and the
padded level cropped. Every block is an Earth-specific 3-D window attention (windows of 2 x 8 x 16 =
256 tokens, 6 / 12 heads of 32): the Earth-specific positional bias is a learned table indexed by
the within-window relative position and differing for every (level, latitude) window type, added
together with the shifted-window mask (odd blocks roll by half a window; latitude and level
boundaries masked, longitude periodic) as a float attn_mask of F.scaled_dot_product_attention with
the window types folded into the head axis; then a GELU MLP of ratio 4 and DropPath (linearly up to
0.2).

Batch 2, bf16 autocast, fused AdamW (lr 5e-4, weight decay 3e-6), L1 loss with the surface weighted
0.25. Phases: the first step; 2 more steps; a 2-step autoregressive forecast (24 h -> 48 h) under
no_grad and bf16 autocast; a deep-copied .bfloat16() model forecasting 4 steps under
torch.inference_mode, the surface fields moved to the host. 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18702)
if SMALL:
    B, LAT, LON, DIM, DEPTHS, STEPS = 1, 64, 128, 48, (2, 2), 1
else:
    B, LAT, LON, DIM, DEPTHS, STEPS = 2, 192, 384, 192, (2, 6), 2
LEVELS, UPPER, SURF, MASKS = 13, 5, 4, 3
WINDOW = (2, 8, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def position_index(wz, wh, ww):
    coords_zi = torch.arange(wz)
    coords_zj = -torch.arange(wz) * wz
    coords_hi = torch.arange(wh)
    coords_hj = -torch.arange(wh) * wh
    coords_w = torch.arange(ww)
    c1 = torch.stack(torch.meshgrid(coords_zi, coords_hi, coords_w, indexing="ij")).flatten(1)
    c2 = torch.stack(torch.meshgrid(coords_zj, coords_hj, coords_w, indexing="ij")).flatten(1)
    coords = (c1[:, :, None] - c2[:, None, :]).permute(1, 2, 0).contiguous()
    coords[:, :, 2] += ww - 1
    coords[:, :, 1] *= 2 * ww - 1
    coords[:, :, 0] *= (2 * ww - 1) * wh * wh
    return coords.sum(-1).flatten()


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = 1 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class EarthAttention3D(nn.Module):
    def __init__(self, dim, heads, res, window):
        super().__init__()
        self.heads = heads
        self.window = window
        wz, wh, ww = window
        self.n_types = (res[0] // wz) * (res[1] // wh)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.earth_specific_bias = nn.Parameter(
            torch.zeros((2 * ww - 1) * wh * wh * wz * wz, self.n_types, heads)
        )
        nn.init.trunc_normal_(self.earth_specific_bias, std=0.02)
        self.register_buffer("position_index", position_index(*window), persistent=False)

    def forward(self, x, mask):
        # x: (B * n_lon_windows, n_types, N, C)
        b_, nt, n, c = x.shape
        hd = c // self.heads
        qkv = self.qkv(x).reshape(b_, nt, n, 3, self.heads, hd).permute(3, 0, 1, 4, 2, 5)
        q, k, v = (t.reshape(b_, nt * self.heads, n, hd) for t in qkv.unbind(0))
        bias = self.earth_specific_bias[self.position_index].reshape(n, n, nt, self.heads).permute(2, 3, 0, 1)
        if mask is not None:
            bias = bias + mask[:, None]
        bias = bias.reshape(1, nt * self.heads, n, n).to(q.dtype)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        o = o.reshape(b_, nt, self.heads, n, hd).transpose(2, 3).reshape(b_, nt, n, c)
        return self.proj(o)


def shift_mask(res, window, device):
    z, h, w = res
    wz, wh, ww = window
    sz, sh = wz // 2, wh // 2
    img = torch.zeros(z, h, w, device=device)
    cnt = 0
    for zs in (slice(0, -wz), slice(-wz, -sz), slice(-sz, None)):
        for hs in (slice(0, -wh), slice(-wh, -sh), slice(-sh, None)):
            img[zs, hs, :] = cnt
            cnt += 1
    win = img.view(z // wz, wz, h // wh, wh, w // ww, ww)[:, :, :, :, 0, :]
    win = win.permute(0, 2, 1, 3, 4).reshape(-1, wz * wh * ww)
    diff = win[:, None, :] - win[:, :, None]
    return diff.ne(0).float() * -100.0


class EarthSpecificBlock(nn.Module):
    def __init__(self, dim, heads, res, window, shift, drop_path):
        super().__init__()
        self.res = res
        self.window = window
        self.shift = shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = EarthAttention3D(dim, heads, res, window)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop_path = DropPath(drop_path)
        self.mask = None

    def forward(self, x):
        b, z, h, w, c = x.shape
        wz, wh, ww = self.window
        shortcut = x
        x = self.norm1(x)
        if self.shift:
            x = torch.roll(x, shifts=(-(wz // 2), -(wh // 2), -(ww // 2)), dims=(1, 2, 3))
            if self.mask is None or self.mask.device != x.device:
                self.mask = shift_mask(self.res, self.window, x.device)
        x = x.view(b, z // wz, wz, h // wh, wh, w // ww, ww, c)
        x = x.permute(0, 5, 1, 3, 2, 4, 6, 7).reshape(b * (w // ww), (z // wz) * (h // wh), wz * wh * ww, c)
        x = self.attn(x, self.mask if self.shift else None)
        x = x.view(b, w // ww, z // wz, h // wh, wz, wh, ww, c)
        x = x.permute(0, 2, 4, 3, 5, 1, 6, 7).reshape(b, z, h, w, c)
        if self.shift:
            x = torch.roll(x, shifts=(wz // 2, wh // 2, ww // 2), dims=(1, 2, 3))
        x = shortcut + self.drop_path(x)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class DownSample(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.linear = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        b, z, h, w, c = x.shape
        x = (
            x.view(b, z, h // 2, 2, w // 2, 2, c)
            .permute(0, 1, 2, 4, 3, 5, 6)
            .reshape(b, z, h // 2, w // 2, 4 * c)
        )
        return self.linear(self.norm(x))


class UpSample(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.linear1 = nn.Linear(cin, 4 * cout, bias=False)
        self.norm = nn.LayerNorm(cout)
        self.linear2 = nn.Linear(cout, cout, bias=False)

    def forward(self, x):
        b, z, h, w, _ = x.shape
        x = (
            self.linear1(x)
            .view(b, z, h, w, 2, 2, -1)
            .permute(0, 1, 2, 4, 3, 5, 6)
            .reshape(b, z, 2 * h, 2 * w, -1)
        )
        return self.linear2(self.norm(x))


class Pangu(nn.Module):
    def __init__(self, dim, depths):
        super().__init__()
        self.upper_embed = nn.Conv3d(UPPER, dim, kernel_size=(2, 4, 4), stride=(2, 4, 4))
        self.surface_embed = nn.Conv2d(SURF + MASKS, dim, kernel_size=4, stride=4)
        z, h, w = (LEVELS + 1) // 2 + 1, LAT // 4, LON // 4
        res1, res2 = (z, h, w), (z, h // 2, w // 2)
        dpr = torch.linspace(0, 0.2, 2 * sum(depths)).tolist()
        it = iter(dpr)

        def stage(d, dm, heads, res):
            return nn.ModuleList(
                [
                    EarthSpecificBlock(dm, heads, res, WINDOW, shift=i % 2 == 1, drop_path=next(it))
                    for i in range(d)
                ]
            )

        self.layer1 = stage(depths[0], dim, 6, res1)
        self.down = DownSample(dim)
        self.layer2 = stage(depths[1], 2 * dim, 12, res2)
        self.layer3 = stage(depths[1], 2 * dim, 12, res2)
        self.up = UpSample(2 * dim, dim)
        self.layer4 = stage(depths[0], dim, 6, res1)
        self.upper_recover = nn.ConvTranspose3d(2 * dim, UPPER, kernel_size=(2, 4, 4), stride=(2, 4, 4))
        self.surface_recover = nn.ConvTranspose2d(2 * dim, SURF, kernel_size=4, stride=4)

    def forward(self, upper, surface, masks):
        b = upper.shape[0]
        up = F.pad(upper, (0, 0, 0, 0, 0, 1))
        up = self.upper_embed(up).permute(0, 2, 3, 4, 1)
        sf = self.surface_embed(torch.cat([surface, masks.expand(b, -1, -1, -1)], 1)).permute(0, 2, 3, 1)
        x = torch.cat([sf[:, None], up], dim=1)
        for blk in self.layer1:
            x = blk(x)
        skip = x
        x = self.down(x)
        for blk in self.layer2:
            x = blk(x)
        for blk in self.layer3:
            x = blk(x)
        x = self.up(x)
        for blk in self.layer4:
            x = blk(x)
        x = torch.cat([skip, x], dim=-1)
        sf_out = self.surface_recover(x[:, 0].permute(0, 3, 1, 2))
        up_out = self.upper_recover(x[:, 1:].permute(0, 4, 1, 2, 3))[:, :, :LEVELS]
        return up_out, sf_out


model = Pangu(DIM, DEPTHS).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=3e-6, fused=amp)
masks = torch.randn(1, MASKS, LAT, LON, device=device)


def sample():
    upper = torch.randn(B, UPPER, LEVELS, LAT, LON, device=device)
    surface = torch.randn(B, SURF, LAT, LON, device=device)
    return upper, surface


def train_step():
    upper, surface = sample()
    t_upper, t_surface = sample()
    model.train()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        p_upper, p_surface = model(upper, surface, masks)
    loss = F.l1_loss(p_upper.float(), t_upper) + 0.25 * F.l1_loss(p_surface.float(), t_surface)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
upper, surface = sample()
with torch.no_grad():
    for lead in (24, 48):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            upper, surface = model(upper, surface, masks)
        upper, surface = upper.float(), surface.float()
        print(f"{lead} h forecast surface mean {surface.mean().item():.4f}")
if device == "cuda":
    print(f"no_grad rollout peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

fast = copy.deepcopy(model).bfloat16()
with torch.inference_mode():
    upper, surface = (t.bfloat16() for t in sample())
    bmasks = masks.bfloat16()
    outs = []
    for _ in range(4):
        upper, surface = fast(upper, surface, bmasks)
        outs.append(surface.cpu())
print(f"bf16 model forecast {len(outs)} steps, last surface std {outs[-1].float().std().item():.4f}")
if device == "cuda":
    print(f"bf16 model peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
