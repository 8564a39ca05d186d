"""SmolVLM the way its fine-tuning notebooks train it (transformers 5.17's `Idefics3ForConditionalGeneration`
from config, the SmolVLM2 layout scaled down): a SigLIP-style vision tower (12 x 768, 512 x 512 images in 16 x
16 patches: 1,024 positions), the pixel-shuffle connector (scale factor 4: 64 image tokens an image, a linear
projection of 12,288 to 2,048) and a Llama decoder (16 x 2,048, 16 query / 8 KV heads, MLP 8,192, vocabulary
49,280, untied). Each sample is one image split as the processor does into 4 crops plus the global view (5
images of 512 x 512, 320 `<image>` tokens) and 448 text tokens (768 in all); pixel values are drawn on the
host (no padding image, so `real_images_inds` keeps all 5), and the image tokens' labels are -100. Pure bf16,
the vision tower frozen, peft 0.21 LoRA (r 16, alpha 32) on the decoder's seven projections, the connector
trained whole (`modules_to_save`), non-reentrant gradient checkpointing: 6 AdamW steps of 4 samples (20
images); a no_grad evaluation of 2 batches; then greedy `generate()` with `pixel_values` (min_new_tokens ==
max_new_tokens == 32) for 2 prompts under inference_mode. Seeded, no value-dependent sizes. 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Idefics3Config, Idefics3ForConditionalGeneration

torch.manual_seed(2772)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


IMAGE_TOKEN = 49190
cfg = Idefics3Config(
    vision_config=dict(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=512,
        patch_size=16,
    ),
    text_config=dict(
        model_type="llama",
        vocab_size=49280,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        pad_token_id=2,
        tie_word_embeddings=False,
    ),
    scale_factor=4,
    image_token_id=IMAGE_TOKEN,
    pad_token_id=2,
    tie_word_embeddings=False,
)
model = Idefics3ForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
print("params", sum(p.numel() for p in model.parameters()))
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*text_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    modules_to_save=["connector"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.01)
report("idefics3_lora_built_bf16")

N_IMG, IMG_TOK, TEXT = 5, 64, 448


def sample_ids(b, text):
    # per image a marker token then 64 <image> tokens (the crops, then the global view), then the text
    rows = []
    for _ in range(b):
        parts = []
        for _ in range(N_IMG):
            parts.append(torch.randint(49152, 49180, (1,)))
            parts.append(torch.full((IMG_TOK,), IMAGE_TOKEN))
        parts.append(torch.randint(3, 49152, (text,)))
        rows.append(torch.cat(parts))
    return torch.stack(rows).cuda()


def batch(b, text=TEXT):
    ids = sample_ids(b, text)
    pixels = torch.randn(b, N_IMG, 3, 512, 512).to(device="cuda", dtype=torch.bfloat16)
    labels = ids.masked_fill(ids >= 49152, -100)
    return ids, pixels, labels


model.train()
for step in range(6):
    ids, pixels, labels = batch(4)
    loss = model(input_ids=ids, pixel_values=pixels, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
del loss
report("lora_vlm_training")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids, pixels, labels = batch(4)
        print("eval", round(model(input_ids=ids, pixel_values=pixels, labels=labels).loss.item(), 3))
report("no_grad_eval")

del opt
ids, pixels, _ = batch(2, text=96)
with torch.inference_mode():
    gen = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels,
        do_sample=False,
        max_new_tokens=32,
        min_new_tokens=32,
        pad_token_id=2,
        eos_token_id=None,
    )
print("generated", tuple(gen.shape))
report("generate_with_pixel_values")
