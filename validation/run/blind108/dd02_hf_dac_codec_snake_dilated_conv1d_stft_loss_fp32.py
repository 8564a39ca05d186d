"""HF DAC neural audio codec (Snake activations, residual units of dilated Conv1d(k=7) at
dilations 1, 3, 9, strided Conv1d downsampling by 2, 4, 5, 8, ConvTranspose1d upsampling, a
9-codebook residual vector quantizer with factorized l2-normalized codes) built from a config with
odd widths (encoder 40 channels doubling to 640, decoder 720 halving to 45; no download), trained
as an autoencoder: batch 8 of 1.2 s 16 kHz clips, the model's commitment/codebook loss plus
waveform L1 plus a two-resolution log-magnitude STFT loss, fp32, AdamW, 3 steps; then
encode/decode of 3 clips of 4 s under inference_mode with 4 codebooks; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import DacConfig, DacModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10802)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, STEPS = (2, 2) if SMALL else (8, 3)
cfg = DacConfig(
    encoder_hidden_size=8 if SMALL else 40,
    downsampling_ratios=[2, 4, 5, 8],
    decoder_hidden_size=64 if SMALL else 720,
    n_codebooks=9,
    codebook_size=1024,
    codebook_dim=8,
    sampling_rate=16000,
)
HOP = 320
N = HOP * (10 if SMALL else 60)
N_EVAL = HOP * (20 if SMALL else 200)
model = DacModel(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.8, 0.99))
gen = torch.Generator(device=device).manual_seed(2)


def clips(n, length):
    t = torch.arange(length, device=device) / 16000.0
    f0 = torch.rand(n, 1, 1, device=device, generator=gen) * 400 + 100
    tone = torch.sin(2 * torch.pi * f0 * t)
    return 0.5 * tone + 0.05 * torch.randn(n, 1, length, device=device, generator=gen)


def stft_loss(pred, ref):
    total = 0.0
    for nfft in (512, 2048):
        win = torch.hann_window(nfft, device=pred.device)
        sp = torch.stft(pred.squeeze(1), nfft, nfft // 4, window=win, return_complex=True).abs()
        sr = torch.stft(ref.squeeze(1), nfft, nfft // 4, window=win, return_complex=True).abs()
        total = total + F.l1_loss(torch.log(sp.clamp_min(1e-5)), torch.log(sr.clamp_min(1e-5)))
    return total


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    wav = clips(B, N)
    out = model(wav)
    rec = out.audio_values.unsqueeze(1) if out.audio_values.dim() == 2 else out.audio_values
    ref = wav[..., : rec.shape[-1]]
    loss = out.loss.mean() + F.l1_loss(rec, ref) + stft_loss(rec, ref)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1000.0)
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del wav, out, rec, ref, loss
model.eval()
with torch.inference_mode():
    wav = clips(3, N_EVAL)
    enc = model.encode(wav, n_quantizers=4)
    dec = model.decode(enc.quantized_representation).audio_values
    n = min(dec.shape[-1], N_EVAL)
    err = (dec[..., :n].reshape(3, -1) - wav[..., :n].reshape(3, -1)).abs().mean()
if device == "cuda":
    print(
        f"eval codes {tuple(enc.audio_codes.shape)} err {err.item():.4f} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
