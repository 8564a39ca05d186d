"""Attention maps for analysis: an HF GPTNeoXForCausalLM from config (2048 wide, 16 layers) in fp16
with eager attention, one forward under no_grad with output_attentions=True and
output_hidden_states=True at batch 4 and 1024 tokens, every layer's probabilities kept, then the
mean attention entropy per layer computed in float32; 2 phases (the forward, then the analysis)."""

import os

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4506)
if SMALL:
    config = GPTNeoXConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    B, S = 2, 16
else:
    config = GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=16,
        max_position_embeddings=2048,
    )
    B, S = 4, 1024
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = GPTNeoXForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
if device == "cuda":
    print(f"forward peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    entropy = [-(a.float() * a.float().clamp_min(1e-9).log()).sum(-1).mean() for a in out.attentions]
    summary = torch.stack(entropy)
if device == "cuda":
    print(f"analysis peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
