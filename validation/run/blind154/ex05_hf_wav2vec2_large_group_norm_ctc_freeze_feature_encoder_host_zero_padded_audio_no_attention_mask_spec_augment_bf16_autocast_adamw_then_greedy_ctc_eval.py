"""Wav2Vec2 CTC fine-tuning as the Hugging Face speech recipe does it, from Wav2Vec2Config at
wav2vec2-large's size (seven 512-channel convolutions without bias, group norm on the first, the
post-norm transformer of 24 layers 1,024 wide, 16 heads, feed-forward 4,096; fp32 weights, layerdrop
off), a 32-symbol character head (pad 0, ctc_loss_reduction "mean", ctc_zero_infinity): the feature
encoder frozen with freeze_feature_encoder(), SpecAugment time masks (mask_time_prob 0.065, length
10, NumPy seeded) and feature masks (0.01), batches of 8 utterances zero-padded to 16 s of 16 kHz
audio on the host (6..16 s real; no attention_mask, as the recipe passes none to group-norm
checkpoints) and moved to the GPU, 180-character transcripts whose tail is -100; bf16 autocast,
AdamW (lr 3e-5) over the unfrozen parameters, clip_grad_norm_ at 1.0, 4 steps (the first its own
phase); then greedy CTC decoding of 32 utterances at batch 16 under inference_mode and bf16 autocast
(argmax, repeats and blanks collapsed on the host); 4 phases."""

import os

import numpy as np
import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15405)
np.random.seed(15405)
if SMALL:
    config = Wav2Vec2Config(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        conv_bias=False,
        feat_extract_norm="group",
        do_stable_layer_norm=False,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        mask_time_prob=0.065,
        mask_time_length=2,
        mask_feature_prob=0.01,
        mask_feature_length=4,
        layerdrop=0.0,
        ctc_loss_reduction="mean",
        ctc_zero_infinity=True,
        pad_token_id=0,
    )
    B, SECONDS, T, STEPS, EVAL_N, EVAL_B, RATE = 2, (1, 2), 10, 2, 4, 2, 4000
else:
    config = Wav2Vec2Config(
        vocab_size=32,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        conv_bias=False,
        feat_extract_norm="group",
        do_stable_layer_norm=False,
        mask_time_prob=0.065,
        mask_time_length=10,
        mask_feature_prob=0.01,
        mask_feature_length=64,
        layerdrop=0.0,
        ctc_loss_reduction="mean",
        ctc_zero_infinity=True,
        pad_token_id=0,
    )
    B, SECONDS, T, STEPS, EVAL_N, EVAL_B, RATE = 8, (6, 16), 180, 4, 32, 16, 16000
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Wav2Vec2ForCTC(config).to(device)
model.freeze_feature_encoder()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=3e-5)
print(f"trainable {sum(p.numel() for p in params)}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    # zero-padded on the host as a data collator does, then moved to the GPU
    n_max = SECONDS[1] * RATE
    audio = torch.zeros(n, n_max)
    labels = torch.full((n, T), -100, dtype=torch.long)
    for i in range(n):
        n_real = (SECONDS[0] + (SECONDS[1] - SECONDS[0]) * ((i * 3) % n + 1) // n) * RATE
        wav = torch.randn(n_real)
        audio[i, :n_real] = (wav - wav.mean()) / (wav.std() + 1e-7)
        n_chars = T * n_real // n_max
        labels[i, :n_chars] = torch.randint(1, config.vocab_size, (n_chars,))
    return audio.to(device), labels.to(device)


model.train()
for step in range(STEPS):
    audio, labels = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_values=audio, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} ctc {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del audio, labels, loss

model.eval()
hyps = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(EVAL_N // EVAL_B):
        audio, _ = batch(EVAL_B)
        ids = model(input_values=audio).logits.argmax(-1).cpu()
        for row in ids:
            hyps.append([int(c) for c in torch.unique_consecutive(row) if int(c) != config.pad_token_id])
print(f"decoded {len(hyps)} utterances, {sum(map(len, hyps))} symbols")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
