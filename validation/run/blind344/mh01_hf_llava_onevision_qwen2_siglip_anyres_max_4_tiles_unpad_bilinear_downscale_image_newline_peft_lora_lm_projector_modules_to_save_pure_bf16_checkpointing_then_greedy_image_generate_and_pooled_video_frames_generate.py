"""LLaVA-OneVision fine-tuning without a processor: LlavaOnevisionForConditionalGeneration from a config
(random weights, pure bf16, sdpa): a SigLIP tower of 12 layers at 1152 (384 px, patch 14, 27 x 27 = 729
tokens a tile), a 2-layer GELU projector into a Qwen2 decoder of 12 layers at 896 (14 heads over 2 KV heads,
SwiGLU 4864, vocabulary 151,936, untied lm_head). Images go through "anyres": each image is resized to the
best of the grid pinpoints, cut into 384-px tiles plus a whole-image base tile (pixel_values
(batch, max tiles, 3, 384, 384), padded with zero tiles the model drops by image_sizes); the tiles' features
are stitched, unpadded to the image's aspect ratio, bilinearly shrunk when they exceed
`vision_aspect_ratio="anyres_max_4"` (4 tiles' worth) and get an image_newline per row. The number of image
tokens per image is computed on the host as LlavaOnevisionProcessor does.
PEFT LoRA r 16 / alpha 32 on the decoder's attention and MLP projections, the projector trained in full
(modules_to_save), HF non-reentrant gradient checkpointing with enable_input_require_grads, AdamW (foreach).
Phases: 0 the model; 1 three steps of 2 accumulated micro-batches of one image each (480 x 640,
900 x 700, 1000 x 1300, 500 x 500 in turn, 2,900-3,700 image tokens, 192-320 text tokens, -100 on the
image tokens; rows padded to a multiple of 512, as a collator's pad_to_multiple_of does); 2 greedy
generate() of 32 tokens for 3 left-padded image prompts (5, 7 and 4 tiles, the batch's tiles zero-padded
to 7); 3 generate() on videos: 2 clips of 12 frames, each frame's 27 x 27 features bilinearly pooled to
14 x 14, plus one newline per clip, greedy with the KV cache, 24 tokens."""

import math
import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34401)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMAGE, VIDEO, PAD = 151646, 151647, 151643
if SMALL:
    TILE, PATCH_PX, V_LAYERS, V_W, V_FF, V_HEADS = 56, 14, 2, 64, 128, 4
    L_LAYERS, L_W, L_FF, L_HEADS, L_KV, VOCAB = 2, 64, 128, 4, 2, 151936
    TRAIN_SIZES = [(60, 80), (110, 90), (120, 160), (60, 60)]
    TEXT, GEN_NEW, FRAMES, VID_NEW = [24, 16, 20, 12], 4, 3, 3
else:
    TILE, PATCH_PX, V_LAYERS, V_W, V_FF, V_HEADS = 384, 14, 12, 1152, 4304, 16
    L_LAYERS, L_W, L_FF, L_HEADS, L_KV, VOCAB = 12, 896, 4864, 14, 2, 151936
    TRAIN_SIZES = [(480, 640), (900, 700), (1000, 1300), (500, 500)]
    TEXT, GEN_NEW, FRAMES, VID_NEW = [256, 192, 320, 224], 32, 12, 24
PINPOINTS = [[TILE * a, TILE * b] for a in (1, 2, 3) for b in (1, 2, 3)]
ASPECT = "anyres_max_4"
ACCUM = 2
MULTIPLE = 64 if SMALL else 512
SIDE = TILE // PATCH_PX


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def best_resolution(h, w):
    """select_best_resolution of image_processing_utils: most effective pixels, then least waste."""
    best, best_eff, best_waste = None, -1, float("inf")
    for ph, pw in PINPOINTS:
        scale = min(pw / w, ph / h)
        dw, dh = int(w * scale), int(h * scale)
        eff = min(dw * dh, w * h)
        waste = ph * pw - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (ph, pw), eff, waste
    return best


def image_tokens(h, w):
    """LlavaOnevisionProcessor._get_number_of_features: base tile + unpadded tiles + newlines."""
    bh, bw = best_resolution(h, w)
    cur_h, cur_w = SIDE * (bh // TILE), SIDE * (bw // TILE)
    if w / h > cur_w / cur_h:
        new_h = int(round(h * (cur_w / w), 7))
        cur_h -= (cur_h - new_h) // 2 * 2
    else:
        new_w = int(round(w * (cur_h / h), 7))
        cur_w -= (cur_w - new_w) // 2 * 2
    unpadded, newlines = cur_h * cur_w, cur_h
    ratio = math.sqrt(cur_h * cur_w / (int(ASPECT.removeprefix("anyres_max_")) * SIDE**2))
    if ratio > 1.1:
        unpadded, newlines = int(cur_h // ratio) * int(cur_w // ratio), int(cur_h // ratio)
    return SIDE * SIDE + unpadded + newlines


def n_tiles(h, w):
    bh, bw = best_resolution(h, w)
    return 1 + (bh // TILE) * (bw // TILE)


config = LlavaOnevisionConfig(
    vision_config=dict(
        model_type="siglip_vision_model",
        hidden_size=V_W,
        intermediate_size=V_FF,
        num_hidden_layers=V_LAYERS,
        num_attention_heads=V_HEADS,
        image_size=TILE,
        patch_size=PATCH_PX,
        vision_use_head=False,
    ),
    text_config=dict(
        model_type="qwen2",
        hidden_size=L_W,
        intermediate_size=L_FF,
        num_hidden_layers=L_LAYERS,
        num_attention_heads=L_HEADS,
        num_key_value_heads=L_KV,
        vocab_size=VOCAB,
        max_position_embeddings=32768,
    ),
    image_grid_pinpoints=PINPOINTS,
    vision_aspect_ratio=ASPECT,
    vision_feature_select_strategy="full",
    vision_feature_layer=-1,
)
config._attn_implementation = "sdpa"
model = LlavaOnevisionForConditionalGeneration(config).to(device, torch.bfloat16)
report("model")

lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    modules_to_save=["multi_modal_projector"],
)
model = get_peft_model(model, lora)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)


def image_batch(sizes, texts, left):
    """One image per row: image tokens then text; tiles padded to the batch's largest count."""
    rows = [
        torch.cat([torch.full((image_tokens(h, w),), IMAGE), torch.randint(0, 150000, (n,))])
        for (h, w), n in zip(sizes, texts, strict=True)
    ]
    width = -(-max(len(r) for r in rows) // MULTIPLE) * MULTIPLE
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl], mask[i, sl] = r, 1
    labels = ids.masked_fill((mask == 0) | (ids == IMAGE), -100)
    tiles = max(n_tiles(h, w) for h, w in sizes)
    pixels = torch.zeros(len(sizes), tiles, 3, TILE, TILE, dtype=torch.bfloat16)
    for i, (h, w) in enumerate(sizes):
        pixels[i, : n_tiles(h, w)] = torch.randn(n_tiles(h, w), 3, TILE, TILE)
    inputs = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "pixel_values": pixels.to(device),
        "image_sizes": torch.tensor(sizes).to(device),
    }
    return inputs, labels.to(device)


model.train()
for step in range(3):
    for micro in range(ACCUM):
        k = (step * ACCUM + micro) % len(TRAIN_SIZES)
        inputs, labels = image_batch([TRAIN_SIZES[k]], [TEXT[k]], left=False)
        out = model(**inputs, labels=labels)
        (out.loss / ACCUM).backward()
        print(f"step {step}.{micro} loss {out.loss.item():.4f}")
        del out, inputs, labels
    opt.step()
    opt.zero_grad(set_to_none=True)
report("train_lora_projector_checkpointing")

model.eval()
with torch.no_grad():
    gen_sizes = [(640, 480), (768, 1024), (400, 1200)] if not SMALL else [(60, 80), (100, 70), (40, 120)]
    inputs, _ = image_batch(gen_sizes, [40, 64, 24], left=True)
    out = model.generate(
        **inputs,
        max_new_tokens=GEN_NEW,
        min_new_tokens=GEN_NEW,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    print("image generate", tuple(out.shape))
    del out, inputs
report("generate_images_greedy")

with torch.no_grad():
    per_frame = math.ceil(SIDE / 2) ** 2
    ids = torch.cat(
        [
            torch.full((2, FRAMES * per_frame + 1), VIDEO),
            torch.randint(0, 150000, (2, 48 if not SMALL else 6)),
        ],
        dim=1,
    )
    video = torch.randn(2, FRAMES, 3, TILE, TILE, dtype=torch.bfloat16)
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=torch.ones_like(ids).to(device),
        pixel_values_videos=video.to(device),
        max_new_tokens=VID_NEW,
        min_new_tokens=VID_NEW,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    print("video generate", tuple(out.shape))
    del out, video, ids
report("generate_video_pooled_frames")
