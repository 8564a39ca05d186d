"""HF LLaVA-NeXT (LlavaNextForConditionalGeneration from config, fp32 weights, fp16 autocast with
GradScaler): AnyRes tiling, where each image is a 336 px base view plus its grid of 336 px tiles
(a 672x672 image: 2x2 tiles, 5 views; a 336x672 image: 1x2, 3 views, padded to 5), a 12-layer CLIP
tower (1024 wide, frozen) whose tile features are unpadded and given a newline token per row (2,928
and 1,752 image tokens), a 2-layer projector and an 8-layer Llama (2048 wide, vocab 32,064).
Batch 2, text after the image, right padding with an attention mask, AdamW (foreach) on the
projector, newline and decoder, 3 steps; then greedy generate() of 16 tokens for one image; 5 phases."""

import os

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaNextConfig, LlavaNextForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11506)
device = "cuda" if torch.cuda.is_available() else "cpu"
TOKEN, PAD = 32000, 0
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
        vocab_size=32064, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    PX, TXT, NEW = 28, 12, 4
else:
    vision = CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        image_size=336,
        patch_size=14,
    )
    text = LlamaConfig(
        vocab_size=32064,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=16,
    )
    PX, TXT, NEW = 336, 256, 16
PINPOINTS = [[PX, 2 * PX], [2 * PX, PX], [2 * PX, 2 * PX], [3 * PX, PX], [PX, 3 * PX]]
config = LlavaNextConfig(
    vision_config=vision,
    text_config=text,
    image_token_index=TOKEN,
    image_grid_pinpoints=PINPOINTS,
    vision_feature_select_strategy="default",
    vision_feature_layer=-2,
)
config._attn_implementation = "sdpa"
model = LlavaNextForConditionalGeneration(config).to(device)
model.model.vision_tower.requires_grad_(False)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5)
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def image_tokens(h, w):
    side = PX // 14
    rows, cols = h // PX * side, w // PX * side
    return rows * cols + rows + side * side


def make_batch(sizes):
    counts = [image_tokens(h, w) for h, w in sizes]
    width = max(counts) + TXT
    ids = torch.full((len(sizes), width), PAD, device=device)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(counts):
        ids[i, :n] = TOKEN
        ids[i, n : n + TXT] = torch.randint(3, 32000, (TXT,), device=device)
        mask[i, : n + TXT] = 1
    labels = torch.where((mask == 1) & (ids != TOKEN), ids, torch.full_like(ids, -100))
    pixels = torch.randn(len(sizes), 5, 3, PX, PX, device=device)
    image_sizes = torch.tensor(sizes, device=device)
    return ids, mask, labels, pixels, image_sizes


model.train()
for step in range(3):
    ids, mask, labels, pixels, image_sizes = make_batch([[2 * PX, 2 * PX], [PX, 2 * PX]])
    with torch.autocast(device, dtype=torch.float16):
        out = model(
            input_ids=ids, attention_mask=mask, pixel_values=pixels, image_sizes=image_sizes, labels=labels
        )
    scaler.scale(out.loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids, mask, labels, pixels, image_sizes
model.eval()
ids, mask, _, pixels, image_sizes = make_batch([[2 * PX, 2 * PX]])
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        pixel_values=pixels,
        image_sizes=image_sizes,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
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
