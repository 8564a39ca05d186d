"""HF BeitForImageClassification (BEiT-base-like: 12 layers, 768 wide, relative position bias in
every layer, layer scale, mean pooling) built from its config, fp32 weights under bf16 autocast,
AdamW, batch 32 at 224x224, 2 steps; then an eval pass at batch 64 under no_grad; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BeitConfig, BeitForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7403)
if SMALL:
    config = BeitConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        use_relative_position_bias=True,
        use_mean_pooling=True,
        num_labels=10,
    )
    B, S = 2, 32
else:
    config = BeitConfig(
        image_size=224,
        patch_size=16,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        use_relative_position_bias=True,
        use_mean_pooling=True,
        layer_scale_init_value=0.1,
        num_labels=1000,
    )
    B, S = 32, 224
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16
model = BeitForImageClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device)
    y = torch.randint(0, config.num_labels, (B,), device=device)
    with torch.autocast(device_type=device, dtype=dtype):
        logits = model(pixel_values=x).logits
    loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=dtype):
    preds = model(pixel_values=torch.randn(2 * B, 3, S, S, device=device)).logits.argmax(-1)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
