"""HF transformers Wav2Vec2-Conformer CTC model (rotary position embeddings, 12 conformer layers with
depthwise-conv modules and macaron feed-forwards, 768 wide, 12 heads, 7-layer conv feature encoder
with group norm, a 40-symbol vocabulary) built from its config with fp32 weights; CTC training under
bf16 autocast with the feature encoder frozen, SpecAugment time masking on, AdamW, batches of 6
utterances of 6 to 10 s at 16 kHz padded with attention masks and -100-padded labels, 3 steps;
4 phases."""

import os

import numpy as np
import torch
from transformers import Wav2Vec2ConformerConfig, Wav2Vec2ConformerForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9501)
np.random.seed(9501)  # SpecAugment's masks are drawn with numpy
if SMALL:
    cfg = Wav2Vec2ConformerConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16, 16),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 2),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        conv_depthwise_kernel_size=7,
        position_embeddings_type="rotary",
        mask_time_length=2,
        ctc_loss_reduction="mean",
        pad_token_id=0,
    )
    B, LO, HI, T = 2, 1200, 2000, 6
else:
    cfg = Wav2Vec2ConformerConfig(
        vocab_size=40,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        position_embeddings_type="rotary",
        ctc_loss_reduction="mean",
        pad_token_id=0,
    )
    B, LO, HI, T = 6, 96000, 160000, 120
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Wav2Vec2ConformerForCTC(cfg).to(device)
model.freeze_feature_encoder()
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    lengths = torch.randint(LO, HI + 1, (B,)).tolist()
    wave = torch.zeros(B, max(lengths), device=device)
    mask = torch.zeros(B, max(lengths), dtype=torch.long, device=device)
    labels = torch.full((B, T), -100, dtype=torch.long, device=device)
    for i, n in enumerate(lengths):
        wave[i, :n] = torch.randn(n, device=device)
        mask[i, :n] = 1
        t = T - 3 * i
        labels[i, :t] = torch.randint(1, cfg.vocab_size, (t,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(wave, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del wave, mask, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
