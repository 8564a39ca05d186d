"""Full fine-tuning of an HF LlavaForConditionalGeneration from config in bf16: a CLIP vision tower
(224 px, patch 14, 768 wide, 12 layers) whose 256 patch features fill the image tokens of a Llama
(2048 wide, 8 layers), 256 image tokens then 256 text tokens, labels on the text, AdamW (foreach),
batch 4, 2 steps; 3 phases."""

import os

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3901)
if SMALL:
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=28,
        patch_size=14,
    )
    text = LlamaConfig(
        vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    B, IMG, PX, TXT, TOKEN = 2, 4, 28, 8, 150
else:
    vision = CLIPVisionConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=224,
        patch_size=14,
    )
    text = LlamaConfig(
        vocab_size=32064,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=16,
    )
    B, IMG, PX, TXT, TOKEN = 4, 256, 224, 256, 32000
config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=TOKEN, image_seq_length=IMG)
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlavaForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    image_ids = torch.full((B, IMG), TOKEN, device=device)
    text_ids = torch.randint(0, TOKEN, (B, TXT), device=device)
    ids = torch.cat([image_ids, text_ids], dim=1)
    labels = torch.cat([torch.full_like(image_ids, -100), text_ids], dim=1)
    pixels = torch.randn(B, 3, PX, PX, device=device, dtype=torch.bfloat16)
    loss = model(input_ids=ids, pixel_values=pixels, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del image_ids, text_ids, ids, labels, pixels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
