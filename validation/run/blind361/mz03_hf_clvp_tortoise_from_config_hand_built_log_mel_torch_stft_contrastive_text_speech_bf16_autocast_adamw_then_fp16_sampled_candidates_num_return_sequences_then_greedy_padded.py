"""CLVP, Tortoise TTS's contrastive language-voice model, as the Hugging Face CLVP docs run it, with the
weights random: a ClvpModelForConditionalGeneration from the default `ClvpConfig` (susnato/clvp_dev's sizes;
the speech encoder's vocabulary set to the decoder's 8,194 codes, since the encoder config's default of 256
could not embed the decoder's argmax codes: text and speech encoders of 20 layers, 768 wide, with rotary
attention; a conditioning encoder of 6 mel-attention blocks; a GPT-2 style speech decoder of 30 layers, 1,024
wide, over 8,194 speech codes). The conditioning audio is raw 22.05 kHz waveforms built with torch; the
log-mel spectrograms the ClvpFeatureExtractor would give are computed by hand (torch.stft, n_fft 1,024, hop
256, Hann window, an 80-band triangular mel filterbank, log of the clamped power), (batch, 80, frames). Text
ids are right-padded with an attention mask.

Phases: 0 the model in fp32; 1 three AdamW steps of the contrastive loss (`return_loss=True`) under bf16
autocast over 16 text / 6 s voice pairs (the speech decoder's argmax codes go into the speech encoder, so the
encoders and the logit scale train, the decoder does not); 2 the model `.half()`, `inference_mode`, Tortoise's
candidate generation: sampled speech codes (temperature 0.8, top-p 0.8) with `num_return_sequences=4` for 2
texts, 160 codes each (`min_new_tokens == max_new_tokens`), ranked by CLVP's text-speech logits; 3 greedy
generation for 6 texts, 128 codes each, padded to 160 codes (`pad_to_max_mel_tokens`).
`return_dict_in_generate=True` in both (without it transformers 5.17's
ClvpModelForConditionalGeneration.generate reads `speech_ids` before it is set and raises UnboundLocalError).
Seeded; the decoder's end token is suppressed by `min_new_tokens`, so no sizes depend on values."""

import math
import os

import torch
from transformers import ClvpConfig, ClvpModelForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3613)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = ClvpConfig(
        text_config=dict(
            hidden_size=128,
            intermediate_size=128,
            projection_dim=64,
            num_hidden_layers=2,
            num_attention_heads=2,
        ),
        speech_config=dict(
            vocab_size=8194,
            hidden_size=128,
            intermediate_size=128,
            projection_dim=64,
            num_hidden_layers=2,
            num_attention_heads=2,
        ),
        decoder_config=dict(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_mel_attn_blocks=2
        ),
        projection_dim=64,
    )
    B1, TEXT, SECONDS, B2, CAND, NEW2, B3, NEW3, PAD3 = 4, 12, 1.0, 2, 2, 10, 3, 8, 10
else:
    config = ClvpConfig(speech_config=dict(vocab_size=8194))
    B1, TEXT, SECONDS, B2, CAND, NEW2, B3, NEW3, PAD3 = 16, 64, 6.0, 2, 4, 160, 6, 128, 160
RATE, N_FFT, HOP, MELS = 22050, 1024, 256, 80


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


def mel_filterbank():
    """Triangular filters on the slaney-style mel scale, (MELS, N_FFT // 2 + 1)."""
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    points = torch.linspace(mel(0.0), mel(8000.0), MELS + 2)
    hz = 700.0 * (10 ** (points / 2595.0) - 1.0)
    bins = torch.linspace(0, RATE / 2, N_FFT // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None] - lower) / (center - lower)
    down = (upper - bins[None]) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)


FILTERS = mel_filterbank().to(device)
WINDOW = torch.hann_window(N_FFT, device=device)


def voices(batch, seconds):
    """Raw speech-like audio on the device, then log-mel features (batch, 80, frames)."""
    n = int(seconds * RATE)
    t = torch.arange(n, device=device) / RATE
    pitch = 90 + 160 * torch.rand(batch, 1, device=device)
    wave = torch.sin(2 * torch.pi * pitch * t) + 0.4 * torch.sin(4 * torch.pi * pitch * t)
    wave = 0.3 * wave * (0.6 + 0.4 * torch.sin(2 * torch.pi * 2.5 * t)) + 0.02 * torch.randn(
        batch, n, device=device
    )
    spec = torch.stft(wave, N_FFT, HOP, window=WINDOW, return_complex=True)
    power = spec.abs() ** 2
    return torch.log(torch.clamp(FILTERS @ power, min=1e-5))


def texts(lengths, width):
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, 250, (n,))
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return ids.to(device), mask.to(device)


model = ClvpModelForConditionalGeneration(config).to(device)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 clvp fp32")

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
model.train()
for step in range(3):
    ids, mask = texts([TEXT - (i % 5) * 3 for i in range(B1)], TEXT)
    features = voices(B1, SECONDS)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(input_ids=ids, input_features=features, attention_mask=mask, return_loss=True)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} contrastive loss {out.loss.item():.4f}")
    del out
report(f"phase1 contrastive bf16 autocast adamw, {B1} text/voice pairs, {SECONDS:g} s voices")

del optimizer
model.eval()
if cuda:
    model.half()
dtype = torch.float16 if cuda else torch.float32
with torch.inference_mode():
    ids, mask = texts([40, 28][:B2], 48)
    features = voices(B2, SECONDS).to(dtype)
    out = model.generate(
        input_ids=ids,
        input_features=features,
        attention_mask=mask,
        do_sample=True,
        temperature=0.8,
        top_p=0.8,
        num_return_sequences=CAND,
        min_new_tokens=NEW2,
        max_new_tokens=NEW2,
        return_dict_in_generate=True,
    )
    speech_ids, logits_per_speech = out.speech_ids, out.logits_per_speech
    best = logits_per_speech.argmax(0)
    print(
        f"candidates {tuple(speech_ids.shape)} logits {tuple(logits_per_speech.shape)} best {best.tolist()}"
    )
    del out
report(f"phase2 fp16 sampled candidates, {B2} texts x {CAND} candidates, {NEW2} codes")

with torch.inference_mode():
    ids, mask = texts([30, 22, 48, 17, 36, 41][:B3], 48)
    features = voices(B3, SECONDS).to(dtype)
    out = model.generate(
        input_ids=ids,
        input_features=features,
        attention_mask=mask,
        do_sample=False,
        min_new_tokens=NEW3,
        max_new_tokens=NEW3,
        pad_to_max_mel_tokens=PAD3,
        return_dict_in_generate=True,
    )
    print(f"greedy speech ids {tuple(out.speech_ids.shape)} text embeds {tuple(out.text_embeds.shape)}")
report(f"phase3 fp16 greedy, {B3} texts, {NEW3} codes padded to {PAD3}")
