"""HF Qwen2-VL (Qwen2VLForConditionalGeneration from config, bf16 weights, sdpa): a 12-layer ViT
(1280 wide, 14 px patches, temporal patch 2, 2x2 patch merger) feeding a 1536-wide, 8-layer Qwen2
decoder with M-RoPE (sections 16/24/24). Each batch holds two images of different grids (448x448 ->
32x32 patches, 336x588 -> 24x42), their merged tokens (256 and 252) between vision start/end tokens,
then text padded to one length, labels on the text. Two full training steps with foreach AdamW, then
greedy generate() of 24 tokens from the two image prompts; 4 phases."""

import os

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11501)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMAGE, VSTART, VEND = 151655, 151652, 151653
if SMALL:
    vision = dict(depth=2, embed_dim=64, hidden_size=64, num_heads=4, patch_size=14, spatial_merge_size=2)
    text = dict(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
    )
    GRIDS, TXT, NEW = [(1, 4, 4), (1, 4, 6)], 12, 4
else:
    vision = dict(
        depth=12, embed_dim=1280, hidden_size=1536, num_heads=16, patch_size=14, spatial_merge_size=2
    )
    text = dict(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    )
    GRIDS, TXT, NEW = [(1, 32, 32), (1, 24, 42)], 200, 24
config = Qwen2VLConfig(vision_config=vision, text_config=text)
config._attn_implementation = "sdpa"
model = Qwen2VLForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch():
    counts = [t * h * w // 4 for t, h, w in GRIDS]
    width = max(counts) + 2 + TXT
    rows, labels = [], []
    for n in counts:
        text_ids = torch.randint(0, 150000, (width - n - 2,), device=device)
        img = torch.full((n,), IMAGE, device=device)
        ends = torch.tensor([VSTART, VEND], device=device)
        rows.append(torch.cat([ends[:1], img, ends[1:], text_ids]))
        labels.append(torch.cat([torch.full((n + 2,), -100, device=device), text_ids]))
    patches = sum(t * h * w for t, h, w in GRIDS)
    pixels = torch.randn(patches, 3 * 2 * 14 * 14, device=device, dtype=torch.bfloat16)
    grid = torch.tensor(GRIDS, device=device)
    return torch.stack(rows), torch.stack(labels), pixels, grid


model.train()
for step in range(2):
    ids, labels, pixels, grid = make_batch()
    types = (ids == IMAGE).long()
    out = model(
        input_ids=ids, mm_token_type_ids=types, pixel_values=pixels, image_grid_thw=grid, labels=labels
    )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids, labels, types
model.eval()
prompt = make_batch()[0][:, : -TXT // 2]
with torch.no_grad():
    gen = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        mm_token_type_ids=(prompt == IMAGE).long(),
        pixel_values=pixels,
        image_grid_thw=grid,
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
del gen
optimizer.zero_grad(set_to_none=True)
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()}", f"reserved {torch.cuda.memory_reserved()}")
