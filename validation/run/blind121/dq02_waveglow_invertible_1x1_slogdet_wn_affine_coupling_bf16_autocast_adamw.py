"""WaveGlow written from the paper: audio squeezed into groups of 8 samples, 8 flows of an
invertible 1x1 convolution (weight initialised orthogonal by QR, log-determinant from slogdet in
fp32) followed by an affine coupling layer whose WN network (4 layers of dilated conv1d with gated
tanh/sigmoid, mel conditioning upsampled by ConvTranspose1d, residual and skip convolutions, weight
norm) predicts log-scale and shift; early outputs of 2 channels every 4 flows; the Gaussian
negative log-likelihood under bf16 autocast, AdamW, 3 training steps, then an inverse pass
(sampling) under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12102)
B, SEG = (2, 2048) if SMALL else (12, 16000)
N_MEL, HOP, GROUP, N_FLOWS, EARLY_EVERY, EARLY_SIZE = 80, 256, 8, 8, 4, 2
WN_CH = 64 if SMALL else 256
device = "cuda" if torch.cuda.is_available() else "cpu"


class Invertible1x1(nn.Module):
    def __init__(self, c):
        super().__init__()
        w = torch.linalg.qr(torch.randn(c, c))[0]
        if torch.det(w) < 0:
            w[:, 0] = -w[:, 0]
        self.weight = nn.Parameter(w)

    def forward(self, z):
        b, _c, t = z.shape
        with torch.autocast(z.device.type, enabled=False):
            logdet = b * t * torch.linalg.slogdet(self.weight.float())[1]
        return F.conv1d(z, self.weight.unsqueeze(-1)), logdet

    def inverse(self, z):
        w_inv = torch.linalg.inv(self.weight.float()).to(z.dtype)
        return F.conv1d(z, w_inv.unsqueeze(-1))


class WN(nn.Module):
    def __init__(self, c_in, layers=4):
        super().__init__()
        self.start = weight_norm(nn.Conv1d(c_in, WN_CH, 1))
        self.end = nn.Conv1d(WN_CH, 2 * c_in, 1)
        self.end.weight.data.zero_()
        self.end.bias.data.zero_()
        self.cond = weight_norm(nn.Conv1d(N_MEL * GROUP, 2 * WN_CH * layers, 1))
        self.in_layers = nn.ModuleList(
            weight_norm(nn.Conv1d(WN_CH, 2 * WN_CH, 3, dilation=2**i, padding=2**i)) for i in range(layers)
        )
        self.res_skip = nn.ModuleList(
            weight_norm(nn.Conv1d(WN_CH, 2 * WN_CH if i < layers - 1 else WN_CH, 1)) for i in range(layers)
        )

    def forward(self, a, spect):
        x = self.start(a)
        out = torch.zeros_like(x)
        cond = self.cond(spect)
        for i, (inl, rs) in enumerate(zip(self.in_layers, self.res_skip, strict=False)):
            h = inl(x) + cond[:, i * 2 * WN_CH : (i + 1) * 2 * WN_CH]
            acts = torch.tanh(h[:, :WN_CH]) * torch.sigmoid(h[:, WN_CH:])
            r = rs(acts)
            if i < len(self.in_layers) - 1:
                x = x + r[:, :WN_CH]
                out = out + r[:, WN_CH:]
            else:
                out = out + r
        return self.end(out)


class WaveGlow(nn.Module):
    def __init__(self):
        super().__init__()
        self.upsample = nn.ConvTranspose1d(N_MEL, N_MEL, 1024, stride=HOP)
        self.convinv = nn.ModuleList()
        self.wn = nn.ModuleList()
        c = GROUP
        for k in range(N_FLOWS):
            if k % EARLY_EVERY == 0 and k > 0:
                c -= EARLY_SIZE
            self.convinv.append(Invertible1x1(c))
            self.wn.append(WN(c // 2))

    def cond(self, spect, t):
        spect = self.upsample(spect)[:, :, :t]
        spect = spect.unfold(2, GROUP, GROUP).permute(0, 2, 1, 3)
        return spect.contiguous().view(spect.size(0), spect.size(1), -1).permute(0, 2, 1)

    def forward(self, spect, audio):
        spect = self.cond(spect, audio.size(1))
        audio = audio.unfold(1, GROUP, GROUP).permute(0, 2, 1)
        outs, log_s_total, logdet_total = [], 0, 0
        for k in range(N_FLOWS):
            if k % EARLY_EVERY == 0 and k > 0:
                outs.append(audio[:, :EARLY_SIZE])
                audio = audio[:, EARLY_SIZE:]
            audio, logdet = self.convinv[k](audio)
            logdet_total = logdet_total + logdet
            half = audio.size(1) // 2
            a0, a1 = audio[:, :half], audio[:, half:]
            o = self.wn[k](a0, spect)
            log_s, shift = o[:, half:], o[:, :half]
            a1 = torch.exp(log_s) * a1 + shift
            log_s_total = log_s_total + log_s.float().sum()
            audio = torch.cat([a0, a1], 1)
        outs.append(audio)
        return torch.cat(outs, 1), log_s_total, logdet_total

    @torch.no_grad()
    def infer(self, spect, sigma=0.6):
        spect = self.cond(spect, spect.size(2) * HOP - (1024 - HOP))
        t = spect.size(2)
        c = GROUP - EARLY_SIZE * ((N_FLOWS - 1) // EARLY_EVERY)
        audio = sigma * torch.randn(spect.size(0), c, t, device=spect.device, dtype=spect.dtype)
        for k in reversed(range(N_FLOWS)):
            half = audio.size(1) // 2
            a0, a1 = audio[:, :half], audio[:, half:]
            o = self.wn[k](a0, spect)
            a1 = (a1 - o[:, :half]) / torch.exp(o[:, half:])
            audio = self.convinv[k].inverse(torch.cat([a0, a1], 1))
            if k % EARLY_EVERY == 0 and k > 0:
                z = sigma * torch.randn(spect.size(0), EARLY_SIZE, t, device=spect.device, dtype=spect.dtype)
                audio = torch.cat([z, audio], 1)
        return audio.permute(0, 2, 1).reshape(audio.size(0), -1)


model = WaveGlow().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-6)
sigma = 1.0

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    audio = torch.randn(B, SEG, device=device).clamp_(-1, 1)
    frames = (SEG + 1024 - HOP) // HOP
    mel = torch.randn(B, N_MEL, frames, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        z, log_s, logdet = model(mel, audio)
        loss = (z.float() ** 2).sum() / (2 * sigma**2) - log_s - logdet
        loss = loss / z.numel()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del z, log_s, logdet, loss
model.eval()
with torch.autocast(device, dtype=torch.bfloat16):
    wav = model.infer(torch.randn(B, N_MEL, 32 if SMALL else 160, device=device))
if device == "cuda":
    print(
        f"infer {tuple(wav.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
