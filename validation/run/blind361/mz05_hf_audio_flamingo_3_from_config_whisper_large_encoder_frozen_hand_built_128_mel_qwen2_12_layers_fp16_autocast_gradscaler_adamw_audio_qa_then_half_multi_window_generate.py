"""Audio question answering with NVIDIA's Audio Flamingo 3 as the Hugging Face docs fine-tune and run it, with
the weights random: an AudioFlamingo3ForConditionalGeneration from an `AudioFlamingo3Config` whose audio
encoder is the default (Whisper-large-v3 style: 32 layers, 1,280 wide, 128 mel bins, two convolutions and an
average pool: 750 tokens per 30 s window) and whose language model is Qwen2.5-0.5B-shaped but 12 layers deep
(896 wide, 14 heads, 2 KV heads, 4,864 intermediate, vocabulary 151,936, tied embeddings). The audio is raw 16
kHz waveforms built with torch; the 128-band log-mel features the WhisperFeatureExtractor would give are
computed by hand (torch.stft, n_fft 400, hop 160, Hann window, a triangular mel filterbank, log10 clamped to 8
below its maximum, (x + 4) / 4), one (128, 3,000) window per 30 s with `input_features_mask` marking the
frames that hold audio. The prompt is the chat template's layout by hand: a few system/user tokens, one
`<sound>` token per audio embedding the mask leaves (post-pooling lengths), the question, the answer.

Phases: 0 the model in fp32, the audio encoder frozen; 1 three steps of fp16 autocast with
`torch.amp.GradScaler` and AdamW over 4 clips (30, 20, 12 and 25 s: 750, 500, 300 and 625 sound tokens,
right-padded), the loss on the answers only (labels -100 elsewhere), projector and language model trained; 2
the model `.half()`, `inference_mode`, greedy `generate()` of 64 tokens (`min_new_tokens == max_new_tokens`)
for 2 clips of 45 s (two windows each, 750 + 375 sound tokens); 3 one 2-minute clip (four windows, 3,000 sound
tokens), 96 tokens. Seeded; no sizes depend on values."""

import math
import os

import torch
from transformers import AudioFlamingo3Config, AudioFlamingo3ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3615)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
TEXT = dict(
    vocab_size=151_936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=12,
    num_attention_heads=14,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)
if SMALL:
    config = AudioFlamingo3Config(
        audio_config=dict(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            max_source_positions=200,
        ),
        text_config=dict(
            TEXT, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
        ),
    )
    CLIPS1, NEW2, NEW3 = [4.0, 3.0, 1.5, 2.5], 6, 8
    WINDOW_SECONDS = 4.0
    CLIP2, CLIP3 = 6.0, 16.0
else:
    config = AudioFlamingo3Config(text_config=TEXT)
    CLIPS1, NEW2, NEW3 = [30.0, 20.0, 12.0, 25.0], 64, 96
    WINDOW_SECONDS = 30.0
    CLIP2, CLIP3 = 45.0, 120.0
RATE, N_FFT, HOP, MELS = 16000, 400, 160, 128
WINDOW = int(WINDOW_SECONDS * RATE) // HOP  # mel frames per window
SOUND, PAD = config.audio_token_id, 151_643
PROMPT, QUESTION, ANSWER = 14, 18, 32


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
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    points = torch.linspace(mel(0.0), mel(RATE / 2), MELS + 2)
    hz = 700.0 * (10 ** (points / 2595.0) - 1.0)
    bins = torch.linspace(0, RATE / 2, N_FFT // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    return torch.clamp(
        torch.minimum((bins - lower) / (center - lower), (upper - bins) / (upper - center)), min=0.0
    )


FILTERS = mel_filterbank().to(device)
HANN = torch.hann_window(N_FFT, device=device)


def log_mel(wave):
    """Whisper's log-mel of one waveform: (128, frames)."""
    spec = torch.stft(wave, N_FFT, HOP, window=HANN, return_complex=True)[:, :-1]
    mel = torch.clamp(FILTERS @ spec.abs() ** 2, min=1e-10).log10()
    mel = torch.maximum(mel, mel.max() - 8.0)
    return (mel + 4.0) / 4.0


def sound_tokens(frames):
    """Sound embeddings a window of `frames` valid mel frames leaves (the encoder's output lengths)."""
    conv = (frames - 1) // 2 + 1
    return (conv - 2) // 2 + 1


def clips(seconds_list):
    """Raw audio -> windows of log-mel features + masks; the sound-token count of each clip."""
    features, masks, counts = [], [], []
    for seconds in seconds_list:
        n = int(seconds * RATE)
        t = torch.arange(n, device=device) / RATE
        tone = torch.sin(2 * torch.pi * (220 + 200 * torch.rand((), device=device)) * t)
        wave = 0.2 * tone * (0.5 + 0.5 * torch.sin(2 * torch.pi * 0.7 * t)) + 0.05 * torch.randn(
            n, device=device
        )
        mel = log_mel(wave)
        count = 0
        for start in range(0, mel.shape[-1], WINDOW):
            chunk = mel[:, start : start + WINDOW]
            valid = chunk.shape[-1]
            features.append(torch.nn.functional.pad(chunk, (0, WINDOW - valid)))
            masks.append(torch.arange(WINDOW, device=device) < valid)
            count += sound_tokens(valid)
        counts.append(count)
    return torch.stack(features), torch.stack(masks).long(), counts


def prompts(counts, with_answer):
    """Chat-template layout by hand: prompt tokens, <sound> x count, question (+ answer), right-padded."""
    rows, labels = [], []
    for count in counts:
        head = torch.randint(0, 150_000, (PROMPT,)).tolist() + [SOUND] * count
        head += torch.randint(0, 150_000, (QUESTION,)).tolist()
        answer = torch.randint(0, 150_000, (ANSWER,)).tolist() if with_answer else []
        rows.append(head + answer)
        labels.append([-100] * len(head) + answer)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    lab = torch.full((len(rows), width), -100)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (row, target) in enumerate(zip(rows, labels, strict=True)):
        ids[i, : len(row)], lab[i, : len(target)] = torch.tensor(row), torch.tensor(target)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device), lab.to(device)


model = AudioFlamingo3ForConditionalGeneration(config).to(device)
model.model.audio_tower.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,} "
    f"trainable {sum(p.numel() for p in trainable):,}"
)
report("phase0 audio flamingo 3 fp32, encoder frozen")

optimizer = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0)
scaler = torch.amp.GradScaler("cuda", enabled=cuda)
model.train()
for step in range(3):
    features, feature_mask, counts = clips(CLIPS1)
    ids, mask, labels = prompts(counts, with_answer=True)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
        out = model(
            input_ids=ids,
            attention_mask=mask,
            input_features=features,
            input_features_mask=feature_mask,
            labels=labels,
        )
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.3f} sound tokens {counts} sequence {ids.shape[1]}")
    del out
report(f"phase1 fp16 autocast gradscaler adamw, {len(CLIPS1)} clips, answers only")

del optimizer, scaler, trainable
model.eval()
if cuda:
    model.half()
dtype = torch.float16 if cuda else torch.float32
with torch.inference_mode():
    features, feature_mask, counts = clips([CLIP2, CLIP2])
    ids, mask, _ = prompts(counts, with_answer=False)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        input_features=features.to(dtype),
        input_features_mask=feature_mask,
        max_new_tokens=NEW2,
        min_new_tokens=NEW2,
        do_sample=False,
    )
    print(f"generated {tuple(out.shape)} windows {features.shape[0]} sound tokens {counts}")
report(f"phase2 fp16 generate {NEW2} tokens, 2 clips of {CLIP2:g} s")

with torch.inference_mode():
    features, feature_mask, counts = clips([CLIP3])
    ids, mask, _ = prompts(counts, with_answer=False)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        input_features=features.to(dtype),
        input_features_mask=feature_mask,
        max_new_tokens=NEW3,
        min_new_tokens=NEW3,
        do_sample=False,
    )
    print(f"generated {tuple(out.shape)} windows {features.shape[0]} sound tokens {counts}")
report(f"phase3 fp16 generate {NEW3} tokens, one {CLIP3:g} s clip")
