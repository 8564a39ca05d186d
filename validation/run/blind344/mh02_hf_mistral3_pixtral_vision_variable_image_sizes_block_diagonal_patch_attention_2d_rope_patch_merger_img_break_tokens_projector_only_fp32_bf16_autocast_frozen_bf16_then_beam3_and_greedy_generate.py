"""Mistral-Small-3.1-style vision-language model, projector-only training (LLaVA stage 1) without a
processor: Mistral3ForConditionalGeneration from a config (random weights, sdpa): a Pixtral vision encoder
of 16 layers at 1024 (patch 14, 2D RoPE; all images of a batch packed into one sequence with a
block-diagonal attention mask), the Mistral3 projector (RMSNorm, 2 x 2 patch merger by `unfold`, GELU MLP)
and a Mistral decoder of 12 layers at 1536 (16 heads over 4 KV heads, head_dim 128, SwiGLU 4096, vocabulary
131,072, untied). Each image keeps its own size (multiples of 28 px, padded to the batch's largest in
pixel_values, real sizes in image_sizes); its tokens are laid out as the Pixtral processor does: one [IMG]
per merged 2 x 2 patch, an [IMG_BREAK] at the end of each row, [IMG_END] instead of the last one.
Everything but the projector is frozen in bf16; the projector is kept in fp32 and trained under bf16
autocast with AdamW (fused) and gradient clipping.
Phases: 0 the model; 1 three steps at batch 4 (images 392 x 588 .. 784 x 560, 128-256 caption tokens, loss
on the caption only); 2 eval loss under no_grad on the first batch; 3 beam search (3 beams) of 24 new tokens
for 2 left-padded image prompts under bf16 autocast; 4 greedy generate() of 48 tokens for 4 prompts with
a 1008 x 1008 image each."""

import os

import torch
from transformers import Mistral3Config, Mistral3ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34402)
device = "cuda" if torch.cuda.is_available() else "cpu"
PATCH, MERGE = 14, 2
IMG, IMG_BREAK, IMG_END, BOS, PAD = 10, 12, 13, 1, 11
if SMALL:
    V_LAYERS, V_W, V_FF, V_HEADS = 2, 64, 128, 4
    L_LAYERS, L_W, L_FF, L_HEADS, L_KV, HEAD_DIM, VOCAB = 2, 64, 128, 4, 2, 16, 131072
    TRAIN = [[(56, 84), (84, 56), (56, 56), (112, 84)], [(84, 84), (56, 112), (112, 56), (56, 56)]]
    CAPS, BEAM_NEW, GREEDY_NEW, BIG = (16, 32), 4, 4, 112
else:
    V_LAYERS, V_W, V_FF, V_HEADS = 16, 1024, 4096, 16
    L_LAYERS, L_W, L_FF, L_HEADS, L_KV, HEAD_DIM, VOCAB = 12, 1536, 4096, 16, 4, 128, 131072
    TRAIN = [
        [(392, 588), (784, 560), (504, 504), (616, 420)],
        [(448, 672), (560, 784), (336, 336), (700, 476)],
    ]
    CAPS, BEAM_NEW, GREEDY_NEW, BIG = (128, 256), 24, 48, 1008


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = Mistral3Config(
    vision_config=dict(
        model_type="pixtral",
        hidden_size=V_W,
        intermediate_size=V_FF,
        num_hidden_layers=V_LAYERS,
        num_attention_heads=V_HEADS,
        head_dim=V_W // V_HEADS,
        image_size=1540,
        patch_size=PATCH,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    text_config=dict(
        model_type="mistral",
        hidden_size=L_W,
        intermediate_size=L_FF,
        num_hidden_layers=L_LAYERS,
        num_attention_heads=L_HEADS,
        num_key_value_heads=L_KV,
        head_dim=HEAD_DIM,
        vocab_size=VOCAB,
        max_position_embeddings=32768,
        sliding_window=None,
    ),
    image_token_index=IMG,
    spatial_merge_size=MERGE,
    vision_feature_layer=-1,
    tie_word_embeddings=False,
)
config._attn_implementation = "sdpa"
model = Mistral3ForConditionalGeneration(config).to(device, torch.bfloat16)
model.requires_grad_(False)
projector = model.model.multi_modal_projector.float().requires_grad_(True)
opt = torch.optim.AdamW(projector.parameters(), lr=2e-4, weight_decay=0.0, fused=device == "cuda")
report("model")


def image_ids(h, w):
    rows, cols = h // (PATCH * MERGE), w // (PATCH * MERGE)
    grid = torch.full((rows, cols + 1), IMG)
    grid[:, -1] = IMG_BREAK
    grid[-1, -1] = IMG_END
    return grid.flatten()


def batch(sizes, caps, left):
    rows, label_rows = [], []
    for (h, w), n in zip(sizes, caps, strict=True):
        img = image_ids(h, w)
        text = torch.randint(1000, VOCAB, (n,))
        rows.append(torch.cat([torch.tensor([BOS]), img, text]))
        label_rows.append(torch.cat([torch.full((1 + len(img),), -100), text]))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (r, lab) in enumerate(zip(rows, label_rows, strict=True)):
        sl = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, sl], labels[i, sl], mask[i, sl] = r, lab, 1
    hmax, wmax = max(h for h, _ in sizes), max(w for _, w in sizes)
    pixels = torch.zeros(len(sizes), 3, hmax, wmax)
    for i, (h, w) in enumerate(sizes):
        pixels[i, :, :h, :w] = torch.randn(3, h, w)
    inputs = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "pixel_values": pixels.to(device, torch.bfloat16),
        "image_sizes": torch.tensor(sizes).to(device),
    }
    return inputs, labels.to(device)


model.train()
for step in range(3):
    sizes = TRAIN[step % 2]
    caps = [CAPS[0] + (CAPS[1] - CAPS[0]) * i // 3 for i in range(4)]
    inputs, labels = batch(sizes, caps, left=False)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(**inputs, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(projector.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs, labels
report("train_projector_only_autocast")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, labels = batch(TRAIN[0], [CAPS[0]] * 4, left=False)
    loss = model(**inputs, labels=labels).loss
    print(f"eval loss {loss.item():.4f}")
    del inputs, labels, loss
report("eval_no_grad")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, _ = batch(TRAIN[1][:2], [24, 40], left=True)
    out = model.generate(
        **inputs,
        num_beams=3,
        max_new_tokens=BEAM_NEW,
        min_new_tokens=BEAM_NEW,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    print("beam", tuple(out.shape))
    del out, inputs
report("generate_beam3")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, _ = batch([(BIG, BIG)] * 4, [16, 32, 48, 8], left=True)
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
report("generate_greedy_large_images")
