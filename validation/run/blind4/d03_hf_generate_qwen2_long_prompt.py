"""HF generate() on a small Qwen2ForCausalLM in bf16: greedy, batch 4, a 1536-token prompt and 32 new
tokens with the dynamic cache (needs transformers)."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, PROMPT, NEW = (
    (64, 128, 2, 4, 2, 512, 2, 16, 4)
    if os.environ.get("SMOKE")
    else (896, 4864, 12, 14, 2, 50000, 4, 1536, 32)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(43)
config = Qwen2Config(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(1, VOCAB, (B, PROMPT), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    do_sample=False,
    pad_token_id=0,
)
if device == "cuda":
    print(f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
