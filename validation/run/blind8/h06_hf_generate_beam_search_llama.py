"""HF `generate()` with beam search (num_beams=4, length_penalty 1.0, fixed length: min_new_tokens ==
max_new_tokens == 48) on a LlamaForCausalLM from a small LlamaConfig (1024 wide, 8 layers, GQA 16/4,
32000 vocab), bf16, batch 4 of 384-token prompts; then greedy at batch 16 for comparison."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(806)
if SMALL:
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    PROMPT, NEW = 16, 4
else:
    config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
    PROMPT, NEW = 384, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(3, config.vocab_size, (4, PROMPT), device=device)
out = model.generate(ids, num_beams=4, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
if device == "cuda":
    print(f"beam peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
ids = torch.randint(3, config.vocab_size, (16, PROMPT), device=device)
out = model.generate(ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
