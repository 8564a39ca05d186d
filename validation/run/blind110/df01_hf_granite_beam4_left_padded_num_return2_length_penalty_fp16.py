"""Beam search with HF Granite built from a config (embedding, attention, residual and logit
multipliers; 12 layers of 1536 wide, 12 heads with 4 KV heads, a 49,152-symbol vocabulary) in fp16
under no_grad: a left-padded batch of 6 prompts of host-given lengths (up to 700 tokens), 4 beams,
2 returned sequences each, length_penalty 1.2, early stopping, 40 new tokens; then the same model
under inference_mode with 8 beams for one 1,500-token prompt and a no_repeat_ngram_size of 3;
3 phases."""

import os

import torch
from transformers import GraniteConfig, GraniteForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11001)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 49152
cfg = GraniteConfig(
    vocab_size=V,
    hidden_size=64 if SMALL else 1536,
    intermediate_size=128 if SMALL else 4096,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 12,
    num_key_value_heads=2 if SMALL else 4,
    embedding_multiplier=12.0,
    attention_multiplier=0.015625,
    residual_multiplier=0.22,
    logits_scaling=6.0,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = GraniteForCausalLM(cfg).to(device, torch.float16).eval()
LENS = [20, 9, 31, 14, 5, 26] if SMALL else [700, 412, 655, 90, 533, 301]
N = 5 if SMALL else 40
width = max(LENS)
ids = torch.zeros(len(LENS), width, dtype=torch.long)
mask = torch.zeros(len(LENS), width, dtype=torch.long)
for i, n in enumerate(LENS):
    ids[i, width - n :] = torch.randint(3, V, (n,))
    mask[i, width - n :] = 1
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        num_beams=4,
        num_return_sequences=2,
        length_penalty=1.2,
        early_stopping=True,
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"beams4 {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del out
with torch.inference_mode():
    prompt = torch.randint(3, V, (1, 40 if SMALL else 1500), device=device)
    out = model.generate(
        prompt,
        num_beams=8,
        no_repeat_ngram_size=3,
        max_new_tokens=N,
        min_new_tokens=N,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"beams8 {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
