"""HF Qwen2.5-VL from config (Qwen2_5_VLForConditionalGeneration, bf16 weights, sdpa), on random
pixels and random tokens.

Vision: a 16-block ViT of 1280 (14-px patches, temporal patch 2, RMSNorm, SwiGLU 3420, 2-D rotary)
with Qwen2.5-VL's window attention (112-px windows; full attention in blocks 3, 7, 11 and 15) and the
2x2 patch merger into 1536. Text: a Qwen2 decoder of 12 layers of 1536 (12 heads, 2 key/value heads,
SwiGLU 8960, vocabulary 151,936, tied embeddings) with M-RoPE (sections 16/24/24).
Phase 1: images at their own resolutions (dynamic resolution: grids 32x32, 24x44, 40x20, 16x64 ->
256, 264, 200, 256 merged tokens), one a row between vision start/end tokens and text filling each row
to one length (no padding), labels on the text; the vision tower frozen but its merger trained, HF
gradient checkpointing, fused AdamW, 2 steps at batch 4.
Phase 2: greedy generate() of 32 tokens from prompts holding two images each (batch 2) under
inference_mode with the KV cache (the M-RoPE deltas carried across steps).
Phase 3: videos (pixel_values_videos, video_grid_thw 4 x 16 x 28 from 8 frames at 224 x 392,
second_per_grid_ts 1 s: 2 fps), checkpointing off, the last four vision blocks unfrozen, single-tensor
AdamW (foreach=False), 2 steps at batch 4. 3 phases after the model's."""

import os

import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21002)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMAGE, VIDEO, VSTART, VEND = 151655, 151656, 151652, 151653
if SMALL:
    vision = dict(
        depth=4,
        hidden_size=64,
        intermediate_size=128,
        num_heads=4,
        out_hidden_size=64,
        window_size=56,
        fullatt_block_indexes=[1, 3],
    )
    text = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
    )
    GRIDS = [(1, 8, 8), (1, 8, 12), (1, 12, 4), (1, 4, 16)]
    GEN_GRIDS = [(1, 8, 8), (1, 4, 12)]
    VGRID, TXT, NEW, UNFROZEN = (2, 4, 8), 16, 4, 1
else:
    vision = dict(
        depth=16,
        hidden_size=1280,
        intermediate_size=3420,
        num_heads=16,
        out_hidden_size=1536,
        window_size=112,
        fullatt_block_indexes=[3, 7, 11, 15],
    )
    text = dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    )
    GRIDS = [(1, 32, 32), (1, 24, 44), (1, 40, 20), (1, 16, 64)]
    GEN_GRIDS = [(1, 28, 28), (1, 20, 36)]
    VGRID, TXT, NEW, UNFROZEN = (4, 16, 28), 160, 32, 4
text["vocab_size"] = 151936
config = Qwen2_5_VLConfig(vision_config=vision, text_config=text, tie_word_embeddings=True)
config._attn_implementation = "sdpa"
PATCH = 3 * 2 * 14 * 14


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = Qwen2_5_VLForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
visual = model.model.visual
report("model")


def rows_for(groups, token, width):
    """groups: per row a list of merged-token counts; returns ids, types, labels."""
    ids, types, labels = [], [], []
    kind = 1 if token == IMAGE else 2
    for counts in groups:
        pieces, tpieces, lpieces = [], [], []
        for n in counts:
            seg = torch.cat(
                [
                    torch.tensor([VSTART], device=device),
                    torch.full((n,), token, device=device),
                    torch.tensor([VEND], device=device),
                ]
            )
            pieces.append(seg)
            tpieces.append(torch.cat([torch.zeros(1), torch.full((n,), kind), torch.zeros(1)]).to(device))
            lpieces.append(torch.full((n + 2,), -100, device=device))
        used = sum(n + 2 for n in counts)
        text_ids = torch.randint(0, 150000, (width - used,), device=device)
        ids.append(torch.cat([*pieces, text_ids]))
        types.append(torch.cat([*tpieces, torch.zeros(width - used, device=device)]).long())
        labels.append(torch.cat([*lpieces, text_ids]))
    return torch.stack(ids), torch.stack(types), torch.stack(labels)


def image_batch():
    counts = [[t * h * w // 4] for t, h, w in GRIDS]
    width = max(c[0] for c in counts) + 2 + TXT
    ids, types, labels = rows_for(counts, IMAGE, width)
    patches = sum(t * h * w for t, h, w in GRIDS)
    pixels = torch.randn(patches, PATCH, device=device, dtype=torch.bfloat16)
    return ids, types, labels, pixels, torch.tensor(GRIDS, device=device)


# phase 1: frozen tower, trained merger and LLM, checkpointing, fused AdamW
visual.requires_grad_(False)
visual.merger.requires_grad_(True)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0, fused=device == "cuda")
for step in range(2):
    ids, types, labels, pixels, grid = image_batch()
    out = model(
        input_ids=ids, mm_token_type_ids=types, pixel_values=pixels, image_grid_thw=grid, labels=labels
    )
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"image step {step} loss {out.loss.item():.4f}")
    del out
report("images, frozen tower, checkpointing, fused adamw")

# phase 2: two images a prompt, generate with the KV cache
model.eval()
n_gen = [t * h * w // 4 for t, h, w in GEN_GRIDS]
width = sum(n + 2 for n in n_gen) + TXT // 2
ids, types, _ = rows_for([n_gen, n_gen[::-1]], IMAGE, width)
grid = torch.tensor(GEN_GRIDS + GEN_GRIDS[::-1], device=device)
pixels = torch.randn(int(grid.prod(-1).sum()), PATCH, device=device, dtype=torch.bfloat16)
with torch.inference_mode():
    gen = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=types,
        pixel_values=pixels,
        image_grid_thw=grid,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
del gen, ids, types, pixels, grid
report("two-image generate")

# phase 3: videos, checkpointing off, last vision blocks unfrozen, single-tensor AdamW
del opt, trainable
model.gradient_checkpointing_disable()
for block in visual.blocks[-UNFROZEN:]:
    block.requires_grad_(True)
model.train()
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0, foreach=False)
t, h, w = VGRID
n_vid = t * h * w // 4
for step in range(2):
    ids, types, labels = rows_for([[n_vid]] * 4, VIDEO, n_vid + 2 + TXT)
    videos = torch.randn(4 * t * h * w, PATCH, device=device, dtype=torch.bfloat16)
    vgrid = torch.tensor([VGRID] * 4, device=device)
    out = model(
        input_ids=ids,
        mm_token_type_ids=types,
        pixel_values_videos=videos,
        video_grid_thw=vgrid,
        second_per_grid_ts=torch.tensor([1.0] * 4),
        labels=labels,
    )
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"video step {step} loss {out.loss.item():.4f}")
    del out
report("videos, last vision blocks, single-tensor adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
