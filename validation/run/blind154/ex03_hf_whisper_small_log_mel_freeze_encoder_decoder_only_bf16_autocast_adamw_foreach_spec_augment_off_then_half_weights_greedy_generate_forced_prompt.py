"""Whisper fine-tuning as a speech recogniser's user writes it, from WhisperConfig at
whisper-small's size (768 wide, 12 encoder and 12 decoder layers, 12 heads, feed-forward 3,072, 80
mel bins over 3,000 frames, vocabulary 51,865; fp32 weights, sdpa attention): the encoder frozen
with model.freeze_encoder() and the decoder trained on batches of 24 thirty-second log-mel inputs
(input_features) with 112-token transcripts (the pad tail -100), bf16 autocast, AdamW (foreach, lr
1e-5) with clip_grad_norm_ at 1.0, 4 steps (the first step its own phase); then the teacher-forced
loss of 48 utterances at batch 24 under no_grad; then the whole model cast to fp16 with model.half()
and greedy generate of 48 tokens for 32 utterances (fp16 log-mel features, a 4-token prompt of
start, language, task and no-timestamps ids as decoder_input_ids) under inference_mode; 5 phases."""

import os

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15403)
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
        num_mel_bins=8,
        max_source_positions=50,
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
        d_model=768,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=50258,
        pad_token_id=50257,
        eos_token_id=50257,
        bos_token_id=50257,
    )
    B, L, STEPS, EVAL_N, GEN_B, NEW = 24, 112, 4, 48, 32, 48
    PROMPT = [50258, 50259, 50359, 50363]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
config._attn_implementation = "sdpa"
FRAMES = 2 * config.max_source_positions
device = "cuda" if torch.cuda.is_available() else "cpu"
model = WhisperForConditionalGeneration(config).to(device)
model.freeze_encoder()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=1e-5, foreach=True)
print(f"trainable {sum(p.numel() for p in params)}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    feats = torch.randn(n, config.num_mel_bins, FRAMES, device=device)
    labels = torch.randint(10, config.vocab_size - (100 if SMALL else 2000), (n, L), device=device)
    labels[:, :4] = torch.tensor(PROMPT, device=device)
    labels[n // 2 :, L - L // 4 :] = -100
    return feats, labels


model.train()
for step in range(STEPS):
    feats, labels = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_features=feats, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del feats, labels, loss

model.eval()
total = 0.0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(EVAL_N // B):
        feats, labels = batch(B)
        total += model(input_features=feats, labels=labels).loss.item()
print(f"eval loss {total / (EVAL_N // B):.4f}")
del feats, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del optimizer
dtype = torch.float16 if device == "cuda" else torch.float32
model = model.to(dtype)
with torch.inference_mode():
    feats = torch.randn(GEN_B, config.num_mel_bins, FRAMES, device=device, dtype=dtype)
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
