"""Captioning with HF BLIP-2 built from a config: a ViT (12 layers of 768 wide, 224-pixel images
in 14-pixel patches), a 6-layer Q-Former with 32 query tokens and cross-attention every second
layer, an OPT decoder (12 layers of 1024 wide, a 50,272-symbol vocabulary), all fp16. Images are
made in pinned host memory and copied up with non_blocking; the prompt is the 32 image tokens, BOS
and 8 text tokens. First under no_grad: beam search (3 beams) of 30 tokens for 8 images with
bad_words_ids and a repetition penalty; then under inference_mode: nucleus sampling (top-p 0.9, a
fixed seed) of 2 captions each for 16 images; 3 phases."""

import os

import torch
from transformers import Blip2Config, Blip2ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11006)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 600 if SMALL else 50272
IMG = V - 7
Q = 4 if SMALL else 32
cfg = Blip2Config(
    vision_config=dict(
        hidden_size=64 if SMALL else 768,
        intermediate_size=128 if SMALL else 3072,
        num_hidden_layers=2 if SMALL else 12,
        num_attention_heads=4 if SMALL else 12,
        image_size=56 if SMALL else 224,
        patch_size=14,
    ),
    qformer_config=dict(
        hidden_size=64 if SMALL else 768,
        num_hidden_layers=2 if SMALL else 6,
        num_attention_heads=4 if SMALL else 12,
        intermediate_size=128 if SMALL else 3072,
        encoder_hidden_size=64 if SMALL else 768,
        vocab_size=V,
    ),
    text_config=dict(
        model_type="opt",
        vocab_size=V,
        hidden_size=64 if SMALL else 1024,
        ffn_dim=128 if SMALL else 4096,
        num_hidden_layers=2 if SMALL else 12,
        num_attention_heads=4 if SMALL else 16,
        word_embed_proj_dim=64 if SMALL else 1024,
        max_position_embeddings=2048,
        bos_token_id=2,
        eos_token_id=2,
        pad_token_id=1,
    ),
    num_query_tokens=Q,
    image_token_index=IMG,
)
model = Blip2ForConditionalGeneration(cfg).to(device, torch.float16).eval()
S = cfg.vision_config.image_size


def images(n):
    host = torch.randn(n, 3, S, S, pin_memory=device == "cuda")
    host.sub_(0.45).div_(0.27)
    return host.to(device, non_blocking=True).half()


def prompt(n):
    text = torch.randint(10, V - 10, (n, 8))
    head = torch.tensor([IMG] * Q + [2]).expand(n, -1)
    return torch.cat([head, text], dim=1).to(device, non_blocking=True)


N = 5 if SMALL else 30
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    b = 2 if SMALL else 8
    out = model.generate(
        pixel_values=images(b),
        input_ids=prompt(b),
        num_beams=3,
        bad_words_ids=[[17], [300, 301], [42, 43, 44]],
        repetition_penalty=1.3,
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
    )
if device == "cuda":
    print(
        f"beam3 {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del out
with torch.inference_mode():
    b = 3 if SMALL else 16
    torch.manual_seed(5)
    out = model.generate(
        pixel_values=images(b),
        input_ids=prompt(b),
        do_sample=True,
        top_p=0.9,
        top_k=0,
        num_return_sequences=2,
        max_new_tokens=N,
        min_new_tokens=N,
    )
if device == "cuda":
    print(
        f"sample {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
