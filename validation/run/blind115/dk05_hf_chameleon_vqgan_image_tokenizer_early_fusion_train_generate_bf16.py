"""HF Chameleon (ChameleonForConditionalGeneration from config, bf16 weights, sdpa): early fusion,
where a VQGAN encoder (512 px, 128 base channels x (1, 1, 2, 2, 4), two residual blocks a level,
8,192 codes of 256) turns each image into 1,024 discrete tokens that replace the <image> placeholders
of an 8-layer, 2048-wide decoder with QK-norm (vocabulary 65,536, the image codes mapped to BPE ids
by the vocabulary map). Batch 4 of one image and 256 text tokens, the VQGAN frozen, the decoder
trained with foreach AdamW (weight decay 0.1), 2 steps; then greedy generate() of 16 tokens with the
images, KV cache; 4 phases."""

import os

import torch
from transformers import ChameleonConfig, ChameleonForConditionalGeneration, ChameleonVQVAEConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11505)
device = "cuda" if torch.cuda.is_available() else "cpu"
CODES, IMAGE = 8192, 8711
if SMALL:
    vq = ChameleonVQVAEConfig(
        embed_dim=32,
        num_embeddings=CODES,
        latent_channels=32,
        resolution=64,
        base_channels=32,
        channel_multiplier=[1, 2, 2],
    )
    B, PX, TXT, NEW, HIDDEN, LAYERS, HEADS, INTER = 2, 64, 8, 4, 64, 2, 4, 128
else:
    vq = ChameleonVQVAEConfig(
        embed_dim=256,
        num_embeddings=CODES,
        latent_channels=256,
        resolution=512,
        base_channels=128,
        channel_multiplier=[1, 1, 2, 2, 4],
    )
    B, PX, TXT, NEW, HIDDEN, LAYERS, HEADS, INTER = 4, 512, 256, 16, 2048, 8, 16, 5632
vocab_map = {"<image>": IMAGE}
for code in range(CODES):
    vocab_map["IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"] = 4 + code
config = ChameleonConfig(
    vocab_size=65536,
    hidden_size=HIDDEN,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=HEADS,
    vq_config=vq,
    vocabulary_map=vocab_map,
    image_token_id=IMAGE,
)
config._attn_implementation = "sdpa"
model = ChameleonForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
model.model.vqmodel.requires_grad_(False)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5, weight_decay=0.1)
TOKENS = (PX // 2 ** (len(vq.channel_multiplier) - 1)) ** 2
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(n, text):
    image = torch.full((n, TOKENS), IMAGE, device=device)
    words = torch.randint(8800, 65000, (n, text), device=device)
    bos = torch.ones(n, 1, dtype=torch.long, device=device)
    ids = torch.cat([bos, image, words], dim=1)
    labels = torch.cat([torch.full_like(bos, -100), torch.full_like(image, -100), words], dim=1)
    pixels = torch.randn(n, 3, PX, PX, device=device, dtype=torch.bfloat16)
    return ids, labels, pixels


model.train()
for step in range(2):
    ids, labels, pixels = make_batch(B, TXT)
    out = model(input_ids=ids, pixel_values=pixels, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids, labels, pixels
model.eval()
ids, _, pixels = make_batch(2, TXT // 4)
with torch.no_grad():
    gen = model.generate(
        input_ids=ids, pixel_values=pixels, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False
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
