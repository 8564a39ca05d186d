"""AudioSet tagging with Hugging Face's ASTForAudioClassification built from an ASTConfig (the AudioSet
checkpoint's sizes: ViT-base, 16 x 16 patches every 10 over 1,024 frames x 128 mel bins, 1,212 patches,
527 labels; random init), fed from raw 16 kHz waveforms with no torchaudio: the Kaldi-like log-mel front end
is written by hand on the GPU (`torch.stft` with a 25 ms Hann window every 10 ms, the power spectrum times an
HTK mel filterbank built with torch, log, AST's dataset normalisation), then the AST recipe's augmentations
by hand: SpecAugment (two frequency masks up to 24 bins and two time masks up to 96 frames per clip, built
from `torch.randint` starts and `arange` comparisons, applied with `masked_fill`) and mixup (a shuffled
batch, labels mixed alike), multi-label BCE, bf16 `torch.autocast`, Adam with `foreach=False`.

Then the same at twice the batch with `gradient_checkpointing_enable()`; last the model tags 30 s clips the
way AST's evaluation of long audio does: each clip cut into 1,024-frame windows every 512 frames, the windows
of all clips in one batch under `no_grad` and bf16 autocast, sigmoid scores averaged per clip.

Phases: 0 model and Adam; 1 three steps at batch 24 (10.24 s clips); 2 two checkpointed steps at batch 48;
3 sliding-window tagging of 6 clips of 30 s (24 windows). Seeded; no sizes depend on values."""

import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import ASTConfig, ASTForAudioClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(351_05)
np.random.seed(351_05)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = ASTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_length=128,
        num_mel_bins=32,
    )
    B1, B2, CLIPS, LONG_S = 4, 6, 2, 3.0
else:
    config = ASTConfig(max_length=1024, num_mel_bins=128)
    B1, B2, CLIPS, LONG_S = 24, 48, 6, 30.0
config.num_labels = 527
config._attn_implementation = "sdpa"
SR, N_FFT, HOP = 16000, 400, 160
FRAMES, MELS = config.max_length, config.num_mel_bins
CLIP = (FRAMES - 1) * HOP


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def htk_mel_filterbank(n_mels, n_fft, sr):
    mel = lambda f: 1127.0 * math.log(1.0 + f / 700.0)  # noqa: E731
    edges = torch.linspace(mel(20.0), mel(sr / 2), n_mels + 2, device=device)
    hz = 700.0 * (torch.exp(edges / 1127.0) - 1.0)
    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, device=device)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)  # (n_mels, n_fft // 2 + 1)


MEL_FB = htk_mel_filterbank(MELS, N_FFT, SR)
WINDOW = torch.hann_window(N_FFT, device=device)


def log_mel(wave):
    wave = wave - wave.mean(dim=-1, keepdim=True)
    spec = torch.stft(wave, N_FFT, hop_length=HOP, window=WINDOW, return_complex=True)
    power = spec.abs().pow(2)
    mel = torch.matmul(MEL_FB, power).clamp(min=1e-10).log()  # (batch, mels, frames)
    mel = mel[..., :FRAMES].transpose(1, 2)
    return (mel - (-4.2677393)) / (4.5689974 * 2)  # AST's AudioSet normalisation


def spec_augment(feats, n_freq=2, freq_w=24, n_time=2, time_w=96):
    b = feats.shape[0]
    mask = torch.zeros(b, FRAMES, MELS, dtype=torch.bool, device=device)
    bins = torch.arange(MELS, device=device)
    frames = torch.arange(FRAMES, device=device)
    for _ in range(n_freq):
        w = torch.randint(0, freq_w + 1, (b, 1), device=device)
        f0 = (torch.rand(b, 1, device=device) * (MELS - w)).long()
        mask |= ((bins[None] >= f0) & (bins[None] < f0 + w))[:, None, :]
    for _ in range(n_time):
        w = torch.randint(0, time_w + 1, (b, 1), device=device)
        t0 = (torch.rand(b, 1, device=device) * (FRAMES - w)).long()
        mask |= ((frames[None] >= t0) & (frames[None] < t0 + w))[:, :, None]
    return feats.masked_fill(mask, 0.0)


def batch(n):
    wave = torch.randn(n, CLIP, device=device) * 0.1
    labels = (torch.rand(n, config.num_labels, device=device) < 0.02).float()
    feats = spec_augment(log_mel(wave))
    lam = float(np.random.beta(10.0, 10.0))
    perm = torch.randperm(n, device=device)
    feats = lam * feats + (1 - lam) * feats[perm]
    labels = lam * labels + (1 - lam) * labels[perm]
    return feats, labels


model = ASTForAudioClassification(config).to(device).train()
optimizer = torch.optim.Adam(
    model.parameters(), lr=1e-5, betas=(0.95, 0.999), weight_decay=5e-7, foreach=False
)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 AST AudioSet-sized, Adam foreach=False")


def train_step(n):
    feats, labels = batch(n)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        logits = model(input_values=feats).logits
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


for step in range(3):
    print(f"step {step}: loss {train_step(B1):.4f}")
report(f"phase1 three steps, batch {B1}, SpecAugment + mixup, bf16 autocast")

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for step in range(2):
    print(f"checkpointed step {step}: loss {train_step(B2):.4f}")
report(f"phase2 two checkpointed steps, batch {B2}")

model.eval()
long_wave = torch.randn(CLIPS, int(LONG_S * SR), device=device) * 0.1
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
    wave = long_wave - long_wave.mean(dim=-1, keepdim=True)
    spec = torch.stft(wave, N_FFT, hop_length=HOP, window=WINDOW, return_complex=True)
    mel = torch.matmul(MEL_FB, spec.abs().pow(2)).clamp(min=1e-10).log().transpose(1, 2)
    mel = (mel - (-4.2677393)) / (4.5689974 * 2)
    windows = mel.unfold(1, FRAMES, FRAMES // 2).permute(0, 1, 3, 2)  # (clips, n_windows, frames, mels)
    n_windows = windows.shape[1]
    scores = torch.sigmoid(model(input_values=windows.reshape(-1, FRAMES, MELS)).logits.float())
    clip_scores = scores.view(CLIPS, n_windows, -1).mean(dim=1)
top = clip_scores.topk(5, dim=-1).indices.cpu()
print(f"{CLIPS} clips x {n_windows} windows, top-5 labels {tuple(top.shape)}")
del long_wave, wave, spec, mel, windows, scores, clip_scores
report(f"phase3 sliding-window tagging, {CLIPS} clips of {LONG_S:.0f} s")
