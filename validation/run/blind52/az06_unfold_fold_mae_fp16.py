"""A masked autoencoder written with `F.unfold`/`F.fold`: 224x224 images cut into 16x16 patches by
`unfold`, 75% masked by `argsort` of noise and `gather`, a 8-layer width-768 encoder on the kept
patches (nn.TransformerEncoderLayer, batch_first, norm_first), a 4-layer decoder on all, the image
rebuilt by `fold` and the loss taken on pixels; batch 64, fp16 autocast with GradScaler, AdamW,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5206)
B, IMG, D, LE, LD = (2, 32, 64, 1, 1) if SMALL else (64, 224, 768, 8, 4)
P = 16
N = (IMG // P) ** 2
KEEP = N // 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def layer(width, heads):
    return nn.TransformerEncoderLayer(
        width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )


class MAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3 * P * P, D)
        self.pos = nn.Parameter(torch.zeros(1, N, D))
        self.encoder = nn.ModuleList([layer(D, 12 if D % 12 == 0 else 4) for _ in range(LE)])
        self.to_dec = nn.Linear(D, 512)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, 512))
        self.dec_pos = nn.Parameter(torch.zeros(1, N, 512))
        self.decoder = nn.ModuleList([layer(512, 16) for _ in range(LD)])
        self.head = nn.Linear(512, 3 * P * P)

    def forward(self, img):
        patches = F.unfold(img, P, stride=P).transpose(1, 2)
        shuffle = torch.argsort(torch.rand(img.shape[0], N, device=img.device), dim=1)
        restore = torch.argsort(shuffle, dim=1)
        keep = shuffle[:, :KEEP]
        h = self.embed(patches) + self.pos
        h = torch.gather(h, 1, keep[..., None].expand(-1, -1, D))
        for blk in self.encoder:
            h = blk(h)
        h = self.to_dec(h)
        h = torch.cat([h, self.mask_token.expand(img.shape[0], N - KEEP, -1)], 1)
        h = torch.gather(h, 1, restore[..., None].expand(-1, -1, 512)) + self.dec_pos
        for blk in self.decoder:
            h = blk(h)
        out = self.head(h).transpose(1, 2)
        return F.fold(out, (IMG, IMG), P, stride=P)


model = MAE().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1.5e-4)
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    img = torch.randn(B, 3, IMG, IMG, device=device)
    with torch.autocast(device, dtype=torch.float16):
        recon = model(img)
        loss = F.mse_loss(recon.float(), img)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del img, recon, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
