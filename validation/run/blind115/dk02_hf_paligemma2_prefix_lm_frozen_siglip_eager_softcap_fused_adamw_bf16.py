"""HF PaliGemma 2 (PaliGemmaForConditionalGeneration from config, bf16 weights, eager attention as
Gemma 2 recommends for its logit soft-capping): a 12-layer SigLIP tower (224 px, patch 14, 256
tokens, 1152 wide) frozen, its projector and a 6-layer Gemma 2 decoder (2304 wide, head_dim 256,
sliding window 256, vocab 257,152) trained with fused AdamW. Prefix-LM masking from token_type_ids
(image and prompt bidirectional, the answer causal), labels on the answer, batch 8, 3 steps; then
greedy generate() of 20 tokens from the image and prompt; 5 phases."""

import os

import torch
from transformers import Gemma2Config, PaliGemmaConfig, PaliGemmaForConditionalGeneration, SiglipVisionConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11502)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=28,
        patch_size=14,
    )
    text = Gemma2Config(
        vocab_size=257152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=8,
    )
    B, PX, PROMPT, ANSWER, NEW = 2, 28, 6, 5, 4
else:
    vision = SiglipVisionConfig(
        hidden_size=1152,
        intermediate_size=4304,
        num_hidden_layers=12,
        num_attention_heads=16,
        image_size=224,
        patch_size=14,
    )
    text = Gemma2Config(
        vocab_size=257152,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        sliding_window=256,
    )
    B, PX, PROMPT, ANSWER, NEW = 8, 224, 128, 64, 20
IMG = (PX // 14) ** 2
config = PaliGemmaConfig(
    vision_config=vision,
    text_config=text,
    image_token_index=257151,
    projection_dim=text.hidden_size,
    hidden_size=text.hidden_size,
)
config.text_config._attn_implementation = "eager"
config.vision_config._attn_implementation = "sdpa"
model = PaliGemmaForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
model.model.vision_tower.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=2e-5, weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(with_answer):
    image = torch.full((B, IMG), config.image_token_index, device=device)
    prompt = torch.randint(2, 250000, (B, PROMPT), device=device)
    parts = [image, prompt]
    if with_answer:
        parts.append(torch.randint(2, 250000, (B, ANSWER), device=device))
    ids = torch.cat(parts, dim=1)
    types = torch.zeros_like(ids)
    labels = None
    if with_answer:
        types[:, IMG + PROMPT :] = 1
        labels = torch.where(types == 1, ids, torch.full_like(ids, -100))
    pixels = torch.randn(B, 3, PX, PX, device=device, dtype=torch.bfloat16)
    return ids, types, labels, pixels


model.train()
for step in range(3):
    ids, types, labels, pixels = batch(True)
    out = model(input_ids=ids, token_type_ids=types, pixel_values=pixels, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids, types, labels, pixels
model.eval()
ids, types, _, pixels = batch(False)
with torch.inference_mode():
    gen = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        token_type_ids=types,
        pixel_values=pixels,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen, ids, types, pixels
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()}", f"reserved {torch.cuda.memory_reserved()}")
