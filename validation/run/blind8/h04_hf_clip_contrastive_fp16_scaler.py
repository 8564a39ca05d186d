"""HF CLIPModel from a CLIPConfig (vision: ViT-B/32-sized, 768 wide, 12 layers, 224 px; text: 512 wide,
12 layers, 77 tokens, 49408 vocab), `return_loss=True` contrastive training under fp16 autocast with
`torch.amp.GradScaler`, AdamW (weight decay), batch 64, 3 steps."""

import os

import torch
from transformers import CLIPConfig, CLIPModel

SMALL = bool(os.environ.get("SMOKE"))
BATCH = 4 if SMALL else 64
torch.manual_seed(804)
if SMALL:
    config = CLIPConfig(
        text_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
        vision_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64, "image_size": 64},
        projection_dim=32,
    )
else:
    config = CLIPConfig(
        text_config={"hidden_size": 512, "num_hidden_layers": 12, "num_attention_heads": 8, "intermediate_size": 2048},
        vision_config={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "patch_size": 32},
        projection_dim=512,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CLIPModel(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.2)
scaler = torch.amp.GradScaler(device)
size = config.vision_config.image_size
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.text_config.vocab_size, (BATCH, 77), device=device)
    pixels = torch.randn(BATCH, 3, size, size, device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=ids, pixel_values=pixels, return_loss=True).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
