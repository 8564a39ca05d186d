"""3-D U-Net (Cicek et al. 2016) as the paper draws it, written by hand: unpadded ("valid")
3 x 3 x 3 convolutions each followed by BatchNorm3d and ReLU, channels doubled before each
2 x 2 x 2 max-pool (32-64, 64-128, 128-256, 256-512), ConvTranspose3d 2 x 2 x 2 stride 2 up-sampling,
the analysis path's features centre-cropped by slicing and concatenated, a final 1 x 1 x 1
convolution to 3 classes; a 132 x 132 x 116 input tile gives a 44 x 44 x 28 output; weighted
softmax cross-entropy with unlabelled voxels ignored (ignore_index 255, sparse annotation); bf16
autocast, batch 2, SGD (lr 0.01, momentum 0.99); 3 steps; then overlap-tile inference under
no_grad of a 1 x 88 x 88 x 56 volume mirror-padded by 44 voxels a side (F.pad reflect), cut into
8 input tiles (F.pad + slicing), run 4 at a time, the 44 x 44 x 28 outputs softmaxed and written
into the output volume; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13906)
B, BASE, GROUP = (1, 4, 2) if SMALL else (2, 32, 4)
TILE_IN, TILE_OUT = (132, 132, 116), (44, 44, 28)
VOL_OUT = (88, 88, 56)
CLASSES = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def conv_bn_relu(cin, cout):
    return [nn.Conv3d(cin, cout, 3), nn.BatchNorm3d(cout), nn.ReLU(inplace=True)]


def center_crop(x, shape):
    d, h, w = x.shape[2:]
    od, oh, ow = shape
    sd, sh, sw = (d - od) // 2, (h - oh) // 2, (w - ow) // 2
    return x[:, :, sd : sd + od, sh : sh + oh, sw : sw + ow]


class UNet3D(nn.Module):
    def __init__(self, base=32, in_ch=1, classes=3):
        super().__init__()
        b = base
        self.enc1 = nn.Sequential(*conv_bn_relu(in_ch, b), *conv_bn_relu(b, 2 * b))
        self.enc2 = nn.Sequential(*conv_bn_relu(2 * b, 2 * b), *conv_bn_relu(2 * b, 4 * b))
        self.enc3 = nn.Sequential(*conv_bn_relu(4 * b, 4 * b), *conv_bn_relu(4 * b, 8 * b))
        self.bottom = nn.Sequential(*conv_bn_relu(8 * b, 8 * b), *conv_bn_relu(8 * b, 16 * b))
        self.up3 = nn.ConvTranspose3d(16 * b, 16 * b, 2, 2)
        self.dec3 = nn.Sequential(*conv_bn_relu(24 * b, 8 * b), *conv_bn_relu(8 * b, 8 * b))
        self.up2 = nn.ConvTranspose3d(8 * b, 8 * b, 2, 2)
        self.dec2 = nn.Sequential(*conv_bn_relu(12 * b, 4 * b), *conv_bn_relu(4 * b, 4 * b))
        self.up1 = nn.ConvTranspose3d(4 * b, 4 * b, 2, 2)
        self.dec1 = nn.Sequential(*conv_bn_relu(6 * b, 2 * b), *conv_bn_relu(2 * b, 2 * b))
        self.out = nn.Conv3d(2 * b, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool3d(e1, 2))
        e3 = self.enc3(F.max_pool3d(e2, 2))
        h = self.bottom(F.max_pool3d(e3, 2))
        h = self.up3(h)
        h = self.dec3(torch.cat([center_crop(e3, h.shape[2:]), h], 1))
        h = self.up2(h)
        h = self.dec2(torch.cat([center_crop(e2, h.shape[2:]), h], 1))
        h = self.up1(h)
        h = self.dec1(torch.cat([center_crop(e1, h.shape[2:]), h], 1))
        return self.out(h)


model = UNet3D(BASE, 1, CLASSES).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.99)
class_weights = torch.tensor([0.2, 1.0, 2.5], device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.randn(B, 1, *TILE_IN, device=device)
    y = torch.randint(0, CLASSES, (B, *TILE_OUT), device=device)
    y[torch.rand(B, *TILE_OUT, device=device) < 0.7] = 255
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    loss = F.cross_entropy(logits.float(), y, weight=class_weights, ignore_index=255)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} out {tuple(logits.shape)}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss
model.eval()
margin = [(i - o) // 2 for i, o in zip(TILE_IN, TILE_OUT, strict=False)]
volume = torch.randn(1, 1, *VOL_OUT, device=device)
padded = F.pad(volume, (margin[2], margin[2], margin[1], margin[1], margin[0], margin[0]), mode="reflect")
probs = torch.zeros(1, CLASSES, *VOL_OUT, device=device)
starts = [
    (d, h, w)
    for d in range(0, VOL_OUT[0], TILE_OUT[0])
    for h in range(0, VOL_OUT[1], TILE_OUT[1])
    for w in range(0, VOL_OUT[2], TILE_OUT[2])
]
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    for g in range(0, len(starts), GROUP):
        group = starts[g : g + GROUP]
        tiles = torch.cat(
            [padded[:, :, d : d + TILE_IN[0], h : h + TILE_IN[1], w : w + TILE_IN[2]] for d, h, w in group]
        )
        out = F.softmax(model(tiles).float(), dim=1)
        for k, (d, h, w) in enumerate(group):
            probs[:, :, d : d + TILE_OUT[0], h : h + TILE_OUT[1], w : w + TILE_OUT[2]] = out[k : k + 1]
if device == "cuda":
    print(
        f"segmented {tuple(probs.shape)} fg {(probs.argmax(1) > 0).float().mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
