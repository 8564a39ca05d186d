"""A Basenji2/Enformer-like sequence-to-function model: one-hot DNA in, thousands of genomic tracks out.

One-hot 131,072 bp windows (4 channels). Stem: Conv1d(4, 384, 15) and a residual pointwise conv block, then
softmax attention pooling by 2 (Enformer's SoftmaxPooling1D written by hand: logits from a 1x1 conv, softmax
over each pair of positions). Conv tower: 6 blocks of BatchNorm1d, GELU, Conv1d(width 5) and a residual
pointwise block, each followed by attention pooling, channels 384 -> 768 on Enformer's exponential schedule
rounded to multiples of 128 (128 bp bins, 1,024 of them).
Dilated residual tower: 4 blocks (dilation 2, 4, 8, 16, width 3, BatchNorm, GELU, dropout). Transformer: 4
nn.TransformerEncoder layers (d 768, 8 heads, norm_first, batch_first, learned position embeddings).
Crop 64 bins each side, pointwise conv to 1,536 channels, GELU, a linear head to 1,643 tracks, softplus;
Poisson NLL on random counts.

Phases: the first training step (batch 4 with a random shift of up to 3 bp by torch.roll and
reverse-complement augmentation by index/flip, fp32, SGD momentum 0.99 nesterov, clipping at 0.2); 2 more
steps; evaluation under no_grad at batch 8 averaging forward and reverse-complement predictions (the encoder's
fast path) and the per-track Pearson correlation on the GPU; then del of the optimizer, empty_cache, and fp16
autocast with GradScaler (initial scale 1024) and AdamW, 3 steps. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2064)
if SMALL:
    SEQ, C0, C1, TRACKS, LAYERS, BATCH, CROP, DIV = 4096, 32, 64, 16, 1, 2, 4, 16
else:
    SEQ, C0, C1, TRACKS, LAYERS, BATCH, CROP, DIV = 131072, 384, 768, 1643, 4, 4, 64, 128
TOWER = 6
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def exponential_linspace_int(start, end, num, divisible_by=1):
    """Enformer's channel schedule: exponentially spaced, rounded to a multiple of divisible_by."""
    base = math.exp(math.log(end / start) / (num - 1))
    return [int(round(start * base**i / divisible_by) * divisible_by) for i in range(num)]


class SoftmaxPool(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.logit = nn.Conv1d(c, c, 1, bias=False)
        nn.init.dirac_(self.logit.weight)
        self.logit.weight.data.mul_(2.0)

    def forward(self, x):
        b, c, l = x.shape
        w = self.logit(x).view(b, c, l // 2, 2).softmax(dim=-1)
        return (x.view(b, c, l // 2, 2) * w).sum(-1)


class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out, width, dilation=1):
        super().__init__()
        self.bn = nn.BatchNorm1d(c_in)
        self.conv = nn.Conv1d(c_in, c_out, width, padding=dilation * (width // 2), dilation=dilation)

    def forward(self, x):
        return self.conv(F.gelu(self.bn(x)))


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class SeqToFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv1d(4, C0, 15, padding=7),
            Residual(ConvBlock(C0, C0, 1)),
            SoftmaxPool(C0),
        )
        chans = exponential_linspace_int(C0, C1, TOWER, divisible_by=DIV)
        tower = []
        c_prev = C0
        for c in chans:
            tower += [ConvBlock(c_prev, c, 5), Residual(ConvBlock(c, c, 1)), SoftmaxPool(c)]
            c_prev = c
        self.tower = nn.Sequential(*tower)
        self.dilated = nn.Sequential(
            *[
                Residual(
                    nn.Sequential(
                        ConvBlock(C1, C1 // 2, 3, dilation=2**i), ConvBlock(C1 // 2, C1, 1), nn.Dropout(0.3)
                    )
                )
                for i in range(1, 5)
            ]
        )
        bins = SEQ // 2 ** (TOWER + 1)
        self.pos = nn.Parameter(torch.randn(1, bins, C1) * 0.02)
        layer = nn.TransformerEncoderLayer(
            C1, 8, 2 * C1, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.final = nn.Sequential(ConvBlock(C1, 2 * C1, 1), nn.Dropout(0.05))
        self.head = nn.Linear(2 * C1, TRACKS)

    def forward(self, onehot):
        x = self.dilated(self.tower(self.stem(onehot)))
        x = self.transformer(x.transpose(1, 2) + self.pos)
        x = x[:, CROP:-CROP].transpose(1, 2)
        x = F.gelu(self.final(x)).transpose(1, 2)
        return F.softplus(self.head(x))


def onehot_batch(batch):
    idx = torch.randint(0, 4, (batch, SEQ), device=device)
    x = F.one_hot(idx, 4).transpose(1, 2).float()
    bins = SEQ // 2 ** (TOWER + 1) - 2 * CROP
    y = torch.poisson(torch.rand(batch, bins, TRACKS, device=device) * 4)
    return x, y


def reverse_complement(x, y=None):
    x = x[:, [3, 2, 1, 0]].flip(-1)
    return x if y is None else (x, y.flip(1))


model = SeqToFunction().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.99, nesterov=True)

model.train()
for step in range(3):
    x, y = onehot_batch(BATCH)
    x = torch.roll(x, shifts=(step % 7) - 3, dims=-1)
    if step % 2 == 1:
        x, y = reverse_complement(x, y)
    pred = model(x)
    loss = F.poisson_nll_loss(pred, y, log_input=False)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} poisson {loss.item():.4f}")
    if step == 0:
        report("first step")
report("fp32 sgd training")

model.eval()
with torch.no_grad():
    x, y = onehot_batch(2 * BATCH)
    pred = (model(x) + model(reverse_complement(x))) / 2
    p = pred - pred.mean(dim=(0, 1))
    t = y - y.mean(dim=(0, 1))
    r = (p * t).sum((0, 1)) / (p.norm(dim=(0, 1)) * t.norm(dim=(0, 1)) + 1e-8)
    print(f"eval pearson mean {r.mean().item():.4f} over {r.numel()} tracks")
del pred, p, t, r, x, y
report("rc ensemble eval")

del opt
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, enabled=amp)
model.train()
for step in range(3):
    x, y = onehot_batch(BATCH)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        pred = model(x)
    loss = F.poisson_nll_loss(pred.float(), y, log_input=False)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"fp16 step {step} poisson {loss.item():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
