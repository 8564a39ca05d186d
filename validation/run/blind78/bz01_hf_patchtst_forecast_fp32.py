"""HF PatchTSTForPrediction (channel-independent patches of 16 steps with stride 8, a 6-layer encoder
with batch norm, RevIN-style scaling) built from its config, 321 channels, context 512, horizon 96,
fp32, AdamW, batch 16, 2 steps; 3 phases."""

import os

import torch
from transformers import PatchTSTConfig, PatchTSTForPrediction

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7801)
if SMALL:
    config = PatchTSTConfig(
        num_input_channels=3,
        context_length=32,
        prediction_length=8,
        patch_length=8,
        patch_stride=8,
        d_model=16,
        num_attention_heads=2,
        num_hidden_layers=1,
        ffn_dim=32,
    )
    B = 2
else:
    config = PatchTSTConfig(
        num_input_channels=321,
        context_length=512,
        prediction_length=96,
        patch_length=16,
        patch_stride=8,
        d_model=128,
        num_attention_heads=16,
        num_hidden_layers=6,
        ffn_dim=256,
        norm_type="batchnorm",
    )
    B = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
model = PatchTSTForPrediction(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    past = torch.randn(B, config.context_length, config.num_input_channels, device=device)
    future = torch.randn(B, config.prediction_length, config.num_input_channels, device=device)
    loss = model(past_values=past, future_values=future).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del past, future, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
