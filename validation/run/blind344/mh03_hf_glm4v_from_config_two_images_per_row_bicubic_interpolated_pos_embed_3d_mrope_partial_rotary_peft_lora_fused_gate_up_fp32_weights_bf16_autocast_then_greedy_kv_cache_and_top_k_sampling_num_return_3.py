"""GLM-4.1V-style vision-language model fine-tuned with LoRA, without a processor:
Glm4vForConditionalGeneration from a config (random weights, fp32 weights, sdpa): a vision tower of 12
blocks at 1024 (patch 14, temporal patch 2, a 336-px learned position table bicubically interpolated to each
image's grid, 2 x 2 patch merger into 1536) and a GLM-4 decoder of 12 layers at 1536 (12 heads over 2 KV
heads, head_dim 128, partial rotary 0.5 with 3D M-RoPE sections 8/12/12, fused gate_up SwiGLU 4608,
vocabulary 151,552). pixel_values are the processor's flattened patches (patches x 3*2*14*14) with
image_grid_thw and mm_token_type_ids built by hand; each image sits between <|begin_of_image|> and
<|end_of_image|>.
PEFT LoRA r 8 / alpha 16 on the decoder's q/k/v/o, gate_up_proj and down_proj; training under bf16
autocast, AdamW (foreach), gradient clipping.
Phases: 0 the model; 1 three LoRA steps at batch 2 with two images per row (grids 32x24 + 20x40 and
28x28 + 16x16 patches) and 256 / 320 text tokens, right-padded, loss on the text only; 2 greedy
generate() of 40 tokens for 3 left-padded prompts (one image each) under autocast, KV cache; 3 top-k
sampling (k 50, temperature 0.8) with num_return_sequences=3 for 2 prompts, 32 tokens."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Glm4vConfig, Glm4vForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34403)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMAGE, BOI, EOI, PAD = 151343, 151339, 151340, 151329
PATCH_DIM = 3 * 2 * 14 * 14
if SMALL:
    V_DEPTH, V_W, V_HEADS, V_FF = 2, 64, 4, 128
    L_LAYERS, L_W, L_FF, L_HEADS, L_KV = 2, 256, 256, 2, 1
    TRAIN = [[(4, 6), (4, 4)], [(6, 6), (2, 4)]]
    TEXT, GEN_GRIDS, GREEDY_NEW, SAMPLE_NEW = (16, 24), [(4, 4), (2, 6), (6, 4)], 4, 4
else:
    V_DEPTH, V_W, V_HEADS, V_FF = 12, 1024, 16, 4608
    L_LAYERS, L_W, L_FF, L_HEADS, L_KV = 12, 1536, 4608, 12, 2
    TRAIN = [[(32, 24), (20, 40)], [(28, 28), (16, 16)]]
    TEXT, GEN_GRIDS, GREEDY_NEW, SAMPLE_NEW = (256, 320), [(36, 28), (24, 24), (16, 44)], 40, 32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = Glm4vConfig(
    vision_config=dict(
        depth=V_DEPTH,
        hidden_size=V_W,
        num_heads=V_HEADS,
        intermediate_size=V_FF,
        out_hidden_size=L_W,
        image_size=336,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    ),
    text_config=dict(
        hidden_size=L_W,
        intermediate_size=L_FF,
        num_hidden_layers=L_LAYERS,
        num_attention_heads=L_HEADS,
        num_key_value_heads=L_KV,
        vocab_size=151552,
        max_position_embeddings=32768,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [8, 12, 12],
            "partial_rotary_factor": 0.5,
        },
    ),
)
config._attn_implementation = "sdpa"
model = Glm4vForConditionalGeneration(config).to(device)
report("model")

lora = LoraConfig(
    r=8,
    lora_alpha=16,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_up_proj|down_proj)",
)
model = get_peft_model(model, lora)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, foreach=True)


def batch(rows_grids, texts, left):
    """Each row: per image [BOI, image tokens, EOI], then its text; token types 1 on image tokens."""
    rows, grids = [], []
    for row_grids, n_text in zip(rows_grids, texts, strict=True):
        ids, types = [], []
        for h, w in row_grids:
            n = h * w // 4
            ids += [torch.tensor([BOI]), torch.full((n,), IMAGE), torch.tensor([EOI])]
            types += [torch.zeros(1), torch.ones(n), torch.zeros(1)]
            grids.append((1, h, w))
        ids.append(torch.randint(0, 151000, (n_text,)))
        types.append(torch.zeros(n_text))
        rows.append((torch.cat(ids), torch.cat(types).long()))
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    types = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (r, ty) in enumerate(rows):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl], types[i, sl], mask[i, sl] = r, ty, 1
    labels = ids.masked_fill((mask == 0) | (types == 1) | (ids == BOI) | (ids == EOI), -100)
    patches = sum(t * h * w for t, h, w in grids)
    inputs = {
        "input_ids": ids.to(device),
        "mm_token_type_ids": types.to(device),
        "attention_mask": mask.to(device),
        "pixel_values": torch.randn(patches, PATCH_DIM).to(device),
        "image_grid_thw": torch.tensor(grids).to(device),
    }
    return inputs, labels.to(device)


model.train()
for step in range(3):
    inputs, labels = batch(TRAIN, TEXT, left=False)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(**inputs, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs, labels
report("train_lora_bf16_autocast")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, _ = batch([[g] for g in GEN_GRIDS], [24, 48, 12], left=True)
    out = model.generate(
        **inputs,
        max_new_tokens=GREEDY_NEW,
        min_new_tokens=GREEDY_NEW,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    print("greedy", tuple(out.shape))
    del out, inputs
report("generate_greedy_kv_cache")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, _ = batch([[GEN_GRIDS[0]], [GEN_GRIDS[2]]], [32, 16], left=True)
    out = model.generate(
        **inputs,
        do_sample=True,
        top_k=50,
        temperature=0.8,
        num_return_sequences=3,
        max_new_tokens=SAMPLE_NEW,
        min_new_tokens=SAMPLE_NEW,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    print("sampled", tuple(out.shape))
    del out, inputs
report("generate_top_k_num_return_3")
