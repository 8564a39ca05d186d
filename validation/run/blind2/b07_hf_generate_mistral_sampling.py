"""HF generate() on a small MistralForCausalLM from MistralConfig (bf16): top-k/top-p sampling at batch 8,
fixed length via min_new_tokens, then a second greedy call with a longer prompt (needs transformers)."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, PROMPT, NEW = (
    (64, 128, 2, 4, 2, 256, 2, 8, 4) if os.environ.get("SMOKE") else (1024, 3584, 8, 16, 8, 32000, 8, 256, 48)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(1)

config = MistralConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=4096,
    sliding_window=None,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.eval()
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

prompt = torch.randint(3, VOCAB, (B, PROMPT), device=device)
sampled = model.generate(
    input_ids=prompt,
    attention_mask=torch.ones_like(prompt),
    do_sample=True,
    top_k=50,
    top_p=0.9,
    temperature=0.8,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
)
if device == "cuda":
    print(f"sampling peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
print(sampled.shape)

long_prompt = torch.randint(3, VOCAB, (B // 2, PROMPT * 4), device=device)
greedy = model.generate(
    input_ids=long_prompt,
    attention_mask=torch.ones_like(long_prompt),
    do_sample=False,
    max_new_tokens=NEW // 2,
    min_new_tokens=NEW // 2,
)
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(greedy.shape)
