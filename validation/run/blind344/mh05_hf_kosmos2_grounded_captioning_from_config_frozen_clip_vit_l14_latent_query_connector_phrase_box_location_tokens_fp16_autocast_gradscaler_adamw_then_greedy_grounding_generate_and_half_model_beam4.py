"""Kosmos-2 grounded captioning (referring expressions with box location tokens), fine-tuned from a config:
Kosmos2ForConditionalGeneration (random weights, sdpa): a CLIP ViT-L/14 vision tower (24 layers at 1024,
224 px, 257 tokens; frozen), the image-to-text connector (64 latent queries attending over the image features
and themselves) and a Magneto decoder of 12 layers at 1536 (24 heads, sub-LayerNorm FFN 6144, scaled
embeddings, dropout 0.1, vocabulary 65,037, tied). Each sequence is laid out as the Kosmos-2 processor does:
<s> <image> 64 image-embedding positions (image_embeds_position_mask) </image> <grounding> then text with
<phrase> ... </phrase><object> two <patch_index_XXXX> location tokens (a 32 x 32 grid) </object> spans.
The connector and the decoder are trained in fp32 under fp16 autocast with a GradScaler (unscale, clip 1.0),
AdamW (foreach).
Phases: 0 the model; 1 three steps at batch 16 with 96-160 text tokens (right-padded, loss on the text);
2 greedy grounding generate() of 48 tokens for 8 images with the <grounding> prefix under fp16 autocast
(KV cache); 3 the optimizer dropped, the model cast to fp16 with `.half()`, beam search (4 beams) of 32
tokens for 6 images with a referring-expression prompt."""

import os

import torch
from transformers import Kosmos2Config, Kosmos2ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34405)
device = "cuda" if torch.cuda.is_available() else "cpu"
BOS, PAD, EOS = 0, 1, 2
IMAGE_START, IMAGE_END, PHRASE, PHRASE_END, OBJ, OBJ_END, GROUNDING = (
    64003,
    64004,
    64007,
    64008,
    64009,
    64010,
    64012,
)
PATCH_INDEX0, N_LOC, LATENTS = 64013, 1024, 64
if SMALL:
    V_LAYERS, V_W, V_FF, V_HEADS, IMG = 2, 64, 128, 4, 56
    T_LAYERS, T_W, T_FF, T_HEADS = 2, 64, 128, 4
    BS, TEXT, GEN_BS, GEN_NEW, BEAM_BS, BEAM_NEW = 4, (12, 20), 3, 4, 2, 4
else:
    V_LAYERS, V_W, V_FF, V_HEADS, IMG = 24, 1024, 4096, 16, 224
    T_LAYERS, T_W, T_FF, T_HEADS = 12, 1536, 6144, 24
    BS, TEXT, GEN_BS, GEN_NEW, BEAM_BS, BEAM_NEW = 16, (96, 160), 8, 48, 6, 32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = Kosmos2Config(
    vision_config=dict(
        hidden_size=V_W,
        intermediate_size=V_FF,
        num_hidden_layers=V_LAYERS,
        num_attention_heads=V_HEADS,
        image_size=IMG,
        patch_size=14,
    ),
    text_config=dict(
        embed_dim=T_W,
        ffn_dim=T_FF,
        layers=T_LAYERS,
        attention_heads=T_HEADS,
        vocab_size=65037,
        max_position_embeddings=2048,
    ),
    latent_query_num=LATENTS,
)
config._attn_implementation = "sdpa"
model = Kosmos2ForConditionalGeneration(config).to(device)
model.vision_model.requires_grad_(False)
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=5e-5, weight_decay=0.01, foreach=True)
scaler = torch.amp.GradScaler(device, init_scale=2.0**14, enabled=device == "cuda")
report("model")


def grounded_text(n):
    """Words with <phrase> .. </phrase><object><patch_index_tl><patch_index_br></object> spans."""
    out = []
    while len(out) < n:
        out += torch.randint(3, 64000, (int(torch.randint(3, 9, ())),)).tolist()
        if torch.rand(()) < 0.5:
            tl = int(torch.randint(0, N_LOC // 2, ()))
            br = tl + int(torch.randint(1, N_LOC // 2, ()))
            words = torch.randint(3, 64000, (int(torch.randint(1, 4, ())),)).tolist()
            out += [PHRASE, *words, PHRASE_END, OBJ, PATCH_INDEX0 + tl, PATCH_INDEX0 + br, OBJ_END]
    return torch.tensor(out[:n], dtype=torch.long)


def batch(n, lengths, left, prefix=()):
    rows = []
    for k in lengths:
        head = [BOS, IMAGE_START] + [PAD + 3] * LATENTS + [IMAGE_END, *prefix]
        rows.append(torch.cat([torch.tensor(head), grounded_text(k)]))
    width = max(len(r) for r in rows)
    ids = torch.full((n, width), PAD)
    mask = torch.zeros(n, width, dtype=torch.long)
    img_pos = torch.zeros(n, width, dtype=torch.long)
    for i, r in enumerate(rows):
        start = width - len(r) if left else 0
        ids[i, start : start + len(r)] = r
        mask[i, start : start + len(r)] = 1
        img_pos[i, start + 2 : start + 2 + LATENTS] = 1
    labels = ids.masked_fill((mask == 0) | (img_pos == 1), -100)
    inputs = {
        "pixel_values": torch.randn(n, 3, IMG, IMG).to(device),
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "image_embeds_position_mask": img_pos.to(device),
    }
    return inputs, labels.to(device)


model.train()
for step in range(3):
    lengths = torch.randint(TEXT[0], TEXT[1] + 1, (BS,)).tolist()
    inputs, labels = batch(BS, lengths, left=False)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        out = model(**inputs, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs, labels
report("train_fp16_autocast_gradscaler")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    inputs, _ = batch(GEN_BS, [0] * GEN_BS, left=True, prefix=(GROUNDING,))
    out = model.generate(
        **inputs, max_new_tokens=GEN_NEW, min_new_tokens=GEN_NEW, do_sample=False, use_cache=True
    )
    print("grounding", tuple(out.shape))
    del out, inputs
report("generate_grounding_greedy")

del opt, scaler, params
if device == "cuda":
    model.half()
with torch.inference_mode():
    inputs, _ = batch(BEAM_BS, [4, 7, 5, 6, 3, 8][:BEAM_BS], left=True, prefix=(GROUNDING, PHRASE))
    if device == "cuda":
        inputs["pixel_values"] = inputs["pixel_values"].half()
    out = model.generate(
        **inputs, num_beams=4, max_new_tokens=BEAM_NEW, min_new_tokens=BEAM_NEW, do_sample=False
    )
    print("referring beams", tuple(out.shape))
    del out, inputs
report("half_model_beam4")
