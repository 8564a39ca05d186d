"""HF WavLMForSequenceClassification (base-sized: 12 layers, 768 wide, gated relative position bias,
the conv feature encoder frozen) fine-tuned on 6-second 16 kHz clips into 35 keyword classes under
bf16 autocast, AdamW, batch 12, 2 steps; then one evaluation batch under no_grad; 4 phases."""

import os

import torch
from transformers import WavLMConfig, WavLMForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8301)
if SMALL:
    config = WavLMConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=2,
        num_buckets=16,
        max_bucket_distance=40,
        num_labels=35,
    )
    B, T = 2, 1600
else:
    config = WavLMConfig(num_labels=35, classifier_proj_size=256)
    B, T = 12, 96000
device = "cuda" if torch.cuda.is_available() else "cpu"
model = WavLMForSequenceClassification(config).to(device)
model.freeze_feature_encoder()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    wave = torch.randn(B, T, device=device)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_values=wave, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    logits = model(input_values=torch.randn(B, T, device=device)).logits
    pred = logits.argmax(-1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
