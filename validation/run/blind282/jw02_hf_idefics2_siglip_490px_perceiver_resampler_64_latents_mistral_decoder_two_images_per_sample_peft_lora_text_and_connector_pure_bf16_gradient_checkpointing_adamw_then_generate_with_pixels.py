"""An Idefics2 vision-language model (transformers 5.17's `Idefics2ForConditionalGeneration`) built from
config: a SigLIP-style vision tower (12 x 1,152, patch 14 at 490 x 490: 1,225 patches, its position ids
bucketed per image from the patch attention mask), the perceiver-resampler connector (an MLP projection then
3 perceiver layers cross-attending 64 learned latents over the image patches, GQA) that turns each image into
64 tokens, and a Mistral decoder (16 x 2,048, 16 query and 4 KV heads, vocabulary 32,003 with the `<image>`
placeholder id 32,001). Two images per sample (`pixel_values` of shape (batch, 2, 3, 490, 490), a
`pixel_attention_mask` of ones), each written into the prompt as 64 placeholder tokens, 384 text tokens
after them; labels only on the text. Pure bf16 weights; peft 0.21 LoRA (r 16, alpha 32) on the decoder's
and the perceiver's attention and MLP projections, the vision tower frozen; non-reentrant gradient
checkpointing; 6 AdamW steps of batch 4; a no_grad evaluation; then `generate()` (greedy, dynamic cache,
min_new_tokens == max_new_tokens == 40) for 2 prompts with their images under inference_mode. No
value-dependent sizes (no padding images). 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Idefics2Config, Idefics2ForConditionalGeneration

torch.manual_seed(2822)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


IMAGE_TOKEN = 32001
cfg = Idefics2Config(
    vision_config={
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 12,
        "num_attention_heads": 16,
        "image_size": 490,
        "patch_size": 14,
    },
    perceiver_config={
        "hidden_size": 2048,
        "rms_norm_eps": 1e-5,
        "resampler_n_latents": 64,
        "resampler_depth": 3,
        "resampler_n_heads": 16,
        "resampler_head_dim": 96,
        "num_key_value_heads": 4,
    },
    text_config={
        "model_type": "mistral",
        "vocab_size": 32003,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "pad_token_id": 0,
    },
    image_token_id=IMAGE_TOKEN,
)
model = Idefics2ForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*(text_model|connector).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
report("idefics2_lora_built_bf16")


def batch(n, text_len):
    img_block = [1] + [IMAGE_TOKEN] * 64 + [2]
    ids = torch.randint(3, 32000, (n, len(img_block) * 2 + text_len), device="cuda")
    blk = torch.tensor(img_block, device="cuda")
    ids[:, : len(img_block)] = blk
    ids[:, len(img_block) : 2 * len(img_block)] = blk
    labels = ids.clone()
    labels[:, : 2 * len(img_block)] = -100
    pix = torch.randn(n, 2, 3, 490, 490, device="cuda", dtype=torch.bfloat16)
    pmask = torch.ones(n, 2, 490, 490, device="cuda", dtype=torch.bool)
    return ids, labels, pix, pmask


model.train()
for step in range(6):
    ids, labels, pix, pmask = batch(4, 384)
    loss = model(input_ids=ids, pixel_values=pix, pixel_attention_mask=pmask, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_training")

model.eval()
with torch.no_grad():
    ids, labels, pix, pmask = batch(4, 384)
    print(
        "eval",
        round(
            model(input_ids=ids, pixel_values=pix, pixel_attention_mask=pmask, labels=labels).loss.item(), 3
        ),
    )
del loss, opt
report("no_grad_eval")

with torch.inference_mode():
    ids, _, pix, pmask = batch(2, 32)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pix,
        pixel_attention_mask=pmask,
        max_new_tokens=40,
        min_new_tokens=40,
        do_sample=False,
        pad_token_id=0,
    )
print("generated", tuple(out.shape))
report("generate_with_pixel_values")
