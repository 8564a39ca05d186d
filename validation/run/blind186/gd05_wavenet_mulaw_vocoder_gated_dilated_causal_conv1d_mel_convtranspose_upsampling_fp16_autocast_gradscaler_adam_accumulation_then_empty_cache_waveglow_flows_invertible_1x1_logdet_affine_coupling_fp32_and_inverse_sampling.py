"""Two neural vocoders written by hand. First a WaveNet vocoder after r9y9/wavenet_vocoder: mu-law audio
(256 classes) fed as one-hot through a 1x1 Conv1d to 256 residual channels, 24 gated residual layers
(dilations 1 .. 128 in three cycles, kernel 2, causal left padding; tanh x sigmoid over 512 gate
channels, local conditioning by a 1x1 Conv1d of the upsampled mel added before the gate, 1x1 residual and
skip convs of 256, the residual scaled by sqrt(0.5)), skip connections summed, ReLU + 1x1 + ReLU + 1x1 to
256 logits; the 80-band mel upsampled by two ConvTranspose1d (stride 16 each, 256 samples a frame).
Cross-entropy of the next sample. fp16 autocast with torch.amp.GradScaler, Adam (lr 1e-3), batch 8 of
8,192 samples as two accumulated micro-batches of 4, clip_grad_norm_ at 1.0. Phases: the first step;
2 more; a no_grad validation loss over 4 batches of 8.

Then the WaveNet is deleted and torch.cuda.empty_cache() called, and a WaveGlow (Prenger et al. 2019,
NVIDIA/waveglow) is trained: the audio squeezed into groups of 8, 12 flows, each an invertible 1x1
convolution (weights initialised as a random orthogonal matrix from torch.linalg.qr with a positive
determinant, log-determinant from torch.logdet in fp32) and an affine coupling layer whose WN (8 layers
of 256 channels, dilated kernel-3 Conv1d, gated tanh x sigmoid with the mel conditioning as one 1x1 conv
over all layers) predicts log s and b; 2 early outputs every 4 flows; the mel upsampled by
ConvTranspose1d(80, 80, 1024, stride 256) and unfolded into the groups. Loss: z^2 / (2 sigma^2) - sum
log s - sum logdet W, averaged over the samples. fp32, Adam (lr 1e-4), 2 steps at batch 8 x 16,000
samples; then inference under torch.inference_mode (the inverse 1x1 weights from torch.inverse, sigma
0.6) on 4 mels of 400 frames. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18605)
if SMALL:
    MICRO, ACCUM, SEG, STEPS, VAL_N, RES_CH, GATE_CH, SKIP_CH, N_LAYERS = 1, 2, 1024, 1, 1, 16, 32, 16, 8
    WG_B, WG_SEG, WG_CH, WG_LAYERS, WG_FLOWS, INF_B, INF_FRAMES = 1, 2048, 16, 2, 4, 1, 8
else:
    MICRO, ACCUM, SEG, STEPS, VAL_N, RES_CH, GATE_CH, SKIP_CH, N_LAYERS = 4, 2, 8192, 2, 4, 256, 512, 256, 24
    WG_B, WG_SEG, WG_CH, WG_LAYERS, WG_FLOWS, INF_B, INF_FRAMES = 8, 16000, 256, 8, 12, 4, 400
N_MELS, HOP, Q = 80, 256, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class ResidualConv(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.dilation = dilation
        self.conv = nn.Conv1d(RES_CH, GATE_CH, 2, dilation=dilation)
        self.cond = nn.Conv1d(N_MELS, GATE_CH, 1, bias=False)
        self.out = nn.Conv1d(GATE_CH // 2, RES_CH, 1)
        self.skip = nn.Conv1d(GATE_CH // 2, SKIP_CH, 1)

    def forward(self, x, c):
        h = self.conv(F.pad(x, (self.dilation, 0)))
        h = h + self.cond(c)
        a, b = h.split(h.size(1) // 2, dim=1)
        h = torch.tanh(a) * torch.sigmoid(b)
        return (self.out(h) + x) * 0.5**0.5, self.skip(h)


class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Conv1d(Q, RES_CH, 1)
        self.layers = nn.ModuleList([ResidualConv(2 ** (i % 8)) for i in range(N_LAYERS)])
        self.upsample = nn.Sequential(
            nn.ConvTranspose1d(N_MELS, N_MELS, 32, stride=16, padding=8),
            nn.LeakyReLU(0.4),
            nn.ConvTranspose1d(N_MELS, N_MELS, 32, stride=16, padding=8),
            nn.LeakyReLU(0.4),
        )
        self.last = nn.Sequential(
            nn.ReLU(), nn.Conv1d(SKIP_CH, SKIP_CH, 1), nn.ReLU(), nn.Conv1d(SKIP_CH, Q, 1)
        )

    def forward(self, x_onehot, mel):
        c = self.upsample(mel)[:, :, : x_onehot.size(-1)]
        x = self.first(x_onehot)
        skips = 0
        for layer in self.layers:
            x, s = layer(x, c)
            skips = skips + s
        return self.last(skips * (1.0 / len(self.layers)) ** 0.5)


def mulaw_batch(n, seg):
    q = torch.randint(0, Q, (n, seg + 1), device=device)
    mel = torch.randn(n, N_MELS, seg // HOP, device=device)
    x = F.one_hot(q[:, :-1], Q).transpose(1, 2).float()
    return x, mel, q[:, 1:]


wavenet = WaveNet().to(device)
print(f"wavenet params {sum(p.numel() for p in wavenet.parameters()) / 1e6:.2f}M")
opt = torch.optim.Adam(wavenet.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"wavenet {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

wavenet.train()
for step in range(STEPS + 1):
    for _ in range(ACCUM):
        x, mel, target = mulaw_batch(MICRO, SEG)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            logits = wavenet(x, mel)
            loss = F.cross_entropy(logits, target)
        scaler.scale(loss / ACCUM).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(wavenet.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"wavenet step {step} loss {loss.item():.4f} grad norm {gn.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, mel, target, logits, loss
if device == "cuda":
    print(f"wavenet train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

wavenet.eval()
total = 0.0
with torch.no_grad():
    for _ in range(VAL_N):
        x, mel, target = mulaw_batch(MICRO * ACCUM, SEG)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            total += F.cross_entropy(wavenet(x, mel), target).item()
print(f"wavenet val loss {total / VAL_N:.4f}")
del x, mel, target
if device == "cuda":
    print(f"wavenet val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del wavenet, opt, scaler
torch.cuda.empty_cache()


class Invertible1x1Conv(nn.Module):
    def __init__(self, c):
        super().__init__()
        W = torch.linalg.qr(torch.randn(c, c))[0]
        if torch.det(W) < 0:
            W[:, 0] = -W[:, 0]
        self.weight = nn.Parameter(W.view(c, c, 1))

    def forward(self, z):
        b, _, n = z.shape
        W = self.weight.squeeze()
        log_det_W = b * n * torch.logdet(W.float())
        return F.conv1d(z, self.weight), log_det_W

    def inverse(self, z):
        W_inverse = self.weight.squeeze().float().inverse()
        return F.conv1d(z, W_inverse[..., None].to(z.dtype))


class WN(nn.Module):
    def __init__(self, n_in, n_mel):
        super().__init__()
        self.start = nn.utils.parametrizations.weight_norm(nn.Conv1d(n_in, WG_CH, 1))
        self.end = nn.Conv1d(WG_CH, 2 * n_in, 1)
        self.end.weight.data.zero_()
        self.end.bias.data.zero_()
        self.cond = nn.utils.parametrizations.weight_norm(nn.Conv1d(n_mel, 2 * WG_CH * WG_LAYERS, 1))
        self.in_layers = nn.ModuleList(
            [
                nn.utils.parametrizations.weight_norm(
                    nn.Conv1d(WG_CH, 2 * WG_CH, 3, dilation=2**i, padding=2**i)
                )
                for i in range(WG_LAYERS)
            ]
        )
        self.res_skip = nn.ModuleList(
            [
                nn.utils.parametrizations.weight_norm(
                    nn.Conv1d(WG_CH, 2 * WG_CH if i < WG_LAYERS - 1 else WG_CH, 1)
                )
                for i in range(WG_LAYERS)
            ]
        )

    def forward(self, audio, spect):
        audio = self.start(audio)
        output = torch.zeros_like(audio)
        spect = self.cond(spect)
        for i in range(WG_LAYERS):
            off = i * 2 * WG_CH
            acts = self.in_layers[i](audio) + spect[:, off : off + 2 * WG_CH]
            t, s = acts.chunk(2, dim=1)
            acts = torch.tanh(t) * torch.sigmoid(s)
            rs = self.res_skip[i](acts)
            if i < WG_LAYERS - 1:
                audio = audio + rs[:, :WG_CH]
                output = output + rs[:, WG_CH:]
            else:
                output = output + rs
        return self.end(output)


class WaveGlow(nn.Module):
    def __init__(self, n_group=8, n_early_every=4, n_early_size=2):
        super().__init__()
        self.n_group, self.every, self.early = n_group, n_early_every, n_early_size
        self.upsample = nn.ConvTranspose1d(N_MELS, N_MELS, 1024, stride=HOP)
        self.convinv = nn.ModuleList()
        self.WN = nn.ModuleList()
        n_half = n_group // 2
        n_remaining = n_group
        for k in range(WG_FLOWS):
            if k % n_early_every == 0 and k > 0:
                n_half -= n_early_size // 2
                n_remaining -= n_early_size
            self.convinv.append(Invertible1x1Conv(n_remaining))
            self.WN.append(WN(n_half, N_MELS * n_group))
        self.n_remaining = n_remaining

    def cond(self, spect, n):
        spect = self.upsample(spect)
        spect = spect[:, :, : n * self.n_group]
        b = spect.size(0)
        spect = spect.unfold(2, self.n_group, self.n_group).permute(0, 2, 1, 3)
        return spect.contiguous().view(b, spect.size(1), -1).permute(0, 2, 1)

    def forward(self, spect, audio):
        b = audio.size(0)
        audio = audio.unfold(1, self.n_group, self.n_group).permute(0, 2, 1)
        spect = self.cond(spect, audio.size(2))
        output, log_s_list, log_det_list = [], [], []
        for k in range(WG_FLOWS):
            if k % self.every == 0 and k > 0:
                output.append(audio[:, : self.early])
                audio = audio[:, self.early :]
            audio, log_det_W = self.convinv[k](audio)
            log_det_list.append(log_det_W)
            n_half = audio.size(1) // 2
            a0, a1 = audio[:, :n_half], audio[:, n_half:]
            out = self.WN[k](a0, spect)
            log_s, bias = out[:, n_half:], out[:, :n_half]
            a1 = torch.exp(log_s) * a1 + bias
            log_s_list.append(log_s)
            audio = torch.cat([a0, a1], 1)
        output.append(audio)
        return torch.cat(output, 1).view(b, -1), log_s_list, log_det_list

    @torch.no_grad()
    def infer(self, spect, sigma=0.6):
        n = (spect.size(2) * HOP) // self.n_group
        spect = self.cond(spect, n)
        audio = sigma * torch.randn(
            spect.size(0), self.n_remaining, n, device=spect.device, dtype=spect.dtype
        )
        for k in reversed(range(WG_FLOWS)):
            n_half = audio.size(1) // 2
            a0, a1 = audio[:, :n_half], audio[:, n_half:]
            out = self.WN[k](a0, spect)
            s, bias = out[:, n_half:], out[:, :n_half]
            a1 = (a1 - bias) / torch.exp(s)
            audio = self.convinv[k].inverse(torch.cat([a0, a1], 1))
            if k % self.every == 0 and k > 0:
                z = sigma * torch.randn(spect.size(0), self.early, n, device=spect.device, dtype=spect.dtype)
                audio = torch.cat([z, audio], 1)
        return audio.permute(0, 2, 1).contiguous().view(audio.size(0), -1)


def waveglow_loss(z, log_s_list, log_det_list, sigma=1.0):
    log_s_total = sum(torch.sum(s) for s in log_s_list)
    log_det_total = sum(log_det_list)
    loss = torch.sum(z * z) / (2 * sigma * sigma) - log_s_total - log_det_total
    return loss / z.numel()


waveglow = WaveGlow().to(device)
print(f"waveglow params {sum(p.numel() for p in waveglow.parameters()) / 1e6:.2f}M")
wg_opt = torch.optim.Adam(waveglow.parameters(), lr=1e-4)
waveglow.train()
for step in range(2):
    audio = torch.randn(WG_B, WG_SEG, device=device).clamp(-1, 1) * 0.3
    mel = torch.randn(WG_B, N_MELS, WG_SEG // HOP + 1, device=device)
    z, log_s_list, log_det_list = waveglow(mel, audio)
    loss = waveglow_loss(z, log_s_list, log_det_list)
    wg_opt.zero_grad()
    loss.backward()
    wg_opt.step()
    print(f"waveglow step {step} loss {loss.item():.4f}")
del audio, mel, z, log_s_list, log_det_list, loss
if device == "cuda":
    print(f"waveglow train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

waveglow.eval()
with torch.inference_mode():
    mel = torch.randn(INF_B, N_MELS, INF_FRAMES, device=device)
    audio = waveglow.infer(mel)
    audio = (audio.clamp(-1, 1) * 32767).to(torch.int16).cpu()
print(f"waveglow audio {tuple(audio.shape)}")
if device == "cuda":
    print(
        f"waveglow infer allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
