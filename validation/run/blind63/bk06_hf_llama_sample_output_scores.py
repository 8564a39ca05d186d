"""HF LlamaForCausalLM from a LlamaConfig (1.1B sizes: 2,048 wide, 22 layers, 4 KV heads), bf16,
generate() with top-k sampling and a repetition penalty, returning a dict with every step's scores
(output_scores, return_dict_in_generate): batch 8 of 512-token prompts, 128 new tokens, twice; 3
phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6306)
if SMALL:
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    B, P, N = 2, 8, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
    )
    B, P, N = 8, 512, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    prompt = torch.randint(0, config.vocab_size, (B, P), device=device)
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=True,
        top_k=50,
        repetition_penalty=1.2,
        max_new_tokens=N,
        min_new_tokens=N,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    assert len(out.scores) == N
    del prompt, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
