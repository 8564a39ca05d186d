"""An LFM2-VL vision-language model (transformers 5.17's `Lfm2VlForConditionalGeneration`) from config,
fine-tuned the usual parameter-efficient way: a SigLIP2 NaFlex vision tower of 12 layers (d 768, 12 heads,
patch 16, 256 learned positions resized per image) kept frozen, the pixel-unshuffle (2 x 2) + LayerNorm +
GELU MLP projector trained in full, and peft 0.21 LoRA (r 16, alpha 32) on the LFM2 language model (12
layers of hybrid gated short convolutions and GQA attention, d 1,536, vocabulary 65,536, tied embeddings).
Inputs are built by hand, no processor: NaFlex pixel_values are (images, 1,024 patch slots, 768 values)
padded per image with `pixel_attention_mask`, and `spatial_shapes` give each image's patch grid of a
different aspect ratio (32 x 32, 24 x 40, 40 x 24, 28 x 36); each image becomes h/2 * w/2 image tokens in
input_ids, the rest random text, labels -100 on the image span. Pure bf16, AdamW over the projector and
LoRA weights, 5 steps of 4 samples (one image each, 640 tokens). Then greedy `generate()`
(min_new_tokens == max_new_tokens == 40) under `torch.inference_mode()` for batches of 8 prompts with
square and with wide images. 4 phases; seeded; no sizes depend on values."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Lfm2VlConfig, Lfm2VlForConditionalGeneration

torch.manual_seed(3581)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Lfm2VlConfig(
    vision_config=dict(
        model_type="siglip2_vision_model",
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        patch_size=16,
        num_patches=256,
    ),
    text_config=dict(
        model_type="lfm2",
        vocab_size=65536,
        hidden_size=1536,
        intermediate_size=6144,
        num_hidden_layers=12,
        num_attention_heads=24,
        num_key_value_heads=8,
        full_attn_idxs=[2, 5, 8, 10],
        max_position_embeddings=8192,
    ),
    projector_hidden_size=2560,
    image_token_id=396,
)
cfg.vision_config._attn_implementation = "sdpa"
cfg.text_config._attn_implementation = "sdpa"
model = Lfm2VlForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|out_proj|in_proj|w1|w2|w3)",
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
for name, p in model.named_parameters():
    if "multi_modal_projector" in name:
        p.requires_grad_(True)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
report("phase0 lfm2_vl built bf16, lora + projector trainable")

MAX_PATCHES = 1024
PATCH_VALUES = 3 * 16 * 16
PREFIX = 8


def images(shapes):
    n = len(shapes)
    pixels = torch.zeros(n, MAX_PATCHES, PATCH_VALUES, dtype=torch.bfloat16)
    mask = torch.zeros(n, MAX_PATCHES, dtype=torch.long)
    for i, (h, w) in enumerate(shapes):
        pixels[i, : h * w] = torch.randn(h * w, PATCH_VALUES).to(torch.bfloat16)
        mask[i, : h * w] = 1
    return pixels.cuda(), mask.cuda(), torch.tensor(shapes).cuda()


def prompts(shapes, seq):
    ids = torch.randint(500, 65000, (len(shapes), seq))
    labels = ids.clone()
    for i, (h, w) in enumerate(shapes):
        n_img = (h // 2) * (w // 2)
        ids[i, PREFIX : PREFIX + n_img] = cfg.image_token_id
        labels[i, : PREFIX + n_img] = -100
    return ids.cuda(), labels.cuda()


TRAIN_SHAPES = [(32, 32), (24, 40), (40, 24), (28, 36)]
model.train()
for step in range(5):
    shapes = TRAIN_SHAPES[step % 4 :] + TRAIN_SHAPES[: step % 4]
    pixels, mask, spatial = images(shapes)
    ids, labels = prompts(shapes, 640)
    loss = model(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels,
        pixel_attention_mask=mask,
        spatial_shapes=spatial,
        labels=labels,
    ).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("phase1 projector + lora training, 5 steps x 4 naflex images")

del opt, loss
model.eval()


def describe(shape, text):
    shapes = [shape] * 8
    pixels, mask, spatial = images(shapes)
    ids, _ = prompts(shapes, PREFIX + (shape[0] // 2) * (shape[1] // 2) + text)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixels,
            pixel_attention_mask=mask,
            spatial_shapes=spatial,
            max_new_tokens=40,
            min_new_tokens=40,
            do_sample=False,
            pad_token_id=0,
        )
    return out


out = describe((32, 32), 48)
print("square", tuple(out.shape))
del out
report("phase2 generate, 8 square 512 x 512 images")

out = describe((20, 50), 48)
print("wide", tuple(out.shape))
del out
report("phase3 generate, 8 wide 320 x 800 images")
