"""HF Wav2Vec2ForCTC from a Wav2Vec2Config (base: 7 convolutions of 512 channels, 12 layers 768
wide), fine-tuned as the HF recipe does: the feature encoder frozen (`freeze_feature_encoder`),
SpecAugment time masks at the default probability, a 32-symbol CTC head; batch 4 of 5 s of 16 kHz
audio with 60-label targets, fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6101)
if SMALL:
    config = Wav2Vec2Config(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        mask_time_length=2,
    )
    B, N, T = 2, 4000, 8
else:
    config = Wav2Vec2Config(vocab_size=32, ctc_loss_reduction="mean", pad_token_id=0)
    B, N, T = 4, 80000, 60
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Wav2Vec2ForCTC(config).to(device)
model.freeze_feature_encoder()
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    audio = torch.randn(B, N, device=device)
    labels = torch.randint(1, config.vocab_size, (B, T), device=device)
    loss = model(input_values=audio, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del audio, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
