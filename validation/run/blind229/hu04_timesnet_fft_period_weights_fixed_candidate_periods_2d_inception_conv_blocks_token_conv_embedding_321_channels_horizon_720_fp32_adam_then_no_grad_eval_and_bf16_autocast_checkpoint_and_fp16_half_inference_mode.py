"""TimesNet (Wu et al. 2023) written by hand for long-term forecasting on 321 channels (lookback 96, horizon
720): a TokenEmbedding (circular Conv1d of kernel 3) plus a sinusoidal positional embedding and a linear
time-feature embedding, a linear map of the time axis from 96 to 816 steps, then 2 TimesBlocks of d_model
256 and d_ff 512. Each TimesBlock takes the FFT amplitude (torch.fft.rfft over time, mean over the
channels) at 5 fixed candidate periods (24, 48, 96, 168 and 12 steps: daily to weekly seasonality chosen by
domain knowledge rather than top-k, so the shapes are fixed), zero-pads the sequence to a multiple of each
period, folds it to a 2-D [period count x period] image, applies an Inception block (6 Conv2d branches of
kernels 1 to 11, averaged) - GELU - Inception back to d_model, unfolds, truncates, and sums the 5 results
weighted by a softmax of the amplitudes, with a residual and LayerNorm. RevIN-style normalisation by hand,
projection to 321 channels. Phases: 4 steps of fp32 Adam at batch 32 (TF32 off); no_grad evaluation at
batch 64; 4 steps under bf16 autocast at batch 48 with each TimesBlock under non-reentrant checkpoint and
AdamW; empty_cache(), the model in half precision, inference_mode at batch 64. 4 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2294)
device = "cuda"
C, L, H, D, DFF = 321, 96, 720, 256, 512
PERIODS = (24, 48, 96, 168, 12)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Inception(nn.Module):
    def __init__(self, cin, cout, num_kernels=6):
        super().__init__()
        self.kernels = nn.ModuleList(nn.Conv2d(cin, cout, 2 * i + 1, padding=i) for i in range(num_kernels))

    def forward(self, x):
        return torch.stack([k(x) for k in self.kernels], dim=-1).mean(-1)


class TimesBlock(nn.Module):
    def __init__(self, T):
        super().__init__()
        self.T = T
        self.conv = nn.Sequential(Inception(D, DFF), nn.GELU(), Inception(DFF, D))
        self.freq = [T // p for p in PERIODS]

    def forward(self, x):  # [B, T, D]
        b, t, n = x.shape
        amp = torch.fft.rfft(x.float(), dim=1).abs().mean(-1)  # [B, T//2+1]; cuFFT takes no bf16
        weights = F.softmax(amp[:, self.freq], dim=1)  # [B, k]
        res = []
        for p in PERIODS:
            length = math.ceil(t / p) * p
            out = F.pad(x, (0, 0, 0, length - t)) if length != t else x
            out = out.reshape(b, length // p, p, n).permute(0, 3, 1, 2).contiguous()
            out = self.conv(out)
            out = out.permute(0, 2, 3, 1).reshape(b, -1, n)[:, :t]
            res.append(out)
        res = torch.stack(res, dim=-1)
        return (res * weights.to(res.dtype)[:, None, None, :]).sum(-1) + x


class TimesNet(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        T = L + H
        self.token = nn.Conv1d(C, D, 3, padding=1, padding_mode="circular", bias=False)
        pe = torch.zeros(T, D)
        pos = torch.arange(T).unsqueeze(1)
        div = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe[None])
        self.time = nn.Linear(4, D, bias=False)
        self.predict = nn.Linear(L, T)
        self.blocks = nn.ModuleList(TimesBlock(T) for _ in range(layers))
        self.norm = nn.LayerNorm(D)
        self.proj = nn.Linear(D, C)
        self.drop = nn.Dropout(0.1)
        self.use_checkpoint = False

    def forward(self, x, marks):  # x [B, L, C], marks [B, L, 4]
        mean = x.mean(1, keepdim=True).detach()
        x = x - mean
        std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5).detach()
        x = x / std
        h = self.token(x.permute(0, 2, 1)).transpose(1, 2) + self.pe[:, :L] + self.time(marks)
        h = self.predict(self.drop(h).permute(0, 2, 1)).permute(0, 2, 1)
        for blk in self.blocks:
            h = checkpoint(blk, h, use_reentrant=False) if self.use_checkpoint else blk(h)
            h = self.norm(h)
        y = self.proj(h)
        y = y * std + mean
        return y[:, -H:]


def data(b, dtype=torch.float32):
    x = torch.randn(b, L + H, C, device=device).cumsum(1) * 0.05
    marks = torch.rand(b, L, 4, device=device) - 0.5
    return x[:, :L].to(dtype), marks.to(dtype), x[:, L:].to(dtype)


torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model = TimesNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
print("timesnet params", sum(p.numel() for p in model.parameters()))
model.train()
for step in range(4):
    x, m, y = data(32)
    loss = F.mse_loss(model(x, m), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, loss.item())
report("train_fp32")

model.eval()
with torch.no_grad():
    x, m, y = data(64)
    print("eval mse", F.mse_loss(model(x, m), y).item())
report("eval_fp32")

model.train()
model.use_checkpoint = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-2)
for step in range(4):
    x, m, y = data(48)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x, m).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("ckpt step", step, loss.item())
report("train_bf16_ckpt")

del opt, loss
torch.cuda.empty_cache()
model.half().eval()
with torch.inference_mode():
    x, m, y = data(64, torch.float16)
    pred = model(x, m)
    print("half eval mae", (pred - y).abs().float().mean().item())
report("infer_fp16")
