"""Neural audio codec with HF Mimi (causal SEANet convolutions, 8-layer transformers with
sliding-window attention around a 12.5 Hz latent, a split residual vector quantizer with 32
codebooks), built from its default config: batch encode and decode of 8 clips of 10 s at 24 kHz
with 8 and then all 32 codebooks under torch.inference_mode, then two fine-tuning steps of the
decoder (the encoder frozen) at batch 4 on 4 s clips with an L1 plus multi-resolution STFT loss,
AdamW; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import MimiConfig, MimiModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10004)
if SMALL:
    cfg = MimiConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        intermediate_size=128,
        num_filters=8,
        codebook_dim=32,
        codebook_size=64,
        upsample_groups=64,
        vector_quantization_hidden_dimension=32,
    )
    B, SECONDS, TB, TSECONDS = 2, 1, 2, 1
else:
    cfg = MimiConfig()
    B, SECONDS, TB, TSECONDS = 8, 10, 4, 4
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MimiModel(cfg).to(device).eval()
RATE = cfg.sampling_rate
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def report(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


with torch.inference_mode():
    audio = torch.randn(B, 1, SECONDS * RATE, device=device) * 0.1
    for nq in (8, cfg.num_quantizers):
        codes = model.encode(audio, num_quantizers=nq).audio_codes
        recon = model.decode(codes).audio_values
        err = (recon[..., : audio.shape[-1]] - audio).abs().mean()
        print(f"codebooks {nq} codes {tuple(codes.shape)} l1 {err.item():.4f}")
        del codes, recon
        report(f"codec {nq}")
    del audio


def stft_loss(a, b):
    total = 0.0
    for n_fft in (512, 1024, 2048):
        win = torch.hann_window(n_fft, device=a.device)
        sa = torch.stft(a, n_fft, n_fft // 4, window=win, return_complex=True).abs()
        sb = torch.stft(b, n_fft, n_fft // 4, window=win, return_complex=True).abs()
        total = total + F.l1_loss(sa.clamp(min=1e-5).log(), sb.clamp(min=1e-5).log())
        total = total + (sa - sb).norm() / sb.norm()
    return total


model.train()
for p in model.encoder.parameters():
    p.requires_grad_(False)
for p in model.encoder_transformer.parameters():
    p.requires_grad_(False)
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-5)
for step in range(2):
    audio = torch.randn(TB, 1, TSECONDS * RATE, device=device) * 0.1
    with torch.no_grad():
        codes = model.encode(audio).audio_codes
    recon = model.decode(codes).audio_values[..., : audio.shape[-1]]
    loss = F.l1_loss(recon, audio) + stft_loss(recon.squeeze(1), audio.squeeze(1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del audio, codes, recon, loss
    report(f"finetune {step}")
