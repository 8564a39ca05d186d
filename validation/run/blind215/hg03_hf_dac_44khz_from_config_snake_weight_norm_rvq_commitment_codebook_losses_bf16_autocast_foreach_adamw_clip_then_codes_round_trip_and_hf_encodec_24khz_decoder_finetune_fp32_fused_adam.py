"""transformers' DacModel and EncodecModel from their configs, on random waveforms.

DAC: DacConfig at descript/dac_44khz's size (encoder 64 channels, strides 2, 4, 8, 8 to 1024; decoder
1536 channels, upsampling 8, 8, 4, 2; 9 codebooks of 1024 x 8 with factorized, l2-normalised lookups;
Snake activations; DacModel builds plain convolutions, so weight norm is put on as the original DAC
trains with it, by dac.apply_weight_norm(): torch.nn.utils.parametrizations.weight_norm).
Phase 1: 3 training steps at batch 16 x 16,384 samples (0.37 s at 44.1 kHz) under bf16 autocast: the
model's own loss (commitment 0.25 + codebook 1.0, per clip, averaged) plus waveform L1 and a
multi-scale log-magnitude STFT L1 (windows 2048 and 512, outside autocast), foreach AdamW (betas 0.8,
0.99), clip_grad_norm_ 1.0.
Phase 2: no_grad: DacModel.encode of 4 clips of 10 s and decode(audio_codes=...) from the codes.
Phase 3: the DAC model and optimizer dropped, empty_cache(); EncodecModel from EncodecConfig (the 24 kHz
model: SEANet 32 filters, strides 2, 4, 5, 8, 2-layer LSTM, causal weight-normed convolutions, 32
codebooks of 1024 x 128, codebooks filled with random latents); the encoder frozen and run under no_grad
at bandwidth 6.0 (8 codebooks), the decoder fine-tuned from the codes in fp32 (model.decode with grad),
waveform L1 + STFT L1, fused Adam, batch 16 x 1 s, 3 steps.
Phase 4: inference_mode round trip at bandwidth 24.0 (32 codebooks) of 8 clips of 10 s. 4 phases after
the first model's."""

import os

import torch
import torch.nn.functional as F
from transformers import DacConfig, DacModel, EncodecConfig, EncodecModel

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21503)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


if SMALL:
    dcfg = DacConfig(
        encoder_hidden_size=8, decoder_hidden_size=64, hidden_size=64, n_codebooks=3, sampling_rate=44100
    )
    ecfg = EncodecConfig(num_filters=4, hidden_size=32, codebook_dim=32, codebook_size=64)
    B1, SEG1, EVAL1, B3, SEG3, EVAL3, SEC = 2, 2048, 1, 2, 3200, 1, 1
else:
    dcfg = DacConfig(
        encoder_hidden_size=64,
        downsampling_ratios=[2, 4, 8, 8],
        decoder_hidden_size=1536,
        upsampling_ratios=[8, 8, 4, 2],
        hidden_size=1024,
        n_codebooks=9,
        codebook_size=1024,
        codebook_dim=8,
        sampling_rate=44100,
    )
    ecfg = EncodecConfig()
    B1, SEG1, EVAL1, B3, SEG3, EVAL3, SEC = 16, 16384, 4, 16, 24000, 8, 10


def stft_loss(x, y, sizes):
    loss = 0
    for n in sizes:
        w = torch.hann_window(n, device=x.device)
        sx = torch.stft(x.float(), n, n // 4, window=w, return_complex=True).abs()
        sy = torch.stft(y.float(), n, n // 4, window=w, return_complex=True).abs()
        loss = (
            loss + F.l1_loss(torch.log(sx.clamp(min=1e-5)), torch.log(sy.clamp(min=1e-5))) + F.l1_loss(sx, sy)
        )
    return loss


dac = DacModel(dcfg)
dac.apply_weight_norm()
dac = dac.to(device)
print(f"dac parameters {sum(p.numel() for p in dac.parameters())}")
report("dac model")

# phase 1: DAC training, bf16 autocast, foreach AdamW, clipping
opt = torch.optim.AdamW(dac.parameters(), lr=1e-4, betas=(0.8, 0.99), foreach=True)
dac.train()
for step in range(3):
    x = (torch.rand(B1, 1, SEG1, device=device) * 2 - 1) * 0.5
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        out = dac(x)
    recon = out.audio_values
    loss = (
        out.loss.mean().float()
        + F.l1_loss(recon.float(), x.squeeze(1))
        + stft_loss(recon, x.squeeze(1), (2048, 512))
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(dac.parameters(), 1.0)
    opt.step()
    print(
        f"dac step {step} loss {loss.item():.4f} vq {out.loss.mean().item():.4f} grad norm {norm.item():.3f}"
    )
    del out, recon, loss
report("dac bf16 autocast foreach adamw")

# phase 2: codes round trip
dac.eval()
with torch.no_grad():
    audio = torch.rand(EVAL1, 1, dcfg.sampling_rate * SEC if not SMALL else SEG1, device=device) - 0.5
    enc = dac.encode(audio)
    print(f"dac codes {tuple(enc.audio_codes.shape)}")
    wav = dac.decode(audio_codes=enc.audio_codes).audio_values
    print(f"dac decoded {tuple(wav.shape)}")
del audio, enc, wav
report("dac encode decode from codes no_grad")

# phase 3: EnCodec decoder fine-tuning from frozen codes
del dac, opt
torch.cuda.empty_cache() if device == "cuda" else None
codec = EncodecModel(ecfg).to(device)
with torch.no_grad():
    for layer in codec.quantizer.layers:
        layer.codebook.embed.normal_()
codec.encoder.requires_grad_(False)
codec.decoder.train()
opt = torch.optim.Adam(codec.decoder.parameters(), lr=1e-4, fused=device == "cuda")
print(f"encodec parameters {sum(p.numel() for p in codec.parameters())}")
for step in range(3):
    x = (torch.rand(B3, 1, SEG3, device=device) * 2 - 1) * 0.5
    with torch.no_grad():
        codes, scales, pad = codec.encode(x, bandwidth=6.0, return_dict=False)
    recon = codec.decode(codes, scales, return_dict=False)[0][..., :SEG3]
    loss = F.l1_loss(recon, x) + stft_loss(recon.squeeze(1), x.squeeze(1), (1024, 256))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"encodec step {step} codes {tuple(codes.shape)} loss {loss.item():.4f}")
    del codes, recon, loss
report("encodec decoder finetune fp32 fused adam")

# phase 4: EnCodec round trip at 24 kbps
codec.eval()
with torch.inference_mode():
    audio = torch.rand(EVAL3, 1, ecfg.sampling_rate * SEC if not SMALL else SEG3, device=device) - 0.5
    out = codec(audio, bandwidth=24.0)
    print(f"encodec codes {tuple(out.audio_codes.shape)} audio {tuple(out.audio_values.shape)}")
del audio, out
report("encodec inference_mode 24 kbps")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
