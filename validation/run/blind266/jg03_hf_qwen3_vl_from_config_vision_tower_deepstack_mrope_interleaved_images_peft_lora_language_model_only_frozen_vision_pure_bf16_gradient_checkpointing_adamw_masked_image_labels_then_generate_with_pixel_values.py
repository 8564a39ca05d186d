"""A Qwen3-VL vision-language model (transformers 5.17's `Qwen3VLForConditionalGeneration`) from config,
fine-tuned on image + caption pairs the usual way: a vision tower of 12 blocks (d 1,024, 16 heads,
patch 16 x 2 frames, 2 x 2 spatial merge, DeepStack features from blocks 3, 6 and 9 added into the first
language layers), a Qwen3 language model of 16 layers (d 2,048, 16 query and 8 KV heads of 128, MLP
6,144, vocabulary 151,936, interleaved multimodal RoPE). Inputs are built by hand, no processor: each
sample one 448 x 448 image (28 x 28 patches of 2 x 16 x 16 x 3 values, `image_grid_thw` (1, 28, 28),
196 image tokens between <vision_start> and <vision_end>) and 571 text tokens, 768 in all; the labels
mask the image span with -100 and `mm_token_type_ids` marks it as the processor would. Pure bf16;
peft 0.21 LoRA (r 16, alpha 32) on the language model's projections only (the vision tower frozen),
non-reentrant gradient checkpointing, 6 AdamW steps of 4 samples; then `generate()` (greedy,
min_new_tokens == max_new_tokens == 48) for 2 image prompts under `torch.inference_mode()`. The
image-token counts are fixed by the grids, no value-dependent sizes. 3 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

torch.manual_seed(2663)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen3VLConfig(
    vision_config=dict(
        depth=12,
        hidden_size=1024,
        intermediate_size=4096,
        num_heads=16,
        out_hidden_size=2048,
        deepstack_visual_indexes=[3, 6, 9],
    ),
    text_config=dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=8192,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    ),
)
tc = cfg.text_config
model = Qwen3VLForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
report("qwen3_vl_lora_built_bf16")

GRID = (1, 28, 28)
PATCH_VALUES = 3 * 2 * 16 * 16
N_IMG = GRID[0] * GRID[1] * GRID[2] // 4
PREFIX, SEQ = 24, 768


def batch(n, seq=SEQ):
    ids = torch.randint(0, 150000, (n, seq))
    ids[:, PREFIX] = cfg.vision_start_token_id
    ids[:, PREFIX + 1 : PREFIX + 1 + N_IMG] = cfg.image_token_id
    ids[:, PREFIX + 1 + N_IMG] = cfg.vision_end_token_id
    labels = ids.clone()
    labels[:, : PREFIX + 2 + N_IMG] = -100
    pixels = torch.randn(n * GRID[0] * GRID[1] * GRID[2], PATCH_VALUES, dtype=torch.bfloat16)
    grid = torch.tensor([GRID] * n)
    mm_types = (ids == cfg.image_token_id).int()  # what the processor returns as `mm_token_type_ids`
    return ids.cuda(), labels.cuda(), pixels.cuda(), grid.cuda(), mm_types.cuda()


model.train()
for step in range(6):
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
report("lora_image_caption_training")

del opt, loss
model.eval()
ids, _, pixels, grid, mm_types = batch(2, seq=PREFIX + 2 + N_IMG + 40)
with torch.inference_mode():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=mm_types,
        pixel_values=pixels,
        image_grid_thw=grid,
        max_new_tokens=48,
        min_new_tokens=48,
        do_sample=False,
        pad_token_id=0,
    )
print("generated", tuple(out.shape))
report("generate_with_pixel_values")
