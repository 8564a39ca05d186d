"""UNETR (Hatamizadeh et al. 2022) written by hand after MONAI's networks.nets.UNETR, for BTCV multi-organ CT
segmentation: 1 input channel, 14 classes, 96 x 96 x 96 crops, feature_size 16.

ViT encoder: Conv3d patch embedding (k = s = 16, 216 tokens of 768), learned position embedding, 12 pre-LN
blocks (qkv Linear without bias, F.scaled_dot_product_attention over 12 heads, GELU MLP 3072); the hidden
states after blocks 3, 6, 9 and the final one are reshaped to 768 x 6 x 6 x 6 volumes. Decoder: UnetResBlocks
(Conv3d k 3 + InstanceNorm3d (no affine) + LeakyReLU(0.01), residual 1x1x1 conv when widths differ), the
"PrUp" paths of stacked ConvTranspose3d(k 2, s 2) + UnetResBlock from the hidden states, and up blocks
(ConvTranspose3d, torch.cat with the skip, UnetResBlock) to a 1x1x1 head.

Loss: DiceCE (softmax soft Dice over one-hot labels, smooth 1e-5, plus cross-entropy). Training: bf16
autocast, AdamW(fused, lr 1e-4, weight decay 1e-5), batch 4 crops (RandCropByPosNegLabel's 4 samples of one
volume). Phases: the first step; 3 more; MONAI-style sliding window inference under torch.inference_mode (roi
96^3, sw_batch_size 4, overlap 0.5, Gaussian importance map, sigma 0.125, bf16 autocast) on one 1 x 224 x 224
x 128 volume, argmax to the host; then the ViT frozen (requires_grad_(False)) and the decoder fine-tuned in
fp32 at batch 2 with a new foreach AdamW over the trainable parameters, 2 steps. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(188_02)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    ROI, BATCH, STEPS, VOL, HID, DEPTH, FS = 32, 2, 1, (48, 48, 40), 96, 12, 8
else:
    ROI, BATCH, STEPS, VOL, HID, DEPTH, FS = 96, 4, 3, (224, 224, 128), 768, 12, 16
PATCH = 16
N_CLS = 14
HEADS = 12
GRID = ROI // PATCH


class SABlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HID, 3 * HID, bias=False)
        self.out_proj = nn.Linear(HID, HID)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, HEADS, HID // HEADS).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(o.transpose(1, 2).reshape(b, n, HID))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(HID)
        self.attn = SABlock()
        self.norm2 = nn.LayerNorm(HID)
        self.mlp = nn.Sequential(nn.Linear(HID, 4 * HID), nn.GELU(), nn.Linear(4 * HID, HID))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embeddings = nn.Conv3d(1, HID, PATCH, stride=PATCH)
        self.position_embeddings = nn.Parameter(torch.zeros(1, GRID**3, HID))
        nn.init.trunc_normal_(self.position_embeddings, std=0.02)
        self.blocks = nn.ModuleList(TransformerBlock() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(HID)

    def forward(self, x):
        x = self.patch_embeddings(x).flatten(2).transpose(1, 2) + self.position_embeddings
        hidden = []
        for blk in self.blocks:
            x = blk(x)
            hidden.append(x)
        return self.norm(x), hidden


class UnetResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1, bias=False)
        self.norm1 = nn.InstanceNorm3d(cout)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.InstanceNorm3d(cout)
        self.lrelu = nn.LeakyReLU(0.01, inplace=True)
        self.downsample = cin != cout
        if self.downsample:
            self.conv3 = nn.Conv3d(cin, cout, 1, bias=False)
            self.norm3 = nn.InstanceNorm3d(cout)

    def forward(self, x):
        residual = x
        out = self.lrelu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        if self.downsample:
            residual = self.norm3(self.conv3(residual))
        out += residual
        return self.lrelu(out)


class PrUpBlock(nn.Module):
    def __init__(self, cin, cout, num_layer):
        super().__init__()
        self.transp_conv_init = nn.ConvTranspose3d(cin, cout, 2, stride=2, bias=False)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.ConvTranspose3d(cout, cout, 2, stride=2, bias=False), UnetResBlock(cout, cout))
            for _ in range(num_layer)
        )

    def forward(self, x):
        x = self.transp_conv_init(x)
        for blk in self.blocks:
            x = blk(x)
        return x


class UpBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.transp_conv = nn.ConvTranspose3d(cin, cout, 2, stride=2, bias=False)
        self.conv_block = UnetResBlock(2 * cout, cout)

    def forward(self, x, skip):
        return self.conv_block(torch.cat((self.transp_conv(x), skip), dim=1))


class UNETR(nn.Module):
    def __init__(self):
        super().__init__()
        self.vit = ViT()
        self.encoder1 = UnetResBlock(1, FS)
        self.encoder2 = PrUpBlock(HID, FS * 2, 2)
        self.encoder3 = PrUpBlock(HID, FS * 4, 1)
        self.encoder4 = PrUpBlock(HID, FS * 8, 0)
        self.decoder5 = UpBlock(HID, FS * 8)
        self.decoder4 = UpBlock(FS * 8, FS * 4)
        self.decoder3 = UpBlock(FS * 4, FS * 2)
        self.decoder2 = UpBlock(FS * 2, FS)
        self.out = nn.Conv3d(FS, N_CLS, 1)

    @staticmethod
    def proj_feat(x):
        return x.view(x.size(0), GRID, GRID, GRID, HID).permute(0, 4, 1, 2, 3).contiguous()

    def forward(self, x_in):
        x, hidden = self.vit(x_in)
        enc1 = self.encoder1(x_in)
        enc2 = self.encoder2(self.proj_feat(hidden[3]))
        enc3 = self.encoder3(self.proj_feat(hidden[6]))
        enc4 = self.encoder4(self.proj_feat(hidden[9]))
        dec3 = self.decoder5(self.proj_feat(x), enc4)
        dec2 = self.decoder4(dec3, enc3)
        dec1 = self.decoder3(dec2, enc2)
        return self.out(self.decoder2(dec1, enc1))


def dice_ce(logits, labels):
    ce = F.cross_entropy(logits, labels[:, 0])
    probs = torch.softmax(logits, 1)
    onehot = F.one_hot(labels[:, 0], N_CLS).permute(0, 4, 1, 2, 3).to(probs.dtype)
    dims = [2, 3, 4]
    inter = (probs * onehot).sum(dims)
    denom = probs.sum(dims) + onehot.sum(dims)
    dice = 1.0 - (2.0 * inter + 1e-5) / (denom + 1e-5)
    return dice.mean() + ce


model = UNETR().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def crops(n):
    img = torch.randn(n, 1, ROI, ROI, ROI, device=device)
    lab = torch.randint(0, N_CLS, (n, 1, ROI, ROI, ROI), device=device)
    return img, lab


model.train()
for step in range(STEPS + 1):
    img, lab = crops(BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(img)
    loss = dice_ce(logits.float(), lab)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del img, lab, logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def gaussian_importance_map(roi, sigma_scale=0.125):
    out = None
    for n in roi:
        sigma = n * sigma_scale
        x = torch.arange(n, device=device, dtype=torch.float32) - (n - 1) / 2
        g = torch.exp(-(x**2) / (2 * sigma**2))
        out = g if out is None else out.unsqueeze(-1) * g
    out = out / out.max()
    return out.clamp(min=torch.finfo(torch.float32).eps)


def sliding_window_inference(volume, roi, sw_batch_size, predictor, overlap=0.5):
    spatial = volume.shape[2:]
    intervals = [int(r * (1 - overlap)) for r in roi]
    starts = []
    for size, r, iv in zip(spatial, roi, intervals, strict=True):
        n = math.ceil((size - r) / iv) + 1
        starts.append(sorted({min(i * iv, size - r) for i in range(n)}))
    slices = [(a, b, c) for a in starts[0] for b in starts[1] for c in starts[2]]
    imp = gaussian_importance_map(roi)
    output = None
    count = torch.zeros((1, 1, *spatial), device=device)
    for i in range(0, len(slices), sw_batch_size):
        chunk = slices[i : i + sw_batch_size]
        windows = torch.cat(
            [volume[:, :, a : a + roi[0], b : b + roi[1], c : c + roi[2]] for a, b, c in chunk]
        )
        pred = predictor(windows).float()
        if output is None:
            output = torch.zeros((1, pred.shape[1], *spatial), device=device)
        for j, (a, b, c) in enumerate(chunk):
            output[:, :, a : a + roi[0], b : b + roi[1], c : c + roi[2]] += pred[j : j + 1] * imp
            count[:, :, a : a + roi[0], b : b + roi[1], c : c + roi[2]] += imp
    return output / count, len(slices)


model.eval()
volume = torch.randn(1, 1, *VOL, device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    probs, n_win = sliding_window_inference(volume, (ROI,) * 3, 4, model)
    seg = probs.argmax(1).to(torch.uint8).cpu()
print(f"windows {n_win} segmentation {tuple(seg.shape)}")
del probs, volume
if device == "cuda":
    print(f"inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.vit.requires_grad_(False)
del opt
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=1e-5, foreach=True)
print(f"trainable {sum(p.numel() for p in trainable) / 1e6:.2f}M")
model.train()
for step in range(2):
    img, lab = crops(2)
    loss = dice_ce(model(img), lab)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"decoder step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"finetune allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
