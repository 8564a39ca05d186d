"""HF Qwen3ForCausalLM from a Qwen3Config (1,024 wide, 16 layers, 4 KV heads, QK norms, 151k
vocabulary) in bf16 sampling with no_repeat_ngram_size=3 and top_k 50, 2 prompts of 1,024 tokens,
exactly 200 new tokens; 2 phases."""

import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7206)
if SMALL:
    config = Qwen3Config(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    B, L, T = 2, 8, 4
else:
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=128,
    )
    B, L, T = 2, 1024, 200
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(0, config.vocab_size, (B, L), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    do_sample=True,
    top_k=50,
    no_repeat_ngram_size=3,
    max_new_tokens=T,
    min_new_tokens=T,
    eos_token_id=None,
    pad_token_id=0,
)
print(f"generated {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
