"""Video question answering with a Qwen3-VL-MoE model (transformers 5.17's
`Qwen3VLMoeForConditionalGeneration`) from config: a vision tower of 12 blocks (d 768, 12 heads, patch 16,
temporal patch 2, 2 x 2 spatial merge, DeepStack features from blocks 3, 6, 9), a Qwen3-MoE language model
of 12 layers (d 1,536, 16 query and 4 KV heads of 128, 32 experts of 768 with 4 routed per token,
vocabulary 151,936, interleaved multimodal RoPE). In fp16 under `torch.inference_mode()`, greedy
`generate()` with min_new_tokens == max_new_tokens. Inputs by hand as Qwen3-VL's processor lays out a
video: frames are grouped in pairs (temporal patch 2), `video_grid_thw` (1, T, H, W), pixel_values_videos
(T * H * W patches of 2 x 16 x 16 x 3 values), and each frame group becomes a timestamp text
("<1.5 seconds>", 6 tokens) then <vision_start>, H * W / 4 video tokens, <vision_end>; `mm_token_type_ids`
marks video tokens with 2 and image tokens with 1, as the processor returns it.

Phases: 0 model in fp16; 1 batch 4 of 16-frame clips at 256 x 448 (8 groups of 16 x 28 patches, 896
video tokens), 40 new tokens; 2 batch 4 of 32-frame clips at 192 x 320 (16 groups of 12 x 20 patches, 960
video tokens), 40 new tokens; 3 batch 4 of single 448 x 448 images (196 image tokens), 48 new tokens.
Seeded; no sizes depend on values."""

import torch
from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

torch.manual_seed(3583)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen3VLMoeConfig(
    vision_config=dict(
        depth=12,
        hidden_size=768,
        intermediate_size=3072,
        num_heads=12,
        out_hidden_size=1536,
        deepstack_visual_indexes=[3, 6, 9],
    ),
    text_config=dict(
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=32,
        num_experts_per_tok=4,
        moe_intermediate_size=768,
        max_position_embeddings=16384,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    ),
)
cfg._attn_implementation = "sdpa"
model = Qwen3VLMoeForConditionalGeneration(cfg).to(device="cuda", dtype=torch.float16).eval()
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 qwen3_vl_moe fp16")

PATCH_VALUES = 3 * 2 * 16 * 16
STAMP = 6  # "<1.5 seconds>" is 6 text tokens


def text(n):
    return torch.randint(0, 150000, (n,))


def video_prompt(groups, h, w, question=30):
    parts = [text(12)]
    for _ in range(groups):
        parts += [
            text(STAMP),
            torch.tensor([cfg.vision_start_token_id]),
            torch.full((h * w // 4,), cfg.video_token_id),
            torch.tensor([cfg.vision_end_token_id]),
        ]
    parts.append(text(question))
    return torch.cat(parts)


def image_prompt(h, w, question=30):
    return torch.cat(
        [
            text(12),
            torch.tensor([cfg.vision_start_token_id]),
            torch.full((h * w // 4,), cfg.image_token_id),
            torch.tensor([cfg.vision_end_token_id]),
            text(question),
        ]
    )


def answer(ids, new, **visual):
    mm_types = (ids == cfg.image_token_id).int() + 2 * (ids == cfg.video_token_id).int()
    ids, mm_types = ids.cuda(), mm_types.cuda()
    with torch.inference_mode():
        return model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            mm_token_type_ids=mm_types,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            **{k: v.cuda() for k, v in visual.items()},
        )


def videos(n, frames, h, w):
    t = frames // 2
    ids = torch.stack([video_prompt(t, h, w) for _ in range(n)])
    pixels = torch.randn(n * t * h * w, PATCH_VALUES, dtype=torch.float16)
    return answer(ids, 40, pixel_values_videos=pixels, video_grid_thw=torch.tensor([[t, h, w]] * n))


out = videos(4, 16, 16, 28)
print("16-frame clips", tuple(out.shape))
del out
report("phase1 video qa, 4 clips of 16 frames at 256 x 448")

out = videos(4, 32, 12, 20)
print("32-frame clips", tuple(out.shape))
del out
report("phase2 video qa, 4 clips of 32 frames at 192 x 320")

ids = torch.stack([image_prompt(28, 28) for _ in range(4)])
pixels = torch.randn(4 * 28 * 28, PATCH_VALUES, dtype=torch.float16)
out = answer(ids, 48, pixel_values=pixels, image_grid_thw=torch.tensor([[1, 28, 28]] * 4))
print("images", tuple(out.shape))
del out
report("phase3 image qa, 4 images at 448 x 448")
