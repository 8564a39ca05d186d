"""An EnCodec-like neural audio codec (Défossez et al. 2022) written by hand at 24 kHz: a SEANet encoder
(Conv1d(1, 32, 7), then for strides 2, 4, 5, 8 a residual unit (ELU, Conv1d k3 to half width, ELU,
Conv1d k1 back, identity shortcut), ELU and a strided Conv1d of kernel 2 x stride doubling the width;
reflect padding as EnCodec's non-causal model), a 2-layer residual LSTM over the 512-wide frames, ELU and
Conv1d(512, 128, 7): 75 frames a second. A residual vector quantizer of 8 codebooks of 1,024 x 128
(EMA codebook updates with decay 0.99 and Laplace smoothing, straight-through estimator, commitment
loss), the number of codebooks drawn per batch on the host from {2, 4, 8} (1.5, 3 and 6 kbps); a forward
hook on the quantizer counts code usage with torch.bincount. The decoder mirrors the encoder with
ConvTranspose1d (trimmed). A multi-scale STFT discriminator (n_fft 2,048 / 1,024 / 512, hop n_fft / 4,
the real and imaginary parts as 2 channels: Conv2d (3, 9) stacks with time dilations 1, 2, 4 and
frequency stride 2, weight norm, LeakyReLU 0.2). Losses: L1 on the waveform, multi-resolution STFT
(L1 of magnitudes + L1 of log magnitudes for n_fft 512 / 1,024 / 2,048, torch.stft in fp32), hinge
adversarial loss, relative feature matching, commitment.

Training under bf16 autocast (the decoder output cast to fp32 before the STFTs), AdamW foreach (lr 3e-4,
betas (0.5, 0.9)) for the codec and the discriminator, an EMA of the codec's weights by
torch.optim.swa_utils.AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(0.999)), batch 48 one-second
clips. Phases: the first step (discriminator then codec); 3 more; the EMA codec under
torch.inference_mode compressing 8 ten-second clips at 1.5, 3 and 6 kbps (codes as int16 moved to the
host, then decoded); then the encoder and quantizer frozen (requires_grad_(False)) and only the
decoder fine-tuned in fp32 with fused AdamW on the frozen codes at batch 32 for 2 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18606)
host_gen = torch.Generator().manual_seed(18606)
SR = 24000
if SMALL:
    B, SEG, STEPS, INF_B, INF_SEC, FT_B, WIDTH = 2, 3200, 1, 1, 1, 2, 8
else:
    B, SEG, STEPS, INF_B, INF_SEC, FT_B, WIDTH = 48, 24000, 3, 8, 10, 32, 32
RATIOS = (2, 4, 5, 8)
DIM, NQ, BINS = 128, 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class SConv1d(nn.Module):
    def __init__(self, cin, cout, k, stride=1, dilation=1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride, dilation=dilation)
        self.pad = (k - 1) * dilation + 1 - stride

    def forward(self, x):
        left = self.pad // 2
        return self.conv(F.pad(x, (left, self.pad - left), mode="reflect"))


class SConvTranspose1d(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, k, stride)
        self.trim = k - stride

    def forward(self, x):
        y = self.conv(x)
        left = self.trim // 2
        return y[..., left : y.shape[-1] - (self.trim - left)]


class ResUnit(nn.Module):
    def __init__(self, c, dilation=1):
        super().__init__()
        self.block = nn.Sequential(
            nn.ELU(), SConv1d(c, c // 2, 3, dilation=dilation), nn.ELU(), SConv1d(c // 2, c, 1)
        )

    def forward(self, x):
        return x + self.block(x)


class SLSTM(nn.Module):
    def __init__(self, d, layers=2):
        super().__init__()
        self.lstm = nn.LSTM(d, d, layers)

    def forward(self, x):
        x = x.permute(2, 0, 1)
        y, _ = self.lstm(x)
        return (y + x).permute(1, 2, 0)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [SConv1d(1, WIDTH, 7)]
        c = WIDTH
        for r in RATIOS:
            layers += [ResUnit(c), nn.ELU(), SConv1d(c, 2 * c, 2 * r, stride=r)]
            c *= 2
        layers += [SLSTM(c), nn.ELU(), SConv1d(c, DIM, 7)]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        c = WIDTH * 2 ** len(RATIOS)
        layers = [SConv1d(DIM, c, 7), SLSTM(c)]
        for r in reversed(RATIOS):
            layers += [nn.ELU(), SConvTranspose1d(c, c // 2, 2 * r, r), ResUnit(c // 2)]
            c //= 2
        layers += [nn.ELU(), SConv1d(c, 1, 7)]
        self.model = nn.Sequential(*layers)

    def forward(self, z):
        return self.model(z)


class EMACodebook(nn.Module):
    def __init__(self, decay=0.99, eps=1e-5):
        super().__init__()
        self.decay, self.eps = decay, eps
        self.register_buffer("embed", torch.randn(BINS, DIM) * 0.1)
        self.register_buffer("cluster_size", torch.ones(BINS))
        self.register_buffer("embed_avg", self.embed.clone())

    def encode(self, x):
        flat = x.transpose(1, 2).reshape(-1, DIM).float()
        dist = -(
            flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embed.t() + self.embed.pow(2).sum(1)[None]
        )
        return dist.max(dim=-1).indices.view(x.shape[0], x.shape[2])

    def decode(self, idx):
        return F.embedding(idx, self.embed).transpose(1, 2)

    def forward(self, x):
        idx = self.encode(x)
        q = self.decode(idx)
        if self.training:
            with torch.no_grad():
                flat = x.transpose(1, 2).reshape(-1, DIM).float()
                onehot = F.one_hot(idx.view(-1), BINS).float()
                self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
                self.embed_avg.mul_(self.decay).add_(onehot.t() @ flat, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + self.eps) / (n + BINS * self.eps) * n
                self.embed.copy_(self.embed_avg / size[:, None])
        return q, idx


class ResidualVQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([EMACodebook() for _ in range(NQ)])

    def forward(self, x, n_q):
        residual = x.float()
        quantized = torch.zeros_like(residual)
        commit, codes = 0.0, []
        for layer in self.layers[:n_q]:
            q, idx = layer(residual)
            commit = commit + F.mse_loss(residual, q.detach())
            residual = residual - q.detach()
            quantized = quantized + q
            codes.append(idx)
        quantized = x + (quantized - x).detach()
        return quantized, torch.stack(codes), commit / n_q

    def decode(self, codes):
        return sum(self.layers[i].decode(c) for i, c in enumerate(codes))


class Codec(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.quantizer = ResidualVQ()
        self.decoder = Decoder()

    def forward(self, wav, n_q):
        z = self.encoder(wav)
        q, codes, commit = self.quantizer(z, n_q)
        return self.decoder(q), codes, commit


class STFTDisc(nn.Module):
    def __init__(self, n_fft, ch=32):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        self.convs = nn.ModuleList(
            [weight_norm(nn.Conv2d(2, ch, (3, 9), padding=(1, 4)))]
            + [
                weight_norm(nn.Conv2d(ch, ch, (3, 9), stride=(1, 2), dilation=(d, 1), padding=(d, 4)))
                for d in (1, 2, 4)
            ]
            + [weight_norm(nn.Conv2d(ch, ch, (3, 3), padding=(1, 1)))]
        )
        self.post = weight_norm(nn.Conv2d(ch, 1, (3, 3), padding=(1, 1)))

    def forward(self, wav):
        spec = torch.stft(
            wav.squeeze(1),
            self.n_fft,
            self.n_fft // 4,
            window=self.window,
            normalized=True,
            return_complex=True,
        )
        x = torch.view_as_real(spec).permute(0, 3, 2, 1)  # (B, 2, frames, freq)
        fmap = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.2)
            fmap.append(x)
        return self.post(x), fmap


class MSSTFTDisc(nn.Module):
    def __init__(self):
        super().__init__()
        self.discs = nn.ModuleList([STFTDisc(n) for n in (2048, 1024, 512)])

    def forward(self, wav):
        return [d(wav) for d in self.discs]


def stft_mag(x, n_fft):
    win = torch.hann_window(n_fft, device=x.device)
    spec = torch.stft(x.squeeze(1), n_fft, n_fft // 4, window=win, return_complex=True)
    return spec.abs().clamp(min=1e-7)


def spectral_loss(y, y_hat):
    loss = 0.0
    for n_fft in (512, 1024, 2048):
        m, m_hat = stft_mag(y, n_fft), stft_mag(y_hat, n_fft)
        loss = loss + F.l1_loss(m_hat, m) + F.l1_loss(m_hat.log(), m.log())
    return loss


codec = Codec().to(device)
disc = MSSTFTDisc().to(device)
ema = AveragedModel(codec, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
print(
    f"codec {sum(p.numel() for p in codec.parameters()) / 1e6:.2f}M"
    f" disc {sum(p.numel() for p in disc.parameters()) / 1e6:.2f}M"
)
opt_g = torch.optim.AdamW(codec.parameters(), lr=3e-4, betas=(0.5, 0.9), foreach=True)
opt_d = torch.optim.AdamW(disc.parameters(), lr=3e-4, betas=(0.5, 0.9), foreach=True)
usage = torch.zeros(BINS, device=device)


def count_codes(module, inputs, output):
    usage.add_(torch.bincount(output[1][0].flatten(), minlength=BINS).float())


codec.quantizer.register_forward_hook(count_codes)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

codec.train()
disc.train()
for step in range(STEPS + 1):
    n_q = (2, 4, 8)[int(torch.randint(0, 3, (1,), generator=host_gen))]
    wav = (torch.randn(B, 1, SEG, device=device) * 0.1).clamp(-1, 1)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        y_hat, codes, commit = codec(wav, n_q)
    y_hat = y_hat.float()

    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        d_real = disc(wav)
        d_fake = disc(y_hat.detach())
    loss_d = sum(
        F.relu(1 - r.float()).mean() + F.relu(1 + f.float()).mean()
        for (r, _), (f, _) in zip(d_real, d_fake, strict=True)
    )
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()

    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        d_real = disc(wav)
        d_fake = disc(y_hat)
    adv = sum(F.relu(1 - f.float()).mean() for f, _ in d_fake) / len(d_fake)
    fm = 0.0
    for (_, fr), (_, ff) in zip(d_real, d_fake, strict=True):
        for a, b in zip(fr, ff, strict=True):
            fm = fm + F.l1_loss(b.float(), a.float().detach()) / (a.float().detach().abs().mean() + 1e-8)
    fm = fm / (len(d_real) * len(d_real[0][1]))
    l1 = F.l1_loss(y_hat, wav)
    spec = spectral_loss(wav, y_hat)
    loss_g = 0.1 * l1 + spec + 3 * adv + 3 * fm + commit
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    ema.update_parameters(codec)
    print(
        f"step {step} n_q {n_q} loss_d {loss_d.item():.3f} loss_g {loss_g.item():.3f}"
        f" spec {spec.item():.3f} commit {float(commit):.4f}"
    )
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del wav, y_hat, codes, commit, d_real, d_fake, loss_d, loss_g, adv, fm, l1, spec
print(f"codes used {(usage > 0).sum().item()} of {BINS}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ema_codec = ema.module
ema_codec.eval()
with torch.inference_mode():
    clip = (torch.randn(INF_B, 1, INF_SEC * SR, device=device) * 0.1).clamp(-1, 1)
    for n_q, kbps in ((2, 1.5), (4, 3.0), (8, 6.0)):
        z = ema_codec.encoder(clip)
        _, codes, _ = ema_codec.quantizer(z, n_q)
        host_codes = codes.to(torch.int16).cpu()
        rec = ema_codec.decoder(ema_codec.quantizer.decode(codes))
        snr = 10 * torch.log10(clip.pow(2).sum() / (clip - rec).pow(2).sum())
        print(f"{kbps} kbps codes {tuple(host_codes.shape)} snr {snr.item():.2f} dB")
del clip, z, codes, rec, snr
if device == "cuda":
    print(f"ema inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt_g, opt_d, disc
codec.encoder.requires_grad_(False)
codec.quantizer.requires_grad_(False)
codec.encoder.eval()
codec.quantizer.eval()
ft_opt = torch.optim.AdamW(codec.decoder.parameters(), lr=1e-4, fused=amp)
for step in range(2):
    wav = (torch.randn(FT_B, 1, SEG, device=device) * 0.1).clamp(-1, 1)
    with torch.no_grad():
        _, codes, _ = codec.quantizer(codec.encoder(wav), NQ)
    y_hat = codec.decoder(codec.quantizer.decode(codes))
    loss = F.l1_loss(y_hat, wav) + spectral_loss(wav, y_hat)
    ft_opt.zero_grad(set_to_none=True)
    loss.backward()
    ft_opt.step()
    print(f"decoder fine-tune step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"fine-tune allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
