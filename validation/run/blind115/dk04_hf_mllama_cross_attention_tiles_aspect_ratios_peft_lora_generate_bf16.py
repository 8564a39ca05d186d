"""HF Mllama (MllamaForConditionalGeneration from config, bf16 weights, sdpa): an 8+2-layer tiled ViT
(448 px tiles, patch 14, 768 wide, up to 4 tiles, three intermediate layers concatenated, 3072-wide
output) and an 8-layer Llama decoder (2048 wide) with gated cross-attention layers at 2 and 6. One
image per sample at aspect ratios 2x2, 1x2, 1x1, 2x1 (4, 2, 1, 2 real tiles, the rest zero and
masked by aspect_ratio_mask), a cross_attention_mask over the tiles from the image token on. PEFT
LoRA (r 16) on the decoder's attention projections, the rest frozen; AdamW, 3 steps; then greedy
generate() of 24 tokens with the images; 5 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import MllamaConfig, MllamaForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11504)
device = "cuda" if torch.cuda.is_available() else "cpu"
TOKEN = 128256
if SMALL:
    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_global_layers=1,
        attention_heads=4,
        image_size=28,
        patch_size=14,
        intermediate_layers_indices=[0],
        vision_output_dim=64,
    )
    text = dict(
        vocab_size=128256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        cross_attention_layers=[1],
    )
    PX, TXT, NEW = 28, 10, 4
else:
    vision = dict(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_global_layers=2,
        attention_heads=12,
        image_size=448,
        patch_size=14,
        intermediate_layers_indices=[1, 3, 5],
        vision_output_dim=3072,
    )
    text = dict(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        cross_attention_layers=[2, 6],
    )
    PX, TXT, NEW = 448, 384, 24
config = MllamaConfig(vision_config=vision, text_config=text, image_token_index=TOKEN)
config._attn_implementation = "sdpa"
model = MllamaForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)",
)
model = get_peft_model(model, lora)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
RATIOS = {1: 1, 2: 2, 5: 2, 6: 4}  # aspect-ratio id -> tiles: [1, 1], [1, 2], [2, 1], [2, 2]


def make_batch(ratio_ids, length):
    n = len(ratio_ids)
    tiles = torch.tensor([RATIOS[r] for r in ratio_ids], device=device)
    pixels = torch.randn(n, 1, 4, 3, PX, PX, device=device, dtype=torch.bfloat16)
    ar_mask = (torch.arange(4, device=device)[None, :] < tiles[:, None]).long()[:, None, :]
    pixels = pixels * ar_mask[..., None, None, None].to(pixels.dtype)
    ids = torch.randint(0, 128000, (n, length), device=device)
    ids[:, 0] = 128000
    ids[:, 1] = TOKEN
    xmask = ar_mask[:, None, :, :].expand(n, length, 1, 4).clone()
    xmask[:, :1] = 0
    ar_ids = torch.tensor(ratio_ids, device=device)[:, None]
    return ids, pixels, ar_ids, ar_mask, xmask


model.train()
for step in range(3):
    ids, pixels, ar_ids, ar_mask, xmask = make_batch([6, 2, 1, 5], TXT)
    labels = ids.clone()
    labels[:, :2] = -100
    out = model(
        input_ids=ids,
        pixel_values=pixels,
        aspect_ratio_ids=ar_ids,
        aspect_ratio_mask=ar_mask,
        cross_attention_mask=xmask,
        labels=labels,
    )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids, pixels, ar_ids, ar_mask, xmask, labels
model.eval()
ids, pixels, ar_ids, ar_mask, xmask = make_batch([6, 5], TXT // 4)
with torch.no_grad():
    gen = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels,
        aspect_ratio_ids=ar_ids,
        aspect_ratio_mask=ar_mask,
        cross_attention_mask=xmask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen, ids, pixels
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()}", f"reserved {torch.cuda.memory_reserved()}")
