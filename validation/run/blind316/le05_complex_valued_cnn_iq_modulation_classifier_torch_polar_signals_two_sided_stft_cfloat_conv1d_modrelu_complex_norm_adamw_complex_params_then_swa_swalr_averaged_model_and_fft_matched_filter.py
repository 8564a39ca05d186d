"""A complex-valued CNN (Trabelsi et al.'s deep complex networks, simplified) classifying the modulation of
synthetic complex baseband (I/Q) signals. Signals are built with ``torch.polar`` from random symbols, pulse
shaping by ``repeat_interleave``, a carrier offset and noise; their two-sided STFT (complex input,
``return_complex=True``, ``onesided=False``) feeds ``nn.Conv1d(..., dtype=torch.cfloat)`` layers with a
hand-written modReLU (``torch.polar(relu(|z| + b), angle(z))``) and a complex normalisation (complex mean
removed, scaled by the RMS modulus, complex affine parameters). The magnitude of the last complex features is
pooled over time and a real Linear layer classifies. AdamW updates the complex parameters.

Phases: 0 signals and model; 1 15 AdamW steps at batch 256 (fp32); 2 stochastic weight averaging: 10 more
steps under ``SWALR`` with ``swa_utils.AveragedModel.update_parameters`` after each; 3 the averaged model
evaluated on 4096 signals in chunks of 1024 under no_grad; 4 a classical baseline: FFT matched filtering of
the 4096 signals against eight reference signals (``torch.fft.fft``, conjugate product, ``ifft``, peak
modulus)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel

torch.manual_seed(21)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


n_classes, sig_len, sps = 8, 4096, 8
orders = torch.tensor([2, 4, 8, 16, 32, 64, 4, 8], device=device)
radii = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.7], device=device)


def make_signals(n, g):
    labels = torch.randint(0, n_classes, (n,), device=device, generator=g)
    m = orders[labels].unsqueeze(1).float()
    k = torch.floor(torch.rand(n, sig_len // sps, device=device, generator=g) * m)
    ring = torch.where(
        torch.rand(n, sig_len // sps, device=device, generator=g) < 0.5, 1.0, radii[labels].unsqueeze(1)
    )
    symbols = torch.polar(ring, 2 * math.pi * k / m)
    baseband = symbols.repeat_interleave(sps, dim=1)
    t = torch.arange(sig_len, device=device).float()
    offset = torch.rand(n, 1, device=device, generator=g) * 0.01
    carrier = torch.polar(torch.ones(n, sig_len, device=device), 2 * math.pi * offset * t)
    noise = torch.complex(
        torch.randn(n, sig_len, device=device, generator=g),
        torch.randn(n, sig_len, device=device, generator=g),
    )
    return baseband * carrier + 0.1 * noise, labels


class ModReLU(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.full((1, channels, 1), -0.1))

    def forward(self, z):
        return torch.polar(F.relu(z.abs() + self.bias), z.angle())


class ComplexNorm(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, channels, 1, dtype=torch.cfloat))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, dtype=torch.cfloat))
        self.eps = eps

    def forward(self, z):
        z = z - z.mean(dim=(0, 2), keepdim=True)
        rms = z.abs().pow(2).mean(dim=(0, 2), keepdim=True).add(self.eps).sqrt()
        return self.gamma * (z / rms) + self.beta


class ComplexCNN(nn.Module):
    def __init__(self, n_fft=256, widths=(128, 128, 256, 256)):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer("window", torch.hann_window(n_fft))
        layers, c_in = [], n_fft
        for i, w in enumerate(widths):
            layers += [
                nn.Conv1d(c_in, w, 3, stride=2 if i % 2 else 1, padding=1, dtype=torch.cfloat),
                ComplexNorm(w),
                ModReLU(w),
            ]
            c_in = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, n_classes)

    def forward(self, x):
        spec = torch.stft(
            x, self.n_fft, hop_length=self.n_fft // 4, window=self.window, onesided=False, return_complex=True
        )
        z = self.features(spec)
        return self.head(z.abs().mean(-1))


g = torch.Generator(device=device).manual_seed(3)
x_train, y_train = make_signals(4096, g)
model = ComplexCNN().to(device)
report("signals and model")

opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
for _step in range(15):
    idx = torch.randint(0, 4096, (256,), device=device, generator=g)
    loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("loss", loss.item())
report("complex cnn training")

swa_model = AveragedModel(model)
swa_sched = SWALR(opt, swa_lr=5e-4, anneal_epochs=3, anneal_strategy="cos")
for _step in range(10):
    idx = torch.randint(0, 4096, (256,), device=device, generator=g)
    loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    swa_model.update_parameters(model)
    swa_sched.step()
print("swa loss", loss.item(), "averaged", swa_model.n_averaged.item())
report("swa with swalr")

x_test, y_test = make_signals(4096, g)
swa_model.eval()
with torch.no_grad():
    logits = torch.cat([swa_model(c) for c in x_test.split(1024)])
    acc = (logits.argmax(1) == y_test).float().mean()
print("swa accuracy", acc.item())
report("averaged model evaluation")

with torch.no_grad():
    templates, _ = make_signals(n_classes, torch.Generator(device=device).manual_seed(99))
    X = torch.fft.fft(x_test)
    Tm = torch.fft.fft(templates)
    scores = torch.stack([torch.fft.ifft(X * Tm[c].conj()).abs().amax(-1) for c in range(n_classes)], dim=1)
    print("matched filter agreement", (scores.argmax(1) == logits.argmax(1)).float().mean().item())
report("fft matched filter")
