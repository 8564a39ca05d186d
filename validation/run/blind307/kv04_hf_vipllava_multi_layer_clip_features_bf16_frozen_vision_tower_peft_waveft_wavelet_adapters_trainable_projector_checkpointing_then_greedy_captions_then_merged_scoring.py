"""Visual instruction tuning and captioning with HF VipLlava (model_type "vipllava"): a CLIP ViT-L/14 vision
tower at 336 px (24 layers, 1024 wide, 576 patches) whose hidden states from layers -2, -5, -8, -11 and 6
are concatenated, layer-normed and projected (the multi-layer projector) into a 16-layer Llama (2048
wide, 16 heads, 4 KV heads, 32,064 tokens, image token 32000). All weights bf16; the vision tower frozen;
the language model adapted with peft WaveFT (WaveFTConfig: a sparse set of trainable wavelet coefficients
per q/k/v/o projection, the dense update rebuilt by an inverse DWT each forward), the multi-modal
projector trained in full (requires_grad back on after wrapping); non-reentrant gradient checkpointing on
the language model with input embeddings requiring grad. 3 steps at 6 image-text pairs of 576 image
tokens + 192 text tokens (loss on the text after the image), fused AdamW. Then greedy captions for 8
images (576 + 24 prompt tokens, 48 new tokens, fixed length) under inference_mode; then the adapter
merged into the weights (merge_and_unload) and 3 candidate captions per image scored by their summed log-
likelihood under no_grad.

Phases: 0 model wrapped; 1 first step; 2 two more steps; 3 greedy captions; 4 merged scoring."""

import os

import torch
from peft import WaveFTConfig, get_peft_model
from transformers import CLIPVisionConfig, LlamaConfig, VipLlavaConfig, VipLlavaForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3074)
IMAGE_TOKEN = 32000
if SMALL:
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=12,
        num_attention_heads=4,
        image_size=28,
        patch_size=14,
    )
    text = LlamaConfig(
        vocab_size=32064,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, TXT, GEN_B, PROMPT, NEW, NFREQ = 2, 8, 2, 4, 4, 64
else:
    vision = CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=336,
        patch_size=14,
        projection_dim=768,
    )
    text = LlamaConfig(
        vocab_size=32064,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    B, TXT, GEN_B, PROMPT, NEW, NFREQ = 6, 192, 8, 24, 48, 2048
config = VipLlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN)
config.text_config.pad_token_id = 0
N_IMG = (vision.image_size // vision.patch_size) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def pairs(n, text_len):
    """<s> USER: <image> x 576 followed by text tokens, and pixel values normalized like CLIP's processor."""
    head = torch.tensor([1, 3148, 1001, 29901])
    ids = torch.cat(
        [head.expand(n, -1), torch.full((n, N_IMG), IMAGE_TOKEN), torch.randint(3, 32000, (n, text_len))],
        dim=1,
    )
    pixels = (torch.rand(n, 3, vision.image_size, vision.image_size) - 0.48) / 0.27
    return ids.to(device), pixels.to(device=device, dtype=torch.bfloat16)


model = VipLlavaForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
model.model.vision_tower.requires_grad_(False)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
waveft = WaveFTConfig(
    n_frequency=NFREQ,
    scaling=25.0,
    wavelet_family="db1",
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)",
)
model = get_peft_model(model, waveft)
model.base_model.model.model.multi_modal_projector.requires_grad_(True)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=device == "cuda"
)
report("wrapped")

model.train()
for step in range(3):
    ids, pixels = pairs(B, TXT)
    labels = ids.clone()
    labels[:, : 4 + N_IMG] = -100
    out = model(input_ids=ids, pixel_values=pixels, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, ids, pixels, labels
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
ids, pixels = pairs(GEN_B, PROMPT)
with torch.inference_mode():
    captions = model.generate(
        input_ids=ids,
        pixel_values=pixels,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"captions {tuple(captions[:, ids.shape[1] :].shape)}")
del captions
report("captions")

merged = model.merge_and_unload()
del model, optimizer
scores = []
with torch.no_grad():
    for _candidate in range(3):
        cand = torch.cat([ids, torch.randint(3, 32000, (GEN_B, NEW), device=device)], dim=1)
        logits = merged(input_ids=cand, pixel_values=pixels, attention_mask=torch.ones_like(cand)).logits
        logp = logits[:, ids.shape[1] - 1 : -1].float().log_softmax(-1)
        scores.append(logp.gather(-1, cand[:, ids.shape[1] :, None]).squeeze(-1).sum(-1))
        del logits, logp, cand
best = torch.stack(scores, dim=1).argmax(1)
print(f"best candidates {best.tolist()}")
report("scoring")
