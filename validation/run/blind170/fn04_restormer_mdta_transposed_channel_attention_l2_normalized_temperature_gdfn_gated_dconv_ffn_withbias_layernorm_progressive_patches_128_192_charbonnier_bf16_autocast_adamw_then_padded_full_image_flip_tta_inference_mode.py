"""Restormer for image deraining as swz30/Restormer (basicsr/models/archs/restormer_arch.py,
Deraining/Options/Deraining_Restormer.yml, test.py) writes it, by hand without einops: OverlapPatchEmbed
(3 x 3 conv to 48 channels), a 4-level encoder-decoder of TransformerBlocks ([4, 6, 6, 8] blocks,
[1, 2, 4, 8] heads, widths 48/96/192/384) with Downsample (conv to half the channels, PixelUnshuffle(2))
and Upsample (conv to twice, PixelShuffle(2)), 1 x 1 convs reducing the concatenated skips, four
refinement blocks and the output conv with the global residual. Each TransformerBlock: the WithBias
LayerNorm over channels (to (b, hw, c) by flatten and transpose, mean and unbiased=False var), MDTA
(1 x 1 qkv conv, 3 x 3 depthwise conv over 3c, heads split as (b, head, c, hw), F.normalize on q and
k along hw, q @ k^T times a learned per-head temperature, softmax, @ v, 1 x 1 projection) and GDFN
(1 x 1 conv to 2 x 2.66c, 3 x 3 depthwise conv, chunk, gelu(x1) * x2, 1 x 1 conv), no biases. bf16
autocast, AdamW (lr 3e-4, weight decay 1e-4, betas 0.9/0.999), clip_grad_norm_ 0.01, the Charbonnier
loss (sqrt(diff^2 + 1e-6)), progressive learning. Phases: the first step at batch 8 of 128 x 128
patches, a second step, two steps at batch 4 of 192 x 192 (the next progressive stage); then test.py's
full-image test of two 481 x 321 rainy images padded to a multiple of 8 by reflect F.pad, under
inference_mode with bf16 autocast, and a horizontal and vertical flip test-time ensemble of a
512 x 512 image (the three outputs flipped back and averaged) (4 phases after the model's creation)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17004)
if SMALL:
    DIM, BLOCKS, REFINE, B1, P1, B2, P2, VAL, TTA = 8, (1, 1, 1, 1), 1, 2, 32, 2, 48, (33, 21), 40
else:
    DIM, BLOCKS, REFINE, B1, P1, B2, P2, VAL, TTA = 48, (4, 6, 6, 8), 4, 8, 128, 4, 192, (321, 481), 512
HEADS, FFN_FACTOR = (1, 2, 4, 8), 2.66
device = "cuda" if torch.cuda.is_available() else "cpu"
dev_type = "cuda" if device == "cuda" else "cpu"


class WithBiasLayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        b, c, h, w = x.shape
        x3 = x.flatten(2).transpose(1, 2)
        mu = x3.mean(-1, keepdim=True)
        sigma = x3.var(-1, keepdim=True, unbiased=False)
        y = (x3 - mu) / torch.sqrt(sigma + 1e-5) * self.weight + self.bias
        return y.transpose(1, 2).reshape(b, c, h, w)


class FeedForward(nn.Module):
    def __init__(self, dim, ffn_expansion_factor, bias=False):
        super().__init__()
        hidden = int(dim * ffn_expansion_factor)
        self.project_in = nn.Conv2d(dim, hidden * 2, kernel_size=1, bias=bias)
        self.dwconv = nn.Conv2d(hidden * 2, hidden * 2, 3, 1, 1, groups=hidden * 2, bias=bias)
        self.project_out = nn.Conv2d(hidden, dim, kernel_size=1, bias=bias)

    def forward(self, x):
        x = self.project_in(x)
        x1, x2 = self.dwconv(x).chunk(2, dim=1)
        x = F.gelu(x1) * x2
        return self.project_out(x)


class Attention(nn.Module):
    def __init__(self, dim, num_heads, bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.qkv = nn.Conv2d(dim, dim * 3, kernel_size=1, bias=bias)
        self.qkv_dwconv = nn.Conv2d(dim * 3, dim * 3, 3, 1, 1, groups=dim * 3, bias=bias)
        self.project_out = nn.Conv2d(dim, dim, kernel_size=1, bias=bias)

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.qkv_dwconv(self.qkv(x))
        q, k, v = qkv.chunk(3, dim=1)
        q = q.reshape(b, self.num_heads, c // self.num_heads, h * w)
        k = k.reshape(b, self.num_heads, c // self.num_heads, h * w)
        v = v.reshape(b, self.num_heads, c // self.num_heads, h * w)
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.temperature
        attn = attn.softmax(dim=-1)
        out = attn @ v
        out = out.reshape(b, c, h, w)
        return self.project_out(out)


class TransformerBlock(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = WithBiasLayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = WithBiasLayerNorm(dim)
        self.ffn = FeedForward(dim, FFN_FACTOR)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


def Downsample(n_feat):
    return nn.Sequential(nn.Conv2d(n_feat, n_feat // 2, 3, 1, 1, bias=False), nn.PixelUnshuffle(2))


def Upsample(n_feat):
    return nn.Sequential(nn.Conv2d(n_feat, n_feat * 2, 3, 1, 1, bias=False), nn.PixelShuffle(2))


def stage(dim, n, heads):
    return nn.Sequential(*[TransformerBlock(dim, heads) for _ in range(n)])


class Restormer(nn.Module):
    def __init__(self, dim=48, num_blocks=(4, 6, 6, 8), num_refinement_blocks=4, heads=(1, 2, 4, 8)):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 3, 1, 1, bias=False)
        self.encoder_level1 = stage(dim, num_blocks[0], heads[0])
        self.down1_2 = Downsample(dim)
        self.encoder_level2 = stage(dim * 2, num_blocks[1], heads[1])
        self.down2_3 = Downsample(dim * 2)
        self.encoder_level3 = stage(dim * 4, num_blocks[2], heads[2])
        self.down3_4 = Downsample(dim * 4)
        self.latent = stage(dim * 8, num_blocks[3], heads[3])
        self.up4_3 = Upsample(dim * 8)
        self.reduce_chan_level3 = nn.Conv2d(dim * 8, dim * 4, kernel_size=1, bias=False)
        self.decoder_level3 = stage(dim * 4, num_blocks[2], heads[2])
        self.up3_2 = Upsample(dim * 4)
        self.reduce_chan_level2 = nn.Conv2d(dim * 4, dim * 2, kernel_size=1, bias=False)
        self.decoder_level2 = stage(dim * 2, num_blocks[1], heads[1])
        self.up2_1 = Upsample(dim * 2)
        self.decoder_level1 = stage(dim * 2, num_blocks[0], heads[0])
        self.refinement = stage(dim * 2, num_refinement_blocks, heads[0])
        self.output = nn.Conv2d(dim * 2, 3, 3, 1, 1, bias=False)

    def forward(self, inp_img):
        inp_enc_level1 = self.patch_embed(inp_img)
        out_enc_level1 = self.encoder_level1(inp_enc_level1)
        inp_enc_level2 = self.down1_2(out_enc_level1)
        out_enc_level2 = self.encoder_level2(inp_enc_level2)
        inp_enc_level3 = self.down2_3(out_enc_level2)
        out_enc_level3 = self.encoder_level3(inp_enc_level3)
        inp_enc_level4 = self.down3_4(out_enc_level3)
        latent = self.latent(inp_enc_level4)
        inp_dec_level3 = self.up4_3(latent)
        inp_dec_level3 = torch.cat([inp_dec_level3, out_enc_level3], 1)
        inp_dec_level3 = self.reduce_chan_level3(inp_dec_level3)
        out_dec_level3 = self.decoder_level3(inp_dec_level3)
        inp_dec_level2 = self.up3_2(out_dec_level3)
        inp_dec_level2 = torch.cat([inp_dec_level2, out_enc_level2], 1)
        inp_dec_level2 = self.reduce_chan_level2(inp_dec_level2)
        out_dec_level2 = self.decoder_level2(inp_dec_level2)
        inp_dec_level1 = self.up2_1(out_dec_level2)
        inp_dec_level1 = torch.cat([inp_dec_level1, out_enc_level1], 1)
        out_dec_level1 = self.decoder_level1(inp_dec_level1)
        out_dec_level1 = self.refinement(out_dec_level1)
        return self.output(out_dec_level1) + inp_img


class CharbonnierLoss(nn.Module):
    def __init__(self, eps=1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, x, y):
        diff = x - y
        return torch.mean(torch.sqrt((diff * diff) + (self.eps * self.eps)))


model = Restormer(DIM, BLOCKS, REFINE, HEADS).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4, betas=(0.9, 0.999))
criterion = CharbonnierLoss()
gen = torch.Generator().manual_seed(17004)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def rainy(n, h, w):
    base = torch.rand(n, 3, max(h // 8, 1), max(w // 8, 1), generator=gen)
    clean = F.interpolate(base, size=(h, w), mode="bilinear", align_corners=False)
    streaks = (torch.rand(n, 1, h, w, generator=gen) > 0.97).float()
    streaks = F.avg_pool2d(streaks, (7, 1), stride=1, padding=(3, 0))
    return (clean + 0.8 * streaks).clamp(0, 1).to(device), clean.to(device)


def train_step(b, p):
    lq, gt = rainy(b, p, p)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(dev_type, dtype=torch.bfloat16):
        out = model(lq)
    loss = criterion(out.float(), gt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    optimizer.step()
    return loss.item()


model.train()
print(f"step 0 charbonnier {train_step(B1, P1):.4f}")
if device == "cuda":
    print(f"step0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
print(f"step 1 charbonnier {train_step(B1, P1):.4f}")
if device == "cuda":
    print(f"step1 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for s in (2, 3):
    print(f"step {s} (192) charbonnier {train_step(B2, P2):.4f}")
if device == "cuda":
    print(f"stage2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
factor = 8
psnrs = []
with torch.inference_mode(), torch.autocast(dev_type, dtype=torch.bfloat16):
    for _ in range(2):
        input_, target = rainy(1, *VAL)
        h, w = input_.shape[2], input_.shape[3]
        H, W = ((h + factor) // factor) * factor, ((w + factor) // factor) * factor
        padh = H - h if h % factor != 0 else 0
        padw = W - w if w % factor != 0 else 0
        input_ = F.pad(input_, (0, padw, 0, padh), "reflect")
        restored = model(input_)
        restored = torch.clamp(restored, 0, 1)[:, :, :h, :w].float()
        psnrs.append((10 * torch.log10(1 / F.mse_loss(restored, target))).item())
        del input_, target, restored
print(f"test psnr {sum(psnrs) / len(psnrs):.2f}")
if device == "cuda":
    print(f"test peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast(dev_type, dtype=torch.bfloat16):
    img, _ = rainy(1, TTA, TTA)
    out = model(img)
    out = out + torch.flip(model(torch.flip(img, [3])), [3])
    out = out + torch.flip(model(torch.flip(img, [2])), [2])
    out = (out / 3).float().clamp_(0, 1)
    out_u8 = (out * 255.0).round().to(torch.uint8)
print(f"tta {tuple(out_u8.shape)}")
if device == "cuda":
    print(
        f"tta allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
