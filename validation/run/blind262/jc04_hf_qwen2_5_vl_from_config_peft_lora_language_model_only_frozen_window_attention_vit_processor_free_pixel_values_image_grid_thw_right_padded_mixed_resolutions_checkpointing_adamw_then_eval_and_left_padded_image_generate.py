"""PEFT LoRA on HF Qwen2.5-VL without a processor: pixel_values (patches x 3*2*14*14) and
image_grid_thw built by hand, as the processor's output would be for images of several resolutions.
Qwen2_5_VLForConditionalGeneration from a config (random weights, bf16, sdpa): a 12-block ViT of 1280
(window attention, full attention in blocks 5 and 11, 2x2 merger into 1280), a Qwen2 decoder of 10
layers of 1280 (10 heads, 2 KV heads, SwiGLU 3584, vocabulary 151,936, tied) with M-RoPE.
LoRA r 16 / alpha 32 / dropout 0.05 on the decoder's q/k/v/o and gate/up/down projections only
(a regex over language_model; the vision tower and merger frozen), HF non-reentrant gradient
checkpointing with enable_input_require_grads, AdamW (foreach) over the adapters.
Phase 1: 3 steps at batch 4, one image per row at grids 36x36, 28x48, 20x20 and 44x24 (324, 336, 100,
264 merged tokens) then 256-384 text tokens, right-padded to one length (attention mask and -100 labels
on the padding and image tokens). Phase 2: eval loss under no_grad on the same shapes. Phase 3: greedy
generate() of 48 tokens for 3 left-padded prompts with an image each (grids 28x28, 16x40, 32x32).
3 phases after the model's."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

torch.manual_seed(26204)
IMAGE, VSTART, VEND, PAD = 151655, 151652, 151653, 151643
PATCH = 3 * 2 * 14 * 14


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


vision = dict(
    depth=12,
    hidden_size=1280,
    intermediate_size=3420,
    num_heads=16,
    out_hidden_size=1280,
    window_size=112,
    fullatt_block_indexes=[5, 11],
)
text = dict(
    hidden_size=1280,
    intermediate_size=3584,
    num_hidden_layers=10,
    num_attention_heads=10,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
)
config = Qwen2_5_VLConfig(vision_config=vision, text_config=text, tie_word_embeddings=True)
config._attn_implementation = "sdpa"
model = Qwen2_5_VLForConditionalGeneration(config).to("cuda", torch.bfloat16)
report("model")

lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
)
model = get_peft_model(model, lora)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)


def batch(grids, texts, left):
    """One image per row: [vision_start, image tokens, vision_end, text]; padded to one width."""
    rows = []
    for (t, h, w), n_text in zip(grids, texts, strict=True):
        n_img = t * h * w // 4
        ids = torch.cat(
            [
                torch.tensor([VSTART]),
                torch.full((n_img,), IMAGE),
                torch.tensor([VEND]),
                torch.randint(0, 150000, (n_text,)),
            ]
        )
        types = torch.cat([torch.zeros(1), torch.ones(n_img), torch.zeros(1 + n_text)]).long()
        rows.append((ids, types))
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    types = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (r, ty) in enumerate(rows):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl], types[i, sl], mask[i, sl] = r, ty, 1
    labels = ids.masked_fill((mask == 0) | (types == 1) | (ids == VSTART) | (ids == VEND), -100)
    patches = sum(t * h * w for t, h, w in grids)
    pixels = torch.randn(patches, PATCH, dtype=torch.bfloat16)
    return {
        "input_ids": ids.cuda(),
        "mm_token_type_ids": types.cuda(),
        "attention_mask": mask.cuda(),
        "pixel_values": pixels.cuda(),
        "image_grid_thw": torch.tensor(grids).cuda(),
    }, labels.cuda()


TRAIN_GRIDS = [(1, 36, 36), (1, 28, 48), (1, 20, 20), (1, 44, 24)]
model.train()
for _ in range(3):
    inputs, labels = batch(TRAIN_GRIDS, [384, 256, 320, 300], left=False)
    out = model(**inputs, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, inputs, labels
report("train_lora_checkpointing_adamw")

model.eval()
with torch.no_grad():
    inputs, labels = batch(TRAIN_GRIDS, [384, 256, 320, 300], left=False)
    loss = model(**inputs, labels=labels).loss
    del inputs, labels, loss
report("eval_no_grad")

with torch.no_grad():
    inputs, _ = batch([(1, 28, 28), (1, 16, 40), (1, 32, 32)], [64, 120, 32], left=True)
    out = model.generate(
        **inputs, max_new_tokens=48, min_new_tokens=48, do_sample=False, eos_token_id=None, pad_token_id=PAD
    )
    del out, inputs
report("generate_left_padded_images")
