"""Text-to-speech training with HF FastSpeech2-Conformer (conformer encoder and decoder, duration,
pitch and energy predictors, a length regulator expanding tokens by their durations, a conv
postnet), built from its default config, fp32 with AdamW: two steps on 16 utterances of 40 to 140
phonemes whose durations (1 to 9 frames each), pitch, energy and padded mel targets (-100 beyond each
length) are prepared on the host, then the HiFi-GAN vocoder turning the first 8 target mel
spectrograms into waveforms under torch.inference_mode; 3 phases."""

import os

import torch
from transformers import (
    FastSpeech2ConformerConfig,
    FastSpeech2ConformerHifiGan,
    FastSpeech2ConformerHifiGanConfig,
    FastSpeech2ConformerModel,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10001)
if SMALL:
    cfg = FastSpeech2ConformerConfig(
        hidden_size=64,
        encoder_layers=1,
        decoder_layers=1,
        encoder_linear_units=128,
        decoder_linear_units=128,
        vocab_size=40,
    )
    voc_cfg = FastSpeech2ConformerHifiGanConfig(upsample_initial_channel=32)
    B, LO, HI, VOC = 3, 6, 14, 2
else:
    cfg = FastSpeech2ConformerConfig(vocab_size=78)
    voc_cfg = FastSpeech2ConformerHifiGanConfig()
    B, LO, HI, VOC = 16, 40, 140, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
model = FastSpeech2ConformerModel(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98))
gen = torch.Generator().manual_seed(3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    lengths = torch.randint(LO, HI + 1, (B,), generator=gen)
    width = int(lengths.max())
    ids = torch.zeros(B, width, dtype=torch.long)
    mask = torch.zeros(B, width, dtype=torch.long)
    dur = torch.zeros(B, width, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(1, cfg.vocab_size, (n,), generator=gen)
        mask[i, :n] = 1
        dur[i, :n] = torch.randint(1, 10, (n,), generator=gen)
    frames = dur.sum(1)
    mel = torch.full((B, int(frames.max()), cfg.num_mel_bins), -100.0)
    for i, f in enumerate(frames.tolist()):
        mel[i, :f] = torch.randn(f, cfg.num_mel_bins, generator=gen)
    pitch = torch.randn(B, width, 1, generator=gen) * mask[..., None]
    energy = torch.randn(B, width, 1, generator=gen) * mask[..., None]
    return [t.to(device) for t in (ids, mask, dur, mel, pitch, energy)], frames


for step in range(2):
    (ids, mask, dur, mel, pitch, energy), frames = batch()
    out = model(
        input_ids=ids,
        attention_mask=mask,
        spectrogram_labels=mel,
        duration_labels=dur,
        pitch_labels=pitch,
        energy_labels=energy,
        return_dict=True,
    )
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} frames {int(frames.max())} loss {out.loss.item():.3f}")
    if device == "cuda":
        print(
            f"train {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    last_mel = mel
    del out, ids, mask, dur, pitch, energy

vocoder = FastSpeech2ConformerHifiGan(voc_cfg).to(device).eval()
with torch.inference_mode():
    spec = last_mel[:VOC].clamp(min=-4.0)
    wave = vocoder(spec)
    print(f"waveform {tuple(wave.shape)}")
if device == "cuda":
    print(f"vocoder peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
