"""A Qwen2.5-VL vision-language model (transformers 5.17's `Qwen2_5_VLForConditionalGeneration`, the 3B
layout) from config, fine-tuned on two-image samples the usual way: the vision tower of 32 blocks (d 1,280,
16 heads, SwiGLU MLP 3,420, patch 14 x 2 frames, 2-D rotary positions, windowed attention over 112-pixel
windows with full attention in blocks 7, 15, 23 and 31, a 2 x 2 patch merger into d 2,048), and a Qwen2.5
language model of 24 layers (d 2,048, 16 query and 2 KV heads of 128, MLP 11,008, vocabulary 151,936,
multimodal RoPE sections 16/24/24). Inputs are built by hand, no processor: each sample two images, 448 x 448
(grid (1, 32, 32): 256 image tokens) and 336 x 504 (grid (1, 24, 36): 216 image tokens), each between
<vision_start> and <vision_end>, and 552 text tokens, 1,028 in all; the labels mask both image spans and
`mm_token_type_ids` marks them as the processor would. Pure bf16; peft 0.21 LoRA (r 32, alpha 64) on the
language model's projections by a regex, the patch merger trained in full through `modules_to_save`, the
vision blocks frozen; non-reentrant gradient checkpointing; 5 AdamW steps of 4 samples; then `generate()`
(greedy, min_new_tokens == max_new_tokens == 40) for 2 two-image prompts under `torch.inference_mode()`.
The image-token counts are fixed by the grids; no value-dependent sizes. 3 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

torch.manual_seed(2732)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen2_5_VLConfig(
    vision_config=dict(
        depth=32,
        hidden_size=1280,
        intermediate_size=3420,
        num_heads=16,
        out_hidden_size=2048,
        window_size=112,
        fullatt_block_indexes=[7, 15, 23, 31],
    ),
    text_config=dict(
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    ),
    tie_word_embeddings=True,
)
model = Qwen2_5_VLForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=32,
    lora_alpha=64,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    modules_to_save=["merger"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
report("qwen2_5_vl_lora_built_bf16")

GRIDS = [(1, 32, 32), (1, 24, 36)]
PATCH_VALUES = 3 * 2 * 14 * 14
PREFIX, GAP, SEQ = 16, 24, 1028


def batch(n, seq=SEQ):
    ids = torch.randint(0, 150000, (n, seq))
    labels = ids.clone()
    pos = PREFIX
    for t, h, w in GRIDS:
        k = t * h * w // 4
        ids[:, pos] = cfg.vision_start_token_id
        ids[:, pos + 1 : pos + 1 + k] = cfg.image_token_id
        ids[:, pos + 1 + k] = cfg.vision_end_token_id
        labels[:, pos : pos + 2 + k] = -100
        pos += 2 + k + GAP
    labels[:, :PREFIX] = -100
    pixels = torch.randn(n * sum(t * h * w for t, h, w in GRIDS), PATCH_VALUES, dtype=torch.bfloat16)
    grid = torch.tensor(GRIDS * n)
    mm_types = (ids == cfg.image_token_id).int()  # what the processor returns as `mm_token_type_ids`
    return ids.cuda(), labels.cuda(), pixels.cuda(), grid.cuda(), mm_types.cuda()


model.train()
for step in range(5):
    ids, labels, pixels, grid, mm_types = batch(4)
    loss = model(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=mm_types,
        pixel_values=pixels,
        image_grid_thw=grid,
        labels=labels,
    ).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_two_image_training")

del opt, loss
model.eval()
ids, _, pixels, grid, mm_types = batch(2, seq=560)
with torch.inference_mode():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=mm_types,
        pixel_values=pixels,
        image_grid_thw=grid,
        max_new_tokens=40,
        min_new_tokens=40,
        do_sample=False,
        pad_token_id=0,
    )
print("generated", tuple(out.shape))
report("generate_with_pixel_values")
