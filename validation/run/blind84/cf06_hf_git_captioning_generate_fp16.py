"""HF GitForCausalLM (GIT-base-like: a CLIP ViT-B/16 image encoder at 224x224, a 6-layer BERT-style
decoder over 197 image tokens then text, 30,522 vocab) in fp16 weights captioning images: greedy
decoding of 32 images, exactly 40 new tokens; then 3-beam search over 8 images, 30 new tokens;
2 phases."""

import os

import torch
from transformers import GitConfig, GitForCausalLM, GitVisionConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8406)
if SMALL:
    vision = GitVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    config = GitConfig(
        vision_config=vision.to_dict(),
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    N1, N2 = 4, 3
else:
    config = GitConfig(vision_config=GitVisionConfig().to_dict())
    N1, N2 = 40, 30
size = config.vision_config.image_size
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = GitForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
pixels = torch.randn(32, 3, size, size, device=device, dtype=dtype)
start = torch.full((32, 1), config.bos_token_id, device=device)
captions = model.generate(
    pixel_values=pixels,
    input_ids=start,
    max_new_tokens=N1,
    min_new_tokens=N1,
    eos_token_id=None,
    do_sample=False,
)
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
captions = model.generate(
    pixel_values=pixels[:8],
    input_ids=start[:8],
    num_beams=3,
    max_new_tokens=N2,
    min_new_tokens=N2,
    eos_token_id=None,
)
if device == "cuda":
    print(f"beams peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
