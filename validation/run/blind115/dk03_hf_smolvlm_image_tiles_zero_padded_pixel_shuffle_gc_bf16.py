"""HF SmolVLM (SmolVLMForConditionalGeneration from config, bf16 weights): a 12-layer
SigLIP-style tower (512 px, patch 16, 768 wide) whose 1024 patches are pixel-shuffled (scale 4) into
64 tokens per image, and a 16-layer Llama (960 wide, vocab 49,280). Each sample has up to 5 image
tiles (4 crops and the global view); samples with fewer are padded with all-zero images, which the
model drops by indexing, so the image tokens follow the real tiles (5, 3, 5, 1). Text padded on the
right with an attention mask, non-reentrant gradient checkpointing, AdamW (foreach), 3 steps; then
sampled generate() (top-p 0.9) of 32 tokens for two samples; 5 phases."""

import os

import torch
from transformers import LlamaConfig, SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMVisionConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11503)
device = "cuda" if torch.cuda.is_available() else "cpu"
TOKEN, PAD = 49190, 2
if SMALL:
    vision = SmolVLMVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=16,
    )
    text = LlamaConfig(
        vocab_size=49280,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    PX, TXT, NEW = 64, 12, 4
else:
    vision = SmolVLMVisionConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=512,
        patch_size=16,
    )
    text = LlamaConfig(
        vocab_size=49280,
        hidden_size=960,
        intermediate_size=2560,
        num_hidden_layers=16,
        num_attention_heads=15,
        num_key_value_heads=5,
        max_position_embeddings=8192,
    )
    PX, TXT, NEW = 512, 160, 32
REAL = [5, 3, 5, 1]
PER = (PX // 16) ** 2 // 16
config = SmolVLMConfig(
    vision_config=vision, text_config=text, scale_factor=4, image_token_id=TOKEN, pad_token_id=PAD
)
config._attn_implementation = "sdpa"
model = SmolVLMForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, eps=1e-6)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(real):
    width = max(real) * PER + TXT
    ids = torch.full((len(real), width), PAD, device=device)
    mask = torch.zeros_like(ids)
    pixels = torch.zeros(len(real), max(real), 3, PX, PX, device=device, dtype=torch.bfloat16)
    for i, n in enumerate(real):
        length = n * PER + TXT - (TXT // 8) * i
        ids[i, : n * PER] = TOKEN
        ids[i, n * PER : length] = torch.randint(3, 49000, (length - n * PER,), device=device)
        mask[i, :length] = 1
        pixels[i, :n] = torch.randn(n, 3, PX, PX, device=device)
    labels = torch.where((mask == 1) & (ids != TOKEN), ids, torch.full_like(ids, -100))
    return ids, mask, pixels, labels


model.train()
for step in range(3):
    ids, mask, pixels, labels = make_batch(REAL)
    out = model(input_ids=ids, attention_mask=mask, pixel_values=pixels, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids, mask, pixels, labels
model.eval()
ids, mask, pixels, _ = make_batch([5, 5])
with torch.no_grad():
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        pixel_values=pixels,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=True,
        top_p=0.9,
        pad_token_id=PAD,
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen, ids, mask, pixels
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()}", f"reserved {torch.cuda.memory_reserved()}")
