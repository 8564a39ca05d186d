"""A pulse-Doppler radar processing chain on the GPU, then a target classifier trained through it (fp32,
complex64 signals, synthetic and seeded). Each coherent processing interval (CPI): 8 receive channels x
128 pulses x 4,096 fast-time samples of complex baseband, a linear FM chirp of 256 samples, 1 to 6 point
targets (range, Doppler, amplitude) in complex Gaussian noise.
Phase 1, range compression of 12 CPIs: the chirp matched filter in the frequency domain (`torch.fft.fft`
along fast time at n = 4,096 + 255, times the conjugate spectrum of the `torch.signal.windows.kaiser`
(beta 6) tapered chirp, `torch.fft.ifft`, cropped).
Phase 2, Doppler processing and detection: a `torch.signal.windows.hann` slow-time taper, `torch.fft.fftn`
over (pulses, channels) (Doppler and a coarse angle FFT at once), `fftshift` on Doppler, power summed over
angle bins; a cell-averaging CFAR (training cells by `avg_pool2d` of the power with guard cells subtracted),
detections by threshold; range-profile autocorrelations by `torch.fft.ihfft` / `torch.fft.hfft` (the
Hermitian pair) of the power spectra.
Phase 3, training: a small CNN classifies the target class of single-target CPIs (3 classes by Doppler
signature) from log range-Doppler maps; the slow-time taper is a learnable parameter (initialised from
`torch.signal.windows.gaussian`), so gradients flow back through `fftn`, the complex multiply and `abs`;
Adam, 6 steps of 6 CPIs at 2 channels.
Phase 4, inference under `torch.inference_mode()` on 12 CPIs.
4 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2884)
dev = "cuda"
CH, P, NS, LC, FS, PRF = 8, 128, 4096, 256, 50e6, 10e3


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


t = torch.arange(LC, device=dev) / FS
chirp = torch.exp(1j * math.pi * (20e6 / (LC / FS)) * (t - t.mean()) ** 2).to(torch.complex64)
taper = torch.signal.windows.kaiser(LC, beta=6.0, sym=True, device=dev)
NFFT = NS + LC - 1
ref = torch.fft.fft(chirp * taper, n=NFFT).conj()


def make_cpi(n, ch, single=False):
    """(n, ch, P, NS) complex64 echoes; with single=True one target and its class (Doppler band)."""
    sig = (torch.randn(n, ch, P, NS, device=dev) + 1j * torch.randn(n, ch, P, NS, device=dev)) * 0.7
    sig = sig.to(torch.complex64)
    labels = torch.randint(0, 3, (n,), device=dev)
    pulses = torch.arange(P, device=dev)
    chans = torch.arange(ch, device=dev)
    for i in range(n):
        k = 1 if single else int(torch.randint(1, 7, ()).item())
        for _ in range(k):
            r0 = int(torch.randint(100, NS - LC - 100, ()).item())
            if single:
                fd = (labels[i] - 1) * 2500.0 + (torch.rand((), device=dev) - 0.5) * 1000
            else:
                fd = (torch.rand((), device=dev) - 0.5) * PRF
            az = (torch.rand((), device=dev) - 0.5) * math.pi
            amp = 0.5 + torch.rand((), device=dev) * 2
            dopp = torch.exp(2j * math.pi * fd * pulses / PRF)  # (P,)
            steer = torch.exp(1j * math.pi * torch.sin(az) * chans)  # (ch,)
            echo = amp * steer[:, None, None] * dopp[None, :, None] * chirp[None, None, :]
            sig[i, :, :, r0 : r0 + LC] += echo.to(torch.complex64)
    return sig, labels


def range_compress(sig):
    spec = torch.fft.fft(sig, n=NFFT, dim=-1)
    return torch.fft.ifft(spec * ref, dim=-1)[..., LC - 1 : LC - 1 + NS]


# --- phase 1: range compression -----------------------------------------------------------------------
with torch.no_grad():
    compressed = []
    for _ in range(3):
        sig, _ = make_cpi(4, CH)
        compressed.append(range_compress(sig))
        del sig
    rc = torch.cat(compressed)
    del compressed
print("range compressed", tuple(rc.shape), rc.dtype)
report("range_compression_matched_filter")

# --- phase 2: Doppler + angle FFT, CA-CFAR, autocorrelation ----------------------------------------------
slow = torch.signal.windows.hann(P, sym=False, device=dev)
with torch.no_grad():
    rd = torch.fft.fftn(rc * slow[None, None, :, None], s=(P, 16), dim=(2, 1))  # (n, 16 angle, P, NS)
    rd = torch.fft.fftshift(rd, dim=2)
    power = rd.abs().pow(2).sum(1)  # (n, P, NS)
    del rd
    guard, train = (2, 4), (8, 16)
    kin = (2 * guard[0] + 1, 2 * guard[1] + 1)
    kout = (2 * (guard[0] + train[0]) + 1, 2 * (guard[1] + train[1]) + 1)
    p4 = power[:, None]
    s_out = F.avg_pool2d(p4, kout, 1, (kout[0] // 2, kout[1] // 2), count_include_pad=False) * (
        kout[0] * kout[1]
    )
    s_in = F.avg_pool2d(p4, kin, 1, (kin[0] // 2, kin[1] // 2), count_include_pad=False) * (kin[0] * kin[1])
    noise = (s_out - s_in) / (kout[0] * kout[1] - kin[0] * kin[1])
    det = (p4 > 14.0 * noise).squeeze(1)
    print("detections per CPI", det.flatten(1).sum(1).tolist())
    prof = power.sum(1)  # (n, NS) range profiles
    half = torch.fft.ihfft(prof, dim=-1)
    acf = torch.fft.hfft(half * half.conj(), n=NS, dim=-1)
    print("acf lag0", [round(v, 1) for v in (acf[:, 0] / NS).tolist()[:4]])
del rc, power, p4, s_out, s_in, noise, det, prof, half, acf
report("doppler_fftn_cfar_hfft_autocorrelation")


# --- phase 3: learnable slow-time taper + CNN classifier trained through the FFT ------------------------
class RDNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.taper = nn.Parameter(torch.signal.windows.gaussian(P, std=P / 5, device=dev))
        self.cnn = nn.Sequential(
            nn.Conv2d(1, 16, 5, stride=(1, 4), padding=2), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=(2, 4), padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 3),
        )  # fmt: skip

    def forward(self, rc):  # rc: (n, ch, P, NS) range-compressed
        rd = torch.fft.fft(rc * self.taper[None, None, :, None].to(rc.dtype), dim=2)
        rd = torch.fft.fftshift(rd, dim=2)
        logmap = torch.log1p(rd.abs().pow(2).sum(1))  # (n, P, NS)
        return self.cnn(logmap[:, None])


net = RDNet().to(dev)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(6):
    with torch.no_grad():
        sig, lab = make_cpi(6, 2, single=True)
        rcb = range_compress(sig)
        del sig
    loss = F.cross_entropy(net(rcb), lab)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print("step", step, "loss", round(loss.item(), 4))
del rcb
report("learnable_taper_cnn_through_fft")

net.eval()
correct = 0
with torch.inference_mode():
    for _ in range(2):
        sig, lab = make_cpi(6, 2, single=True)
        pred = net(range_compress(sig)).argmax(1)
        correct += (pred == lab).sum().item()
        del sig
print("accuracy", correct / 12)
report("inference_mode_eval")
