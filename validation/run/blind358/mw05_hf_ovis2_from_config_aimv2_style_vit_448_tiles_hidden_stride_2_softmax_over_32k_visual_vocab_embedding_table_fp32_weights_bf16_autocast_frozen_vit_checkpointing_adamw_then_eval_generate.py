"""Fine-tuning an Ovis2-style model (transformers 5.17's `Ovis2ForConditionalGeneration`) from config: an
AIMv2-style vision transformer of 12 layers (d 1,024, 8 heads, RMSNorm, SwiGLU MLP 2,816, 448 x 448 tiles,
patch 14) whose 32 x 32 patches are merged 2 x 2 (hidden_stride 2) into 256 positions per tile, a visual
head (linear + LayerNorm) giving each position a softmax over a visual vocabulary of 32,768 "visual words"
that weights a visual embedding table (the probabilistic tokens multiplied into the table), five visual
indicator tokens, and a Qwen2 language model of 10 layers (d 1,536, 12 query and 2 KV heads, MLP 4,096,
vocabulary 151,936, tied). Inputs by hand as Ovis2's processor lays them out: an image of a 2 x 2 grid
is the global view then 4 tiles, 5 x 256 <IMG_ATOM> tokens between <IMG_START>, <IMG_GRID>, <IMG_COL>,
<IMG_ROW> and <IMG_END> indicator tokens, pixel_values (tiles, 3, 448, 448); labels -100 on the prompt.

fp32 weights under bf16 autocast; the vision transformer frozen, its visual head, the visual embedding
table and the whole language model trained with AdamW (foreach), non-reentrant gradient checkpointing.
Phases: 0 model in fp32; 1 3 steps of 2 samples with a 2 x 2 grid image (5 tiles) and 1,408 tokens;
2 2 steps of 4 samples with a single-tile image and 512 tokens; 3 evaluation: greedy `generate()`
under autocast and `no_grad` for 2 grid-image prompts, min_new_tokens == max_new_tokens == 32, the
optimizer state kept. Seeded; no sizes depend on values."""

import torch
from transformers import Ovis2Config, Ovis2ForConditionalGeneration

torch.manual_seed(3585)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Ovis2Config(
    vision_config=dict(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=8,
        image_size=448,
        patch_size=14,
        hidden_stride=2,
        vocab_size=32768,
        num_visual_indicator_tokens=5,
    ),
    text_config=dict(
        model_type="qwen2",
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=10,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
    hidden_size=1536,
    vocab_size=151936,
)
cfg._attn_implementation = "sdpa"
model = Ovis2ForConditionalGeneration(cfg).cuda()
model.model.vision_tower.transformer.requires_grad_(False)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
params = [p for p in model.parameters() if p.requires_grad]
print(f"trainable {sum(p.numel() for p in params):,} of {sum(p.numel() for p in model.parameters()):,}")
opt = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.0)
report("phase0 ovis2 fp32, vision transformer frozen")

ATOM = cfg.image_token_id
START, GRID, COL, ROW, END = cfg.visual_indicator_token_ids
PER_TILE = 256  # (448 / 14 / 2) ** 2


def image_tokens(rows, cols):
    toks = [START] + [ATOM] * PER_TILE + [GRID]
    if rows * cols > 1:
        for r in range(rows):
            for c in range(cols):
                toks += [ATOM] * PER_TILE
                if c < cols - 1:
                    toks.append(COL)
            if r < rows - 1:
                toks.append(ROW)
    toks.append(END)
    return torch.tensor(toks)


def sample(rows, cols, seq):
    img = image_tokens(rows, cols)
    ids = torch.randint(0, 151000, (seq,))
    ids[6 : 6 + len(img)] = img
    labels = ids.clone()
    labels[: 6 + len(img) + 20] = -100
    tiles = 1 + (rows * cols if rows * cols > 1 else 0)
    return ids, labels, tiles


def batch(n, rows, cols, seq):
    samples = [sample(rows, cols, seq) for _ in range(n)]
    ids = torch.stack([s[0] for s in samples]).cuda()
    labels = torch.stack([s[1] for s in samples]).cuda()
    pixels = torch.randn(sum(s[2] for s in samples), 3, 448, 448).cuda()
    return ids, labels, pixels


def train(steps, n, rows, cols, seq):
    model.train()
    for step in range(steps):
        ids, labels, pixels = batch(n, rows, cols, seq)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(
                input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels, labels=labels
            ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(step, round(loss.item(), 3))


train(3, 2, 2, 2, 1408)
report("phase1 3 steps, 2 samples with 2 x 2 grid images, 1,408 tokens")

train(2, 4, 1, 1, 512)
report("phase2 2 steps, 4 samples with single-tile images, 512 tokens")

model.eval()
ids, _, pixels = batch(2, 2, 2, 6 + len(image_tokens(2, 2)) + 40)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels,
        max_new_tokens=32,
        min_new_tokens=32,
        do_sample=False,
        pad_token_id=151643,
    )
print("generated", tuple(out.shape))
report("phase3 eval generate, 2 grid-image prompts, 32 new tokens, optimizer kept")
