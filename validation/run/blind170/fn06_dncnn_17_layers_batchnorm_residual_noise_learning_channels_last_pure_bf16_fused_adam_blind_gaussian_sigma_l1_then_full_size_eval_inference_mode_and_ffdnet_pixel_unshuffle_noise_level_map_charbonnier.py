"""DnCNN and FFDNet denoisers as cszn/KAIR (models/network_dncnn.py, network_ffdnet.py,
main_train_dncnn.py) write them, in channels_last bf16: DnCNN-B for colour images (17 layers: a 3 x 3
conv to 64 channels and ReLU, fifteen conv / BatchNorm2d(momentum 0.9, eps 1e-4) / ReLU layers, a conv
back to 3 channels; residual learning, the network predicts the noise and the output is x - n), the
whole model converted by .to(dtype=torch.bfloat16, memory_format=torch.channels_last); blind Gaussian
noise with sigma drawn per image in [0, 55] / 255 from a seeded generator; the L1 loss; Adam
(fused=True, lr 1e-4) on the bf16 parameters, MultiStepLR. Batch 128 of 64 x 64 patches in
channels_last. Then FFDNet (PixelUnshuffle(2) of the noisy image, a noise level map of sigma
concatenated as a 13th channel, a conv and ReLU, 13 conv / BN / ReLU layers of 96 channels, a conv to
12 channels and PixelShuffle(2)) in the same dtype and layout, trained with the Charbonnier loss.
Phases: DnCNN's first step; three more steps; DnCNN in eval mode on four full 1,024 x 768 images
under inference_mode (PSNR per image); two FFDNet steps at batch 64 of 96 x 96 patches; FFDNet on a
2,048 x 1,536 image at sigma 50 under no_grad (5 phases after the model's creation)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17006)
if SMALL:
    DEPTH, NC, B, P, FULL, NFULL, F_DEPTH, F_NC, FB, FP, FBIG = (
        5,
        16,
        4,
        32,
        (48, 64),
        2,
        4,
        16,
        4,
        32,
        (64, 96),
    )
else:
    DEPTH, NC, B, P, FULL, NFULL, F_DEPTH, F_NC, FB, FP, FBIG = (
        17,
        64,
        128,
        64,
        (768, 1024),
        4,
        15,
        96,
        64,
        96,
        (1536, 2048),
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
DT, CL = torch.bfloat16, torch.channels_last


def conv_bn_relu(in_nc, out_nc):
    return [
        nn.Conv2d(in_nc, out_nc, 3, 1, 1, bias=True),
        nn.BatchNorm2d(out_nc, momentum=0.9, eps=1e-04, affine=True),
        nn.ReLU(inplace=True),
    ]


class DnCNN(nn.Module):
    def __init__(self, in_nc=3, out_nc=3, nc=64, nb=17):
        super().__init__()
        layers = [nn.Conv2d(in_nc, nc, 3, 1, 1, bias=True), nn.ReLU(inplace=True)]
        for _ in range(nb - 2):
            layers += conv_bn_relu(nc, nc)
        layers.append(nn.Conv2d(nc, out_nc, 3, 1, 1, bias=True))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        n = self.model(x)
        return x - n


class FFDNet(nn.Module):
    def __init__(self, in_nc=3, out_nc=3, nc=96, nb=15):
        super().__init__()
        sf = 2
        self.m_down = nn.PixelUnshuffle(downscale_factor=sf)
        layers = [nn.Conv2d(in_nc * sf * sf + 1, nc, 3, 1, 1, bias=True), nn.ReLU(inplace=True)]
        for _ in range(nb - 2):
            layers += conv_bn_relu(nc, nc)
        layers.append(nn.Conv2d(nc, out_nc * sf * sf, 3, 1, 1, bias=True))
        self.model = nn.Sequential(*layers)
        self.m_up = nn.PixelShuffle(upscale_factor=sf)

    def forward(self, x, sigma):
        h, w = x.size()[-2:]
        padding_bottom = int(torch.ceil(torch.tensor(h / 2)) * 2 - h)
        padding_right = int(torch.ceil(torch.tensor(w / 2)) * 2 - w)
        x = torch.nn.ReplicationPad2d((0, padding_right, 0, padding_bottom))(x)
        x = self.m_down(x)
        m = sigma.repeat(1, 1, x.size()[-2], x.size()[-1])
        x = torch.cat((x, m), 1)
        x = self.model(x)
        x = self.m_up(x)
        return x[..., :h, :w]


gen = torch.Generator().manual_seed(17006)


def clean_noisy(n, h, w, sigma=None):
    base = torch.rand(n, 3, max(h // 8, 1), max(w // 8, 1), generator=gen)
    clean = F.interpolate(base, size=(h, w), mode="bilinear", align_corners=False)
    if sigma is None:
        sig = torch.rand(n, 1, 1, 1, generator=gen) * 55.0 / 255.0
    else:
        sig = torch.full((n, 1, 1, 1), sigma / 255.0)
    noisy = clean + sig * torch.randn(n, 3, h, w, generator=gen)
    to = dict(device=device, dtype=DT, memory_format=CL)
    return noisy.to(**to), clean.to(**to), sig.to(device=device, dtype=DT)


dncnn = DnCNN(3, 3, NC, DEPTH).to(device=device, dtype=DT, memory_format=CL)
optimizer = torch.optim.Adam(dncnn.parameters(), lr=1e-4, fused=True)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [25000, 50000, 75000], 0.5)
print(f"dncnn params {sum(p.numel() for p in dncnn.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def dncnn_step():
    noisy, clean, _ = clean_noisy(B, P, P)
    optimizer.zero_grad()
    out = dncnn(noisy)
    loss = F.l1_loss(out, clean)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


dncnn.train()
print(f"dncnn step 0 l1 {dncnn_step():.4f}")
if device == "cuda":
    print(f"step0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for s in (1, 2, 3):
    print(f"dncnn step {s} l1 {dncnn_step():.4f}")
if device == "cuda":
    print(f"steps peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

dncnn.eval()
with torch.inference_mode():
    for i in range(NFULL):
        noisy, clean, _ = clean_noisy(1, *FULL, sigma=25.0)
        out = dncnn(noisy).float().clamp_(0, 1)
        psnr = 10 * torch.log10(1 / F.mse_loss(out, clean.float()))
        print(f"full {i} psnr {psnr.item():.2f}")
    del noisy, clean, out, psnr
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ffdnet = FFDNet(3, 3, F_NC, F_DEPTH).to(device=device, dtype=DT, memory_format=CL)
f_opt = torch.optim.Adam(ffdnet.parameters(), lr=1e-4, fused=True)
ffdnet.train()
for s in range(2):
    noisy, clean, sig = clean_noisy(FB, FP, FP)
    f_opt.zero_grad()
    out = ffdnet(noisy, sig)
    diff = out.float() - clean.float()
    loss = torch.mean(torch.sqrt(diff * diff + 1e-6))
    loss.backward()
    f_opt.step()
    print(f"ffdnet step {s} charbonnier {loss.item():.4f}")
del noisy, clean, sig, out, diff, loss
if device == "cuda":
    print(f"ffdnet peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ffdnet.eval()
with torch.no_grad():
    noisy, clean, sig = clean_noisy(1, *FBIG, sigma=50.0)
    out = ffdnet(noisy, sig)
    psnr = 10 * torch.log10(1 / F.mse_loss(out.float().clamp(0, 1), clean.float()))
print(f"ffdnet big psnr {psnr.item():.2f}")
if device == "cuda":
    print(
        f"big allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
