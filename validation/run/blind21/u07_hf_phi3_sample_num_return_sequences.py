"""HF Phi3ForCausalLM from a Phi3Config (1024 wide, 8 layers, 16 heads, fused qkv and gate_up
projections, 32,064 vocabulary), bf16 weights, sampling generate() (top_k 50, temperature 0.8) with
num_return_sequences=3 on a batch of 2 prompts of 256 tokens, 128 new tokens (min_new_tokens equal);
1 phase."""

import os

import torch
from transformers import Phi3Config, Phi3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2107)
if SMALL:
    config = Phi3Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    B, T, NEW = 2, 12, 4
else:
    config = Phi3Config(
        vocab_size=32064,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=4096,
        pad_token_id=0,
    )
    B, T, NEW = 2, 256, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Phi3ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(1, config.vocab_size, (B, T), device=device)
with torch.no_grad():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=True,
        top_k=50,
        temperature=0.8,
        num_return_sequences=3,
        pad_token_id=0,
    )
assert out.shape == (3 * B, T + NEW)
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
