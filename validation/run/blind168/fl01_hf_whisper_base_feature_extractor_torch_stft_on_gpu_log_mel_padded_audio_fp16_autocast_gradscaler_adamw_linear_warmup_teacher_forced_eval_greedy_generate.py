"""Whisper fine-tuning as a speech recogniser's user writes it after the Hugging Face "fine-tune
Whisper" recipe, but from WhisperConfig at whisper-base's size (512 wide, 6 encoder and 6 decoder
layers, 8 heads, feed-forward 2,048, 80 mel bins over 3,000 frames, vocabulary 51,865; fp32 weights,
sdpa attention) and with the log-mel features computed on the GPU by WhisperFeatureExtractor(device=
"cuda") (its torch path: the 30 s padded waveforms to the GPU, hann window, torch.stft with n_fft 400
and hop 160, |.|^2 of all but the last frame, the 80 x 201 mel filterbank matmul, log10 clamp and the
max - 8 floor; then back to the host as numpy) from 16 utterances of 4 to 28 s of seeded noise a batch;
transcripts of 96 tokens (the pad tail -100). fp16 autocast with GradScaler, AdamW (lr 1e-5, weight
decay 0.01) and get_linear_schedule_with_warmup, clip_grad_norm_ at 1.0 after unscale_, 3 steps (the
feature extraction of the first batch its own phase, the first step its own phase); then the
teacher-forced loss of 32 utterances at batch 16 under no_grad and autocast; then greedy generate of
40 tokens for 16 utterances under inference_mode and autocast (min_new_tokens = max_new_tokens, a
4-token prompt); 5 phases."""

import os

import numpy as np
import torch
from transformers import (
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    get_linear_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16801)
np.random.seed(16801)
if SMALL:
    config = WhisperConfig(
        vocab_size=400,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=64,
        decoder_start_token_id=1,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=2,
    )
    B, L, STEPS, EVAL_N, GEN_B, NEW = 2, 12, 2, 4, 2, 6
    PROMPT = [1, 3, 4, 5]
else:
    config = WhisperConfig(
        vocab_size=51865,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=50258,
        pad_token_id=50257,
        eos_token_id=50257,
        bos_token_id=50257,
    )
    B, L, STEPS, EVAL_N, GEN_B, NEW = 16, 96, 3, 32, 16, 40
    PROMPT = [50258, 50259, 50359, 50363]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
feature_extractor = WhisperFeatureExtractor(feature_size=80, sampling_rate=16000)
model = WhisperForConditionalGeneration(config).to(device)
model.config.forced_decoder_ids = None
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=100)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
rng = np.random.default_rng(16801)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def audio_batch(n):
    seconds = rng.uniform(4.0, 28.0, size=n)
    return [(0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32) for s in seconds]


def features(n):
    speech = audio_batch(n)
    inputs = feature_extractor(speech, sampling_rate=16000, return_tensors="pt", device=device)
    return inputs.input_features.to(device)


def labels_for(n):
    labels = torch.randint(10, config.vocab_size - (100 if SMALL else 2000), (n, L), device=device)
    labels[:, :4] = torch.tensor(PROMPT, device=device)
    for i in range(n):
        cut = L - (i * 5) % (L // 2)
        labels[i, cut:] = -100
    return labels


feats = features(B)
print(f"features {tuple(feats.shape)}")
if device == "cuda":
    print(f"features peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    if step > 0:
        feats = features(B)
    labels = labels_for(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        out = model(input_features=feats, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del feats, labels, out

model.eval()
total = 0.0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(EVAL_N // B):
        feats = features(B)
        total += model(input_features=feats, labels=labels_for(B)).loss.item()
print(f"eval loss {total / (EVAL_N // B):.4f}")
del feats
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    feats = features(GEN_B)
    prompt = torch.tensor(PROMPT, device=device).repeat(GEN_B, 1)
    out = model.generate(
        input_features=feats,
        decoder_input_ids=prompt,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generate {tuple(out.shape)}")
if device == "cuda":
    print(
        f"generate allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
