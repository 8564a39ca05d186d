"""An InternVL3-style vision-language model from config, the way people fine-tune InternVL on their own
image-text data: an InternViT (24 layers of d 1,024, 16 heads, MLP 4,096, layer scale, absolute
positions, 448 x 448 tiles of 14-pixel patches: 1,025 tokens) whose last hidden state, CLS dropped,
is pixel-shuffled by 0.5 (32 x 32 x 1,024 to 16 x 16 x 4,096: 256 tokens a tile) and projected by a
LayerNorm-MLP into a Qwen2 decoder (20 layers of d 2,048, 16 query and 2 KV heads, MLP 5,632,
vocabulary 151,674 tied), the 256 features of each tile scattered over `<IMG_CONTEXT>` placeholder
tokens. Pure bf16; peft 0.21 LoRA (r 16, alpha 32) on the language model's seven projections only
(a regex), the projector fully trained (`modules_to_save`), the vision tower frozen; non-reentrant
gradient checkpointing; 5 AdamW steps on 4 samples of 2 tiles each (512 image tokens + 448 text
tokens, everything but the last 256 answer tokens masked out of the labels with -100); a no_grad
evaluation; then greedy `generate()` with `pixel_values` for 2 one-tile prompts (256 image + 64
text tokens), 48 new tokens (min_new_tokens == max_new_tokens). 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import InternVLConfig, InternVLForConditionalGeneration

torch.manual_seed(2692)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


IMG = 151667
cfg = InternVLConfig(
    vision_config={
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "image_size": [448, 448],
        "patch_size": [14, 14],
    },
    text_config={
        "model_type": "qwen2",
        "vocab_size": 151674,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 20,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    },
    image_token_id=IMG,
    image_seq_length=256,
    downsample_ratio=0.5,
)
model = InternVLForConditionalGeneration._from_config(cfg, dtype=torch.bfloat16).cuda()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    modules_to_save=["multi_modal_projector"],
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.0)
report("internvl_lora_built_bf16")

MEAN = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1)


def sample_batch(n, tiles, text, answer):
    pixels = ((torch.rand(n * tiles, 3, 448, 448, device="cuda") - MEAN) / STD).to(torch.bfloat16)
    prompt = torch.randint(0, 151000, (n, 16), device="cuda")
    image = torch.full((n, 256 * tiles), IMG, device="cuda")
    rest = torch.randint(0, 151000, (n, text - 16), device="cuda")
    ids = torch.cat([prompt, image, rest], dim=1)
    labels = ids.clone()
    labels[:, : ids.shape[1] - answer] = -100
    return ids, pixels, labels


model.train()
for step in range(5):
    ids, pixels, labels = sample_batch(4, 2, 448, 256)
    loss = model(input_ids=ids, pixel_values=pixels, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_projector_training")

model.eval()
with torch.no_grad():
    ids, pixels, labels = sample_batch(4, 2, 448, 256)
    print("eval", round(model(input_ids=ids, pixel_values=pixels, labels=labels).loss.item(), 3))
report("no_grad_eval")

del opt, loss
ids, pixels, _ = sample_batch(2, 1, 64, 0)
with torch.no_grad():
    out = model.generate(
        input_ids=ids,
        pixel_values=pixels,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=48,
        min_new_tokens=48,
        pad_token_id=0,
    )
print("generated", tuple(out.shape), out[0, -8:].tolist())
report("generate_with_pixel_values")
