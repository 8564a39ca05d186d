"""HF PvtV2ForImageClassification (overlapping patch embeddings, spatial-reduction attention,
depthwise-conv MLPs) built from a b1-sized config, bf16 weights, batch 48 at 224 x 224, AdamW with
a warm-up, 3 steps, then a no_grad eval batch; 5 phases."""

import os

import torch
from transformers import PvtV2Config, PvtV2ForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8504)
if SMALL:
    config = PvtV2Config(
        hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 2], num_labels=10
    )
    B, R = 2, 64
else:
    config = PvtV2Config(
        hidden_sizes=[64, 128, 320, 512],
        depths=[2, 2, 2, 2],
        num_attention_heads=[1, 2, 5, 8],
        num_labels=1000,
    )
    B, R = 48, 224
config.drop_path_rate = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = PvtV2ForImageClassification(config).to(device=device, dtype=dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device, dtype=dtype)
    y = torch.randint(0, config.num_labels, (B,), device=device)
    loss = model(pixel_values=x, labels=y).loss
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad():
    logits = model(pixel_values=torch.randn(B * 2, 3, R, R, device=device, dtype=dtype)).logits
    pred = logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
