"""HF LlamaForCausalLM from a LlamaConfig (2,048 wide, 16 layers, 8 KV heads, 32k vocabulary) in bf16
sampling with min_p 0.05, temperature 0.8 and a repetition penalty of 1.2, 2 prompts of 512 tokens, 256
new tokens each (no end-of-sequence token, so every step runs), the default dynamic cache; 2 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6705)
if SMALL:
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    B, L, T = 2, 8, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, L, T = 2, 512, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(1, config.vocab_size, (B, L), device=device)
out = model.generate(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    do_sample=True,
    min_p=0.05,
    temperature=0.8,
    top_k=0,
    repetition_penalty=1.2,
    max_new_tokens=T,
    min_new_tokens=T,
    eos_token_id=None,
    pad_token_id=0,
)
print(f"generated {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
