"""The Demucs speech denoiser (Defossez, Synnaeve & Adi 2020, facebookresearch/denoiser) written by hand in
its non-causal configuration: the input normalised by its standard deviation, upsampled 4x by two
sinc-interpolation stages (upsample2: a 56-tap windowed-sinc Conv1d producing the odd samples, interleaved
with the even ones), an encoder of depth 5 (Conv1d kernel 8 stride 4 + ReLU, then a 1 x 1 Conv1d to twice
the channels + GLU; hidden 48 growing x2 to 768), a 2-layer bidirectional LSTM bottleneck with a Linear back
to 768 channels, a mirrored decoder (1 x 1 Conv1d + GLU, ConvTranspose1d kernel 8 stride 4, ReLU except
the last) with U-Net skip connections added, downsampling back by two sinc stages, and the std restored.
Weights rescaled at init as the original (reference std 0.1).

Data: 16 kHz noisy/clean pairs of 4 seconds at batch 16 (clean speech as random noise, the noisy input
the clean plus scaled noise), made on the device. Loss: L1 on the waveform plus the multi-resolution STFT
loss (FFT sizes 512 / 1024 / 2048, hops 50 / 120 / 240, Hann windows 240 / 600 / 1200; spectral convergence
+ log-magnitude L1), the STFTs taken in fp32 on the float32 estimate. Training under bf16 autocast with
fused AdamW (lr 3e-4, betas 0.9 / 0.999).

Phases: the first step; 3 more steps; after torch.cuda.empty_cache(), enhancement of 4 noisy 10-second
clips at once under torch.inference_mode and bf16 autocast, with the dry/wet mix (dry 0.05) and the
results moved to the host; then a no_grad validation loss over 2 batches of 16 in fp32. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19003)
if SMALL:
    BATCH, SEG, HIDDEN, DEPTH, STEPS, ENH_N, ENH_SEG = 2, 16000, 8, 3, 1, 1, 32000
else:
    BATCH, SEG, HIDDEN, DEPTH, STEPS, ENH_N, ENH_SEG = 16, 64000, 48, 5, 3, 4, 160000
KERNEL, STRIDE, RESAMPLE, GROWTH = 8, 4, 4, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def sinc(t):
    return torch.where(t == 0, torch.tensor(1.0, device=t.device, dtype=t.dtype), torch.sin(t) / t)


def kernel_upsample2(zeros=56):
    win = torch.hann_window(4 * zeros + 1, periodic=False)
    winodd = win[1::2]
    t = torch.linspace(-zeros + 0.5, zeros - 0.5, 2 * zeros)
    t *= math.pi
    return (sinc(t) * winodd).view(1, 1, -1)


def upsample2(x, zeros=56):
    *other, time = x.shape
    kernel = kernel_upsample2(zeros).to(x)
    out = F.conv1d(x.view(-1, 1, time), kernel, padding=zeros)[..., 1:].view(*other, time)
    y = torch.stack([x, out], dim=-1)
    return y.view(*other, -1)


def kernel_downsample2(zeros=56):
    return kernel_upsample2(zeros)


def downsample2(x, zeros=56):
    if x.shape[-1] % 2 != 0:
        x = F.pad(x, (0, 1))
    xeven = x[..., ::2]
    xodd = x[..., 1::2]
    *other, time = xodd.shape
    kernel = kernel_downsample2(zeros).to(x)
    out = xeven + F.conv1d(xodd.reshape(-1, 1, time), kernel, padding=zeros)[..., :-1].view(*other, time)
    return out.view(*other, -1).mul(0.5)


def rescale_module(module, reference=0.1):
    for sub in module.modules():
        if isinstance(sub, (nn.Conv1d, nn.ConvTranspose1d)):
            std = sub.weight.std().detach()
            scale = (std / reference) ** 0.5
            sub.weight.data /= scale
            if sub.bias is not None:
                sub.bias.data /= scale


class BLSTM(nn.Module):
    def __init__(self, dim, layers=2):
        super().__init__()
        self.lstm = nn.LSTM(bidirectional=True, num_layers=layers, hidden_size=dim, input_size=dim)
        self.linear = nn.Linear(2 * dim, dim)

    def forward(self, x):
        x, _ = self.lstm(x)
        return self.linear(x)


class Demucs(nn.Module):
    def __init__(self, hidden=HIDDEN, depth=DEPTH):
        super().__init__()
        self.depth = depth
        self.floor = 1e-3
        self.encoder = nn.ModuleList()
        self.decoder = nn.ModuleList()
        chin, chout = 1, 1
        for index in range(depth):
            self.encoder.append(
                nn.Sequential(
                    nn.Conv1d(chin, hidden, KERNEL, STRIDE),
                    nn.ReLU(),
                    nn.Conv1d(hidden, hidden * 2, 1),
                    nn.GLU(1),
                )
            )
            decode = [
                nn.Conv1d(hidden, 2 * hidden, 1),
                nn.GLU(1),
                nn.ConvTranspose1d(hidden, chout, KERNEL, STRIDE),
            ]
            if index > 0:
                decode.append(nn.ReLU())
            self.decoder.insert(0, nn.Sequential(*decode))
            chout = hidden
            chin = hidden
            hidden = GROWTH * hidden
        self.lstm = BLSTM(chin)
        rescale_module(self)

    def valid_length(self, length):
        length = math.ceil(length * RESAMPLE)
        for _ in range(self.depth):
            length = math.ceil((length - KERNEL) / STRIDE) + 1
            length = max(length, 1)
        for _ in range(self.depth):
            length = (length - 1) * STRIDE + KERNEL
        return math.ceil(length / RESAMPLE)

    def forward(self, mix):
        if mix.dim() == 2:
            mix = mix.unsqueeze(1)
        mono = mix.mean(dim=1, keepdim=True)
        std = mono.std(dim=-1, keepdim=True)
        mix = mix / (self.floor + std)
        length = mix.shape[-1]
        x = F.pad(mix, (0, self.valid_length(length) - length))
        x = upsample2(x)
        x = upsample2(x)
        skips = []
        for encode in self.encoder:
            x = encode(x)
            skips.append(x)
        x = x.permute(2, 0, 1)
        x = self.lstm(x)
        x = x.permute(1, 2, 0)
        for decode in self.decoder:
            skip = skips.pop(-1)
            x = x + skip[..., : x.shape[-1]]
            x = decode(x)
        x = downsample2(x)
        x = downsample2(x)
        x = x[..., :length]
        return std * x


RESOLUTIONS = [(512, 50, 240), (1024, 120, 600), (2048, 240, 1200)]
windows = {win: torch.hann_window(win, device=device) for _, _, win in RESOLUTIONS}


def stft_mag(x, fft, hop, win):
    spec = torch.stft(x, fft, hop, win, windows[win], return_complex=True)
    return torch.clamp(spec.real**2 + spec.imag**2, min=1e-7).sqrt().transpose(2, 1)


def multi_resolution_stft_loss(est, ref):
    sc_total, mag_total = 0.0, 0.0
    for fft, hop, win in RESOLUTIONS:
        e = stft_mag(est, fft, hop, win)
        r = stft_mag(ref, fft, hop, win)
        sc_total = sc_total + torch.norm(r - e, p="fro") / torch.norm(r, p="fro")
        mag_total = mag_total + F.l1_loss(torch.log(r), torch.log(e))
    return sc_total / len(RESOLUTIONS), mag_total / len(RESOLUTIONS)


def make_pair(bsz, samples):
    clean = torch.randn(bsz, 1, samples, device=device) * 0.1
    noise = torch.randn(bsz, 1, samples, device=device) * torch.rand(bsz, 1, 1, device=device) * 0.1
    return clean + noise, clean


def compute_loss(est, clean):
    est = est.float()
    sc, mag = multi_resolution_stft_loss(est.squeeze(1), clean.squeeze(1))
    return F.l1_loss(est, clean) + sc + mag


model = Demucs().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), fused=amp)


def train_step():
    noisy, clean = make_pair(BATCH, SEG)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        est = model(noisy)
    loss = compute_loss(est, clean)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.empty_cache()
    print(f"after empty_cache reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
dry = 0.05
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    noisy, _ = make_pair(ENH_N, ENH_SEG)
    estimate = model(noisy).float()
    enhanced = (dry * noisy + (1 - dry) * estimate).cpu()
print(f"enhanced {tuple(enhanced.shape)} rms {enhanced.pow(2).mean().sqrt():.4f}")
if device == "cuda":
    print(f"enhance peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

val = 0.0
with torch.no_grad():
    for _ in range(2):
        noisy, clean = make_pair(BATCH, SEG)
        val += compute_loss(model(noisy), clean).item()
print(f"val loss {val / 2:.4f}")
if device == "cuda":
    print(
        f"val allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
