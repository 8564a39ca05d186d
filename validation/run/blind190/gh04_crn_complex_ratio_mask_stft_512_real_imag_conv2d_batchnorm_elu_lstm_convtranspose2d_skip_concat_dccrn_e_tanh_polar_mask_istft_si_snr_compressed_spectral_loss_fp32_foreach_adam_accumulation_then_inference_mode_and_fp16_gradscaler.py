"""A convolutional recurrent network predicting a complex ratio mask on the STFT, written by hand after
Tan & Wang's CRN / GCRN and DCCRN's "E" mask: 16 kHz audio, torch.stft with n_fft 512, hop 128 and a
sqrt-Hann window (257 bins, return_complex=True), the real and imaginary parts stacked as 2 input
channels [batch, 2, frames, 257]; an encoder of 5 Conv2d layers (kernel (2, 3), stride (1, 2), channels
16 / 32 / 64 / 128 / 256, causal padding in time) each with BatchNorm2d and ELU; a 2-layer LSTM of 512
over the frames on the flattened 256 x 7 features with a Linear back; a decoder of 5 ConvTranspose2d
layers mirroring the encoder with the skip connections concatenated on channels (the look-ahead frame
dropped), ending in 2 channels. The mask is bounded as DCCRN-E does: magnitude tanh(|M|), phase
atan2(M_imag, M_real), applied with torch.polar to the mixture's complex spectrum, and torch.istft back
to the waveform.

Data: 4-second noisy/clean pairs at batch 24, drawn on the device. Loss: negative SI-SNR on the waveform
plus the power-law compressed spectral MSE (|S|^0.3 with the phase, and the compressed magnitude), weight
0.5 each. Training in fp32 with Adam (foreach, lr 1e-3), 2 micro-batches of 12 accumulated per step and
gradient clipping at 5.

Phases: the first step; 3 more steps; enhancement of 8 noisy 10-second clips under torch.inference_mode in
eval mode (BatchNorm running statistics); then 2 steps under fp16 autocast with torch.amp.GradScaler (the
STFT and iSTFT in fp32, the mask in fp16 promoted by the complex product). 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19004)
if SMALL:
    BATCH, ACCUM, SEG, CH, HID, STEPS, ENH_N, ENH_SEG = 4, 2, 8000, (4, 8, 8, 16, 16), 32, 1, 2, 16000
else:
    BATCH, ACCUM, SEG, CH, HID, STEPS, ENH_N, ENH_SEG = (
        24,
        2,
        64000,
        (16, 32, 64, 128, 256),
        512,
        3,
        8,
        160000,
    )
N_FFT, HOP = 512, 128
EPS = 1e-8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
window = torch.hann_window(N_FFT, device=device).sqrt()


def freq_after(f, layers):
    for _ in range(layers):
        f = (f - 3) // 2 + 1
    return f


class CRN(nn.Module):
    def __init__(self, channels=CH, hidden=HID):
        super().__init__()
        self.enc = nn.ModuleList()
        cin = 2
        for c in channels:
            self.enc.append(
                nn.Sequential(nn.Conv2d(cin, c, (2, 3), stride=(1, 2)), nn.BatchNorm2d(c), nn.ELU())
            )
            cin = c
        self.freq = freq_after(N_FFT // 2 + 1, len(channels))
        self.lstm = nn.LSTM(channels[-1] * self.freq, hidden, num_layers=2, batch_first=True)
        self.proj = nn.Linear(hidden, channels[-1] * self.freq)
        self.dec = nn.ModuleList()
        outs = [*channels[:-1][::-1], 2]
        cin = channels[-1]
        for i, c in enumerate(outs):
            layers = [nn.ConvTranspose2d(cin * 2, c, (2, 3), stride=(1, 2))]
            if i < len(outs) - 1:
                layers += [nn.BatchNorm2d(c), nn.ELU()]
            self.dec.append(nn.Sequential(*layers))
            cin = c

    def forward(self, x):
        # x: [batch, 2, frames, freq]
        skips = []
        for layer in self.enc:
            x = layer(F.pad(x, (0, 0, 1, 0)))  # causal in time
            skips.append(x)
        b, c, t, f = x.shape
        y = x.permute(0, 2, 1, 3).reshape(b, t, c * f)
        y, _ = self.lstm(y)
        x = self.proj(y).reshape(b, t, c, f).permute(0, 2, 1, 3)
        for layer in self.dec:
            skip = skips.pop()
            x = F.pad(x, (0, skip.shape[-1] - x.shape[-1]))
            x = layer(torch.cat([x, skip], dim=1))[:, :, :-1]  # drop the look-ahead frame
        return x  # [batch, 2, frames, 255]: padded to 257 bins by the caller


def enhance(model, noisy):
    spec = torch.stft(noisy, N_FFT, HOP, window=window, return_complex=True)  # [batch, freq, frames]
    feats = torch.stack([spec.real, spec.imag], dim=1).transpose(2, 3)  # [batch, 2, frames, freq]
    mask = model(feats)
    mask = F.pad(mask, (0, spec.shape[1] - mask.shape[-1])).transpose(2, 3)
    m_mag = torch.tanh(torch.sqrt(mask[:, 0] ** 2 + mask[:, 1] ** 2 + EPS))
    m_phase = torch.atan2(mask[:, 1], mask[:, 0])
    est_spec = spec * torch.polar(m_mag.float(), m_phase.float())
    wav = torch.istft(est_spec, N_FFT, HOP, window=window, length=noisy.shape[-1])
    return wav, est_spec


def si_snr(est, ref):
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    target = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + EPS) * ref
    return 10 * torch.log10(target.pow(2).sum(-1) / ((est - target).pow(2).sum(-1) + EPS) + EPS)


def compressed_spectral_loss(est_spec, clean):
    ref_spec = torch.stft(clean, N_FFT, HOP, window=window, return_complex=True)
    est_mag = est_spec.abs().clamp_min(EPS) ** 0.3
    ref_mag = ref_spec.abs().clamp_min(EPS) ** 0.3
    est_c = est_mag * torch.exp(1j * est_spec.angle())
    ref_c = ref_mag * torch.exp(1j * ref_spec.angle())
    return F.mse_loss(est_mag, ref_mag) + (est_c - ref_c).abs().pow(2).mean()


def make_pair(bsz, samples):
    clean = torch.randn(bsz, samples, device=device) * 0.1
    noisy = clean + torch.randn(bsz, samples, device=device) * 0.05
    return noisy, clean


def loss_fn(wav, est_spec, clean):
    return 0.5 * (-si_snr(wav, clean).mean()) + 0.5 * compressed_spectral_loss(est_spec, clean)


model = CRN().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)


def train_step(use_amp=False, scaler=None):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(ACCUM):
        noisy, clean = make_pair(BATCH // ACCUM, SEG)
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp and amp):
            wav, est_spec = enhance(model, noisy)
        loss = loss_fn(wav.float(), est_spec, clean) / ACCUM
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        total += loss.item()
    if scaler is not None:
        scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    return total, gn.item()


model.train()
loss, gn = train_step()
print(f"step 0 loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step()
    print(f"step {step} loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    noisy, clean = make_pair(ENH_N, ENH_SEG)
    wav, _ = enhance(model, noisy)
    score = si_snr(wav, clean).mean().item()
    enhanced = wav.cpu()
print(f"enhanced {tuple(enhanced.shape)} SI-SNR {score:.2f} dB")
if device == "cuda":
    print(f"enhance peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(2):
    loss, gn = train_step(use_amp=True, scaler=scaler)
    print(f"fp16 step {step} loss {loss:.4f} grad norm {gn:.3f} scale {scaler.get_scale()}")
if device == "cuda":
    print(
        f"fp16 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
