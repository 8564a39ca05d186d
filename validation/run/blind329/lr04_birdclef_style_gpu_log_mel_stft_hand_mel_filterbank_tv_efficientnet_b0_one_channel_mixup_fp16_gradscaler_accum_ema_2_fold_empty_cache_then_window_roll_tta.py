"""A BirdCLEF-style Kaggle notebook: 5-second 32 kHz clips turned into log-mel spectrograms on the GPU
(torch.stft with a Hann window, n_fft 2048, hop 320, a hand-built triangular 128-band mel filterbank
applied by matmul, power-to-dB with a top_db clamp, per-clip standardisation), a torchvision
efficientnet_b0 whose stem convolution is replaced by a 1-channel one and whose classifier predicts
182 species, mixup by hand (Beta(0.4) lambda, rolled batch) with multi-label BCE, fp16 autocast with
GradScaler and gradient accumulation of 4, an EMA copy via AveragedModel(get_ema_multi_avg_fn(0.998)).
2-fold CV with a fresh model per fold; after each fold the EMA weights are kept as a CPU state_dict
and `del model, ema, optimizer, scaler; gc.collect(); torch.cuda.empty_cache()`. Then soundscape
inference: 60-second test recordings cut into 12 five-second windows by unfold, each fold's EMA model
scoring them in fp16 with a time-shift TTA (torch.roll by +-0.5 s) averaged.

Phases: 0 data and frontend; 1 fold 0; 2 fold 1; 3 soundscape inference."""

import gc
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3294)
device = "cuda" if torch.cuda.is_available() else "cpu"
SR = 32000
if SMALL:
    N_TRAIN, N_SOUND, BS, MICRO, N_MELS, N_FFT = 16, 1, 2, 4, 32, 512
else:
    N_TRAIN, N_SOUND, BS, MICRO, N_MELS, N_FFT = 384, 4, 24, 8, 128, 2048
HOP, CLIP, N_CLASSES, N_FOLDS, ACCUM = 320, 5 * SR, 182, 2, 4


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def mel_filterbank(n_fft, n_mels, sr, fmin=50.0, fmax=14000.0):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None] - lower) / (center - lower)
    down = (upper - freqs[None]) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)  # (n_mels, n_freq)


FB = mel_filterbank(N_FFT, N_MELS, SR).to(device)
WINDOW = torch.hann_window(N_FFT, device=device)


def logmel(wave):
    spec = torch.stft(wave, N_FFT, HOP, window=WINDOW, center=True, return_complex=True)
    power = spec.real.pow(2) + spec.imag.pow(2)
    mel = torch.matmul(FB, power)
    db = 10.0 * torch.log10(mel.clamp(min=1e-10))
    db = torch.maximum(db, db.amax(dim=(-2, -1), keepdim=True) - 80.0)
    db = (db - db.mean(dim=(-2, -1), keepdim=True)) / (db.std(dim=(-2, -1), keepdim=True) + 1e-6)
    return db.unsqueeze(1)


def build_model():
    m = torchvision.models.efficientnet_b0(weights=None, num_classes=N_CLASSES, dropout=0.25)
    m.features[0][0] = nn.Conv2d(1, 32, 3, stride=2, padding=1, bias=False)
    return m


waves = torch.randn(N_TRAIN, CLIP) * 0.1
targets = torch.zeros(N_TRAIN, N_CLASSES)
targets[torch.arange(N_TRAIN), torch.randint(0, N_CLASSES, (N_TRAIN,))] = 1.0
soundscapes = torch.randn(N_SOUND, 60 * SR) * 0.1
folds = torch.arange(N_TRAIN) % N_FOLDS
beta = torch.distributions.Beta(torch.tensor(0.4), torch.tensor(0.4))
ema_states = []
report("data")

for fold in range(N_FOLDS):
    tr_idx = (folds != fold).nonzero().squeeze(1)
    model = build_model().to(device)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.998), use_buffers=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**12)
    model.train()
    for step in range(MICRO):
        b = tr_idx[step * BS : (step + 1) * BS]
        wave, y = waves[b].to(device, non_blocking=True), targets[b].to(device)
        with torch.no_grad():
            x = logmel(wave)
        lam = beta.sample().item()
        x = lam * x + (1 - lam) * x.roll(1, 0)
        y = lam * y + (1 - lam) * y.roll(1, 0)
        with torch.autocast(device_type=device, dtype=torch.float16):
            logits = model(x)
        loss = F.binary_cross_entropy_with_logits(logits.float(), y) / ACCUM
        scaler.scale(loss).backward()
        if (step + 1) % ACCUM == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            ema.update_parameters(model)
    ema_states.append({k: v.detach().cpu() for k, v in ema.module.state_dict().items()})
    del model, ema, optimizer, scaler
    gc.collect()
    torch.cuda.empty_cache()
    report(f"fold{fold}")

preds = torch.zeros(N_SOUND, 12, N_CLASSES, device=device)
shift = SR // 2
for state in ema_states:
    model = build_model()
    model.load_state_dict(state)
    model = model.to(device).half().eval()
    with torch.inference_mode():
        for i in range(N_SOUND):
            chunks = soundscapes[i].to(device).unfold(0, CLIP, CLIP)  # (12, CLIP)
            views = [chunks, chunks.roll(shift, 1), chunks.roll(-shift, 1)]
            p = torch.stack([model(logmel(v).half()).float().sigmoid() for v in views]).mean(0)
            preds[i] += p / len(ema_states)
    del model
print(f"soundscape preds {preds.shape} max {preds.max().item():.3f}")
report("inference")
