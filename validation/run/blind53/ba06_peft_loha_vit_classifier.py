"""peft LoHa (rank 8, alpha 16, on the attention's q_proj and v_proj) on an HF ViTForImageClassification
from a ViTConfig (ViT-B/16 sized, 100 labels), the classifier trained in full (`modules_to_save`),
fp32 weights under bf16 autocast, batch 64 of 224x224, AdamW, 2 steps; 3 phases."""

import os

import torch
from peft import LoHaConfig, get_peft_model
from transformers import ViTConfig, ViTForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5306)
if SMALL:
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=32,
        patch_size=16,
        num_labels=100,
    )
    BATCH = 2
else:
    config = ViTConfig(num_labels=100)
    BATCH = 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViTForImageClassification(config).to(device)
loha = LoHaConfig(r=8, alpha=16, target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"])
model = get_peft_model(model, loha)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(BATCH, 3, config.image_size, config.image_size, device=device)
    y = torch.randint(0, 100, (BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(pixel_values=x, labels=y).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
