"""Speech-enhancement style program in complex arithmetic: noisy waveforms (synthetic harmonic
signals plus noise) go through torch.stft (return_complex) into a complex-valued mask network whose
layers are nn.Linear(dtype=torch.cfloat) with a modReLU activation written with torch.polar/abs/angle;
the masked spectrum returns through torch.istft, and the loss mixes a negative SI-SDR on waveforms
with a complex spectral MSE on torch.view_as_real. AdamW with amsgrad (foreach) updates the complex
parameters. Then a 4-microphone MVDR beamformer per frequency: complex spatial covariances with
einsum, torch.linalg.eigh of the Hermitian noise covariance for its condition, torch.linalg.solve
for the weights, applied with einsum; finally a pitch-style autocorrelation of the enhanced signals via
torch.fft.rfft / irfft of |X|^2, under inference_mode.

Phases: 0 signals and model; 1 complex mask training; 2 MVDR beamforming; 3 FFT autocorrelation."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3324)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, L, N_FFT, HOP, HID, STEPS, MICS = 4, 4000, 128, 32, 64, 3, 4
else:
    B, L, N_FFT, HOP, HID, STEPS, MICS = 48, 64000, 512, 128, 1024, 10, 4
F_BINS = N_FFT // 2 + 1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ModReLU(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.full((n,), -0.05))

    def forward(self, z):
        return torch.polar(torch.relu(z.abs() + self.b), z.angle())


class ComplexMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(F_BINS, HID, dtype=torch.cfloat)
        self.a1 = ModReLU(HID)
        self.l2 = nn.Linear(HID, HID, dtype=torch.cfloat)
        self.a2 = ModReLU(HID)
        self.l3 = nn.Linear(HID, F_BINS, dtype=torch.cfloat)

    def forward(self, spec):
        z = spec.transpose(1, 2)
        z = self.a1(self.l1(z))
        z = self.a2(self.l2(z))
        m = self.l3(z)
        m = m / (1 + m.abs())
        return m.transpose(1, 2) * spec


def make_signals(n):
    t = torch.arange(L, device=device) / 16000
    f0 = 100 + 200 * torch.rand(n, 1, device=device)
    clean = sum(torch.sin(2 * torch.pi * k * f0 * t) / k for k in range(1, 6))
    return clean, clean + 0.5 * torch.randn(n, L, device=device)


window = torch.hann_window(N_FFT, device=device)
clean, noisy = make_signals(B)
model = ComplexMask().to(device)
report("signals and model")


def si_sdr(est, ref):
    ref = ref - ref.mean(-1, keepdim=True)
    est = est - est.mean(-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) / (ref * ref).sum(-1, keepdim=True) * ref
    return 10 * torch.log10((proj * proj).sum(-1) / ((est - proj) ** 2).sum(-1))


opt = torch.optim.AdamW(model.parameters(), lr=1e-3, amsgrad=True, foreach=True)
model.train()
for step in range(STEPS):
    spec = torch.stft(noisy, N_FFT, HOP, window=window, return_complex=True)
    target = torch.stft(clean, N_FFT, HOP, window=window, return_complex=True)
    est_spec = model(spec)
    est = torch.istft(est_spec, N_FFT, HOP, window=window, length=L)
    loss = (
        -si_sdr(est, clean).mean() + (torch.view_as_real(est_spec) - torch.view_as_real(target)).pow(2).mean()
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
report("complex mask training")

steer = torch.polar(torch.ones(MICS, device=device), torch.linspace(0, 1.5, MICS, device=device))
with torch.no_grad():
    mics = clean[:, None, :] + 0.3 * torch.randn(B, MICS, L, device=device)
    noise_only = 0.3 * torch.randn(B, MICS, L, device=device)
    X = torch.stft(mics.reshape(B * MICS, L), N_FFT, HOP, window=window, return_complex=True)
    X = X.reshape(B, MICS, F_BINS, -1)
    Nn = torch.stft(noise_only.reshape(B * MICS, L), N_FFT, HOP, window=window, return_complex=True)
    Nn = Nn.reshape(B, MICS, F_BINS, -1)
    phi_n = torch.einsum("bmft,bnft->bfmn", Nn, Nn.conj()) / Nn.shape[-1]
    phi_n = phi_n + 1e-3 * torch.eye(MICS, device=device, dtype=phi_n.dtype)
    evals = torch.linalg.eigh(phi_n).eigenvalues
    cond = evals[..., -1] / evals[..., 0]
    d = steer.reshape(1, 1, MICS, 1).expand(B, F_BINS, MICS, 1).contiguous()
    num = torch.linalg.solve(phi_n, d)
    w = num / (d.conj().transpose(-1, -2) @ num)
    Y = torch.einsum("bfm,bmft->bft", w.squeeze(-1).conj(), X)
    beam = torch.istft(Y, N_FFT, HOP, window=window, length=L)
report("MVDR beamforming")

model.eval()
with torch.inference_mode():
    enhanced = torch.istft(
        model(torch.stft(beam, N_FFT, HOP, window=window, return_complex=True)),
        N_FFT,
        HOP,
        window=window,
        length=L,
    )
    spec2 = torch.fft.rfft(enhanced, n=2 * L)
    ac = torch.fft.irfft(spec2.abs() ** 2, n=2 * L)[:, :L]
    lag = ac[:, 40:400].argmax(-1) + 40
print("cond", float(cond.mean()), "lag", lag.float().mean().item())
report("FFT autocorrelation")
