"""HF LlamaForCausalLM from a LlamaConfig (2048 wide, 12 layers, GQA 16/8), bf16 weights, sampled
generate() (temperature 0.8, top-k 50, top-p 0.95) of 128 new tokens (min_new_tokens=128) after a
1,024-token prompt at batch 8, then a second call with 4 return sequences per prompt at batch 2;
3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5606)
if SMALL:
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    B, PROMPT, NEW = 2, 8, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
    )
    B, PROMPT, NEW = 8, 1024, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
sample = {"do_sample": True, "temperature": 0.8, "top_k": 50, "top_p": 0.95}
for batch, returns in ((B, 1), (2, 4)):
    ids = torch.randint(0, config.vocab_size, (batch, PROMPT), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            num_return_sequences=returns,
            pad_token_id=0,
            **sample,
        )
    del ids, out
    if device == "cuda":
        print(
            f"batch {batch} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
