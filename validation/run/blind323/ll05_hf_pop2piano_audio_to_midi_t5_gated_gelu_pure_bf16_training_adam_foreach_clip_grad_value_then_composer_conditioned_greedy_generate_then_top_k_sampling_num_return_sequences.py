"""Pop-audio-to-piano transcription with HF Pop2Piano (model_type "pop2piano"): a
Pop2PianoForConditionalGeneration from its default config (a T5 encoder-decoder, 512 wide, 6 + 6
layers, gated-GELU feed-forwards of 2,048, relative position buckets, 2,400 MIDI-event tokens) whose
encoder reads log-mel frames (batch, frames, 512) directly as input embeddings; trained in pure bf16
(the model cast with .to(torch.bfloat16), Adam foreach with bf16 moments, clip_grad_value_) on 32
clips of 320 frames against 256 MIDI-event labels, 3 steps. Then generation conditioned on a composer:
generate() prepends that composer's embedding to the mel frames (generation_config's
composer_to_feature_token, 21 composers), greedy with a fixed 192 new tokens for 8 clips, then top-k
sampling (top_k 20, temperature 0.9) with 2 return sequences per clip and a fixed 128 new tokens for 6
clips of 480 frames.

Phases: 0 model built; 1 first step; 2 two more steps; 3 greedy generation; 4 sampled generation."""

import os

import torch
from transformers import Pop2PianoConfig, Pop2PianoForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3235)
if SMALL:
    config = Pop2PianoConfig(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                             decoder_start_token_id=0)
    B, FRAMES, LABELS, B_GREEDY, NEW, B_SAMPLE, FRAMES_SAMPLE, NEW_SAMPLE = 2, 24, 16, 2, 8, 2, 32, 6
else:
    config = Pop2PianoConfig(decoder_start_token_id=0)
    B, FRAMES, LABELS, B_GREEDY, NEW, B_SAMPLE, FRAMES_SAMPLE, NEW_SAMPLE = 32, 320, 256, 8, 192, 6, 480, 128
COMPOSERS = {f"composer{i + 1}": 2052 + i for i in range(config.composer_vocab_size)}
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def mel(n, frames, dtype):
    """Log-mel-like frames: smooth in time, (n, frames, d_model)."""
    x = torch.randn(n, frames, config.d_model).cumsum(1) / frames**0.5
    return x.to(device=device, dtype=dtype)


def midi_events(n):
    """MIDI event ids ending in EOS, padded with -100 after a random length."""
    labels = torch.randint(3, 2052, (n, LABELS))
    for i in range(n):
        used = int(torch.randint(LABELS // 2, LABELS + 1, ()).item())
        labels[i, used - 1] = config.eos_token_id
        labels[i, used:] = -100
    return labels.to(device)


model = Pop2PianoForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
model.generation_config.composer_to_feature_token = COMPOSERS
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-6, foreach=True)
report("built")

model.train()
for step in range(3):
    out = model(input_features=mel(B, FRAMES, torch.bfloat16), labels=midi_events(B))
    out.loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("step0")
report("steps1-2")

del optimizer
model.eval()
with torch.inference_mode():
    tokens = model.generate(
        input_features=mel(B_GREEDY, FRAMES, torch.bfloat16), composer="composer4", do_sample=False,
        max_new_tokens=NEW, min_new_tokens=NEW,
    )
print(f"greedy tokens {tuple(tokens.shape)} distinct {tokens.unique().numel()}")
del tokens
report("greedy")

with torch.inference_mode():
    tokens = model.generate(
        input_features=mel(B_SAMPLE, FRAMES_SAMPLE, torch.bfloat16), composer="composer17", do_sample=True,
        top_k=20, temperature=0.9, num_return_sequences=2, max_new_tokens=NEW_SAMPLE, min_new_tokens=NEW_SAMPLE,
    )
print(f"sampled tokens {tuple(tokens.shape)}")
report("sampled")
