"""Describing photos of different sizes with an Aya-Vision-style model (transformers 5.17's
`AyaVisionForConditionalGeneration`) from config: a SigLIP vision tower of 12 layers (d 768, 12 heads,
364 x 364 tiles, patch 14: 676 patches per tile), the pixel-shuffle (2 x 2) + LayerNorm + SwiGLU projector,
169 image tokens per tile, and a Cohere2 language model of 12 layers (d 2,048, 16 query and 4 KV heads,
MLP 5,632, three sliding-window layers of 4,096 to one global, logit scale, vocabulary 256,000, tied). In
fp16 under `torch.inference_mode()`, greedy `generate()` with min_new_tokens == max_new_tokens. Inputs by
hand as the processor builds them with dynamic tiling (crop_to_patches): an image is cut into a grid of
364 x 364 tiles chosen by its aspect ratio plus a thumbnail tile, all tiles of a batch stacked in one
pixel_values tensor and 169 <image> tokens per tile in input_ids.

Phases: 0 model in fp16; 1 batch 4 of square photos (2 x 2 grid + thumbnail: 5 tiles, 845 image tokens),
48 new tokens; 2 batch 4 of panoramas (4 x 1 grid + thumbnail, 5 tiles) plus 1 x 1 small images
(1 tile, no thumbnail) in a separate call of batch 8, 48 new tokens; 3 a left-padded batch of 4 with 1, 3,
5 and 7 tiles per image (prompts padded to the longest), 64 new tokens, scores returned. Seeded; no sizes
depend on values."""

import torch
from transformers import AyaVisionConfig, AyaVisionForConditionalGeneration

torch.manual_seed(3582)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = AyaVisionConfig(
    vision_config=dict(
        model_type="siglip_vision_model",
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=364,
        patch_size=14,
    ),
    text_config=dict(
        model_type="cohere2",
        vocab_size=256000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=16384,
        sliding_window=4096,
    ),
    downsample_factor=2,
    image_token_index=255036,
)
cfg.vision_config._attn_implementation = "sdpa"
cfg.text_config._attn_implementation = "sdpa"
model = AyaVisionForConditionalGeneration(cfg).to(device="cuda", dtype=torch.float16).eval()
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 aya_vision fp16")

TILE = 364
PER_TILE = (TILE // 28) ** 2  # 169 tokens: (364 / 14 / 2) ** 2
BOS, PAD = 5, 0


def prompt(tiles, text):
    # <BOS> text <|START_OF_IMG|> <image> * 169 * tiles <|END_OF_IMG|> question
    ids = torch.randint(1000, 250000, (4 + tiles * PER_TILE + text,))
    ids[0] = BOS
    ids[3 : 3 + tiles * PER_TILE] = cfg.image_token_index
    return ids


def describe(tile_counts, new, text=32, **kwargs):
    prompts = [prompt(t, text) for t in tile_counts]
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), PAD)
    mask = torch.zeros(len(prompts), longest, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p) :] = p
        mask[i, longest - len(p) :] = 1
    pixels = torch.randn(sum(tile_counts), 3, TILE, TILE, dtype=torch.float16)
    with torch.inference_mode():
        return model.generate(
            input_ids=ids.cuda(),
            attention_mask=mask.cuda(),
            pixel_values=pixels.cuda(),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=PAD,
            **kwargs,
        )


out = describe([5, 5, 5, 5], 48)
print("square photos", tuple(out.shape))
del out
report("phase1 generate, 4 images of 2 x 2 tiles + thumbnail")

out = describe([5, 5, 5, 5], 48, text=20)
print("panoramas", tuple(out.shape))
del out
out = describe([1] * 8, 48)
print("small images", tuple(out.shape))
del out
report("phase2 generate, 4 panoramas of 4 x 1 tiles + thumbnail, then 8 single-tile images")

out = describe([1, 3, 5, 7], 64, return_dict_in_generate=True, output_scores=True)
print("mixed", tuple(out.sequences.shape), len(out.scores), tuple(out.scores[0].shape))
del out
report("phase3 generate, left-padded batch of 1, 3, 5, 7 tiles, scores returned")
