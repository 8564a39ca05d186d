"""HF ASTForAudioClassification (Audio Spectrogram Transformer) from an ASTConfig: 1,024 frames by
128 mel bins cut into overlapping 16x16 patches (strides 10), ViT-Base encoder, 527 labels with a
multi-label BCE loss; batch 24 under bf16 autocast, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import ASTConfig, ASTForAudioClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6001)
if SMALL:
    config = ASTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_length=64,
        num_mel_bins=32,
        num_labels=5,
    )
    B = 2
else:
    config = ASTConfig(max_length=1024, num_mel_bins=128, num_labels=527)
    B = 24
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ASTForAudioClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    feats = torch.randn(B, config.max_length, config.num_mel_bins, device=device)
    labels = (torch.rand(B, config.num_labels, device=device) < 0.05).float()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(input_values=feats).logits
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del feats, labels, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
