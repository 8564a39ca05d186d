"""SwinIR for classical image super-resolution x2 as JingyunLiang/SwinIR (models/network_swinir.py,
main_test_swinir.py) writes it, by hand: a 3 x 3 shallow conv to 180 channels, six residual Swin
Transformer blocks (RSTB) of six Swin layers each (window 8, 6 heads, MLP ratio 2, LayerNorm,
shifted windows on every other layer by torch.roll with the (-inf-free) -100 attention mask built by
calculate_mask over img_mask slices and registered as a buffer for the training size, recomputed on
the fly for other sizes; the relative position bias table of (2 * 8 - 1)^2 x heads gathered by the
registered relative_position_index; qkv Linear, q * head_dim^-0.5 @ k^T, softmax, @ v by hand; window
partition / reverse by view and permute), PatchEmbed / PatchUnEmbed by flatten and transpose, a
3 x 3 conv closing each RSTB and the body, the 'pixelshuffle' upsampler (conv to 64, LeakyReLU,
conv to 256, PixelShuffle(2), conv_last), the DIV2K mean subtracted and added back. bf16 autocast,
Adam (lr 2e-4, betas 0.9/0.99), MultiStepLR, the L1 loss. Phases: one step at batch 16 of 48 x 48 LR
crops (96 x 96 HR), two more steps, one step at batch 32 with use_checkpoint (torch.utils.checkpoint
per Swin layer, use_reentrant=False); then main_test_swinir's full-image test: two 256 x 252 LR
images padded to a multiple of the window by concatenating their flips, under no_grad in fp32, and a
360 x 500 image under inference_mode and bf16 autocast (4 phases after the model's creation)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17002)
if SMALL:
    DIM, DEPTHS, HEADS, B, LR, B_CKPT, VAL, BIG = 24, (2, 2), (2, 2), 2, 16, 2, (20, 18), (24, 36)
else:
    DIM, DEPTHS, HEADS, B, LR, B_CKPT, VAL, BIG = 180, (6,) * 6, (6,) * 6, 16, 48, 32, (256, 252), (360, 500)
WS, MLP_RATIO, SCALE, NUM_FEAT = 8, 2.0, 2, 64
device = "cuda" if torch.cuda.is_available() else "cpu"


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def window_partition(x, window_size):
    b, h, w, c = x.shape
    x = x.view(b, h // window_size, window_size, w // window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, c)


def window_reverse(windows, window_size, h, w):
    b = int(windows.shape[0] / (h * w / window_size / window_size))
    x = windows.view(b, h // window_size, w // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim, window_size, num_heads):
        super().__init__()
        self.dim = dim
        self.window_size = window_size
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads)
        )
        coords_h = torch.arange(window_size[0])
        coords_w = torch.arange(window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += window_size[0] - 1
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        self.register_buffer("relative_position_index", relative_coords.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        relative_position_bias = self.relative_position_bias_table[
            self.relative_position_index.view(-1)
        ].view(self.window_size[0] * self.window_size[1], self.window_size[0] * self.window_size[1], -1)
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
        attn = attn + relative_position_bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b_ // nw, nw, self.num_heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = self.softmax(attn)
        x = (attn @ v).transpose(1, 2).reshape(b_, n, c)
        return self.proj(x)


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, input_resolution, num_heads, window_size=8, shift_size=0, mlp_ratio=2.0):
        super().__init__()
        self.input_resolution = input_resolution
        self.window_size = window_size
        self.shift_size = shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, (window_size, window_size), num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        attn_mask = self.calculate_mask(input_resolution) if self.shift_size > 0 else None
        self.register_buffer("attn_mask", attn_mask)

    def calculate_mask(self, x_size):
        h, w = x_size
        img_mask = torch.zeros((1, h, w, 1))
        h_slices = (
            slice(0, -self.window_size),
            slice(-self.window_size, -self.shift_size),
            slice(-self.shift_size, None),
        )
        cnt = 0
        for hs in h_slices:
            for ws in h_slices:
                img_mask[:, hs, ws, :] = cnt
                cnt += 1
        mask_windows = window_partition(img_mask, self.window_size).view(
            -1, self.window_size * self.window_size
        )
        attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
        return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)

    def forward(self, x, x_size):
        h, w = x_size
        b, _, c = x.shape
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        x_windows = window_partition(x, self.window_size).view(-1, self.window_size * self.window_size, c)
        if self.input_resolution == x_size:
            attn_windows = self.attn(x_windows, mask=self.attn_mask)
        else:
            mask = self.calculate_mask(x_size).to(x.device) if self.shift_size > 0 else None
            attn_windows = self.attn(x_windows, mask=mask)
        attn_windows = attn_windows.view(-1, self.window_size, self.window_size, c)
        x = window_reverse(attn_windows, self.window_size, h, w)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        x = shortcut + x.view(b, h * w, c)
        return x + self.mlp(self.norm2(x))


class RSTB(nn.Module):
    def __init__(self, dim, input_resolution, depth, num_heads):
        super().__init__()
        self.blocks = nn.ModuleList(
            SwinTransformerBlock(
                dim, input_resolution, num_heads, WS, 0 if i % 2 == 0 else WS // 2, MLP_RATIO
            )
            for i in range(depth)
        )
        self.conv = nn.Conv2d(dim, dim, 3, 1, 1)
        self.use_checkpoint = False

    def forward(self, x, x_size):
        res = x
        for blk in self.blocks:
            if self.use_checkpoint:
                x = cp.checkpoint(blk, x, x_size, use_reentrant=False)
            else:
                x = blk(x, x_size)
        b, _, c = x.shape
        x = x.transpose(1, 2).view(b, c, x_size[0], x_size[1])
        return self.conv(x).flatten(2).transpose(1, 2) + res


class SwinIR(nn.Module):
    def __init__(self, img_size=48, embed_dim=180, depths=(6,) * 6, num_heads=(6,) * 6):
        super().__init__()
        self.register_buffer("mean", torch.Tensor((0.4488, 0.4371, 0.4040)).view(1, 3, 1, 1))
        self.window_size = WS
        self.conv_first = nn.Conv2d(3, embed_dim, 3, 1, 1)
        self.patch_norm = nn.LayerNorm(embed_dim)
        self.layers = nn.ModuleList(
            RSTB(embed_dim, (img_size, img_size), d, h) for d, h in zip(depths, num_heads, strict=True)
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.conv_after_body = nn.Conv2d(embed_dim, embed_dim, 3, 1, 1)
        self.conv_before_upsample = nn.Sequential(
            nn.Conv2d(embed_dim, NUM_FEAT, 3, 1, 1), nn.LeakyReLU(inplace=True)
        )
        self.upsample = nn.Sequential(nn.Conv2d(NUM_FEAT, 4 * NUM_FEAT, 3, 1, 1), nn.PixelShuffle(2))
        self.conv_last = nn.Conv2d(NUM_FEAT, 3, 3, 1, 1)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward_features(self, x):
        x_size = (x.shape[2], x.shape[3])
        x = self.patch_norm(x.flatten(2).transpose(1, 2))
        for layer in self.layers:
            x = layer(x, x_size)
        x = self.norm(x)
        b, _, c = x.shape
        return x.transpose(1, 2).view(b, c, x_size[0], x_size[1])

    def forward(self, x):
        h, w = x.shape[2:]
        mean = self.mean.type_as(x)
        x = x - mean
        x = self.conv_first(x)
        x = self.conv_after_body(self.forward_features(x)) + x
        x = self.conv_before_upsample(x)
        x = self.conv_last(self.upsample(x))
        x = x + mean
        return x[:, :, : h * SCALE, : w * SCALE]


model = SwinIR(LR, DIM, DEPTHS, HEADS).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.9, 0.99))
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [250000, 400000, 450000, 475000], 0.5)
gen = torch.Generator().manual_seed(17002)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def pair(n, h, w):
    base = torch.rand(n, 3, max(h // 6, 1), max(w // 6, 1), generator=gen)
    gt = F.interpolate(base, size=(h * SCALE, w * SCALE), mode="bicubic", align_corners=False).clamp_(0, 1)
    gt = gt.to(device)
    lq = F.interpolate(gt, size=(h, w), mode="bicubic", antialias=True, align_corners=False).clamp_(0, 1)
    return lq, gt


def train_step(n):
    lq, gt = pair(n, LR, LR)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        out = model(lq)
    loss = F.l1_loss(out.float(), gt)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


model.train()
print(f"step 0 l1 {train_step(B):.4f}")
if device == "cuda":
    print(f"step0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for s in (1, 2):
    print(f"step {s} l1 {train_step(B):.4f}")
if device == "cuda":
    print(f"steps peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for layer in model.layers:
    layer.use_checkpoint = True
print(f"ckpt step l1 {train_step(B_CKPT):.4f}")
for layer in model.layers:
    layer.use_checkpoint = False
if device == "cuda":
    print(f"ckpt peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
psnr = 0.0
with torch.no_grad():
    for _ in range(2):
        img_lq, img_gt = pair(1, *VAL)
        _, _, h_old, w_old = img_lq.size()
        h_pad = (h_old // WS + 1) * WS - h_old
        w_pad = (w_old // WS + 1) * WS - w_old
        img_lq = torch.cat([img_lq, torch.flip(img_lq, [2])], 2)[:, :, : h_old + h_pad, :]
        img_lq = torch.cat([img_lq, torch.flip(img_lq, [3])], 3)[:, :, :, : w_old + w_pad]
        output = model(img_lq)
        output = output[..., : h_old * SCALE, : w_old * SCALE].clamp_(0, 1)
        mse = F.mse_loss(output, img_gt)
        psnr += (10 * torch.log10(1.0 / mse)).item()
        del output, img_lq, img_gt, mse
print(f"val psnr {psnr / 2:.2f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
    img_lq, _ = pair(1, *BIG)
    _, _, h_old, w_old = img_lq.size()
    h_pad = (h_old // WS + 1) * WS - h_old
    w_pad = (w_old // WS + 1) * WS - w_old
    img_lq = torch.cat([img_lq, torch.flip(img_lq, [2])], 2)[:, :, : h_old + h_pad, :]
    img_lq = torch.cat([img_lq, torch.flip(img_lq, [3])], 3)[:, :, :, : w_old + w_pad]
    output = model(img_lq)[..., : h_old * SCALE, : w_old * SCALE]
    out_u8 = (output.float().clamp(0, 1) * 255.0).round().to(torch.uint8)
print(f"big {tuple(out_u8.shape)}")
if device == "cuda":
    print(
        f"big allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
