"""Masked-autoencoder pre-training written by hand: per-sample random masking (rand, argsort,
gather of the kept 25% of 196 patch tokens), a 6-layer encoder on the visible tokens, mask tokens
scattered back through the restore indices, a 2-layer decoder, loss on the masked patches only;
bf16 autocast over fp32 weights, AdamW (foreach), 512 wide, batch 128, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3805)
D, DD, LE, LD, B, T, P = (32, 16, 1, 1, 4, 16, 48) if SMALL else (512, 256, 6, 2, 128, 196, 768)
KEEP = T // 4


def layer(d):
    return nn.TransformerEncoderLayer(
        d, 8 if d >= 64 else 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True
    )


class MAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(P, D)
        self.pos = nn.Parameter(torch.zeros(1, T, D))
        self.enc = nn.ModuleList(layer(D) for _ in range(LE))
        self.to_dec = nn.Linear(D, DD)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, DD))
        self.dpos = nn.Parameter(torch.zeros(1, T, DD))
        self.dec = nn.ModuleList(layer(DD) for _ in range(LD))
        self.out = nn.Linear(DD, P)

    def forward(self, x):
        b = x.shape[0]
        h = self.patch(x) + self.pos
        noise = torch.rand(b, T, device=x.device)
        shuffle = torch.argsort(noise, dim=1)
        restore = torch.argsort(shuffle, dim=1)
        keep = shuffle[:, :KEEP]
        h = torch.gather(h, 1, keep.unsqueeze(-1).expand(-1, -1, D))
        for blk in self.enc:
            h = blk(h)
        h = self.to_dec(h)
        h = torch.cat([h, self.mask_token.expand(b, T - KEEP, -1)], dim=1)
        h = torch.gather(h, 1, restore.unsqueeze(-1).expand(-1, -1, DD)) + self.dpos
        for blk in self.dec:
            h = blk(h)
        pred = self.out(h)
        mask = torch.ones(b, T, device=x.device)
        mask[:, :KEEP] = 0
        mask = torch.gather(mask, 1, restore)
        err = F.mse_loss(pred.float(), x, reduction="none").mean(-1)
        return (err * mask).sum() / mask.sum()


device = "cuda" if torch.cuda.is_available() else "cpu"
model = MAE().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1.5e-4, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, P, device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
