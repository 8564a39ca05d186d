"""Full fine-tuning of an HF Olmo2ForCausalLM from config (q/k RMS norms over the whole
projection, post-norm residual blocks, 2048 wide, 8 layers) in pure bf16 with AdamW (fused),
gradient clipping, batch 8 at 1024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import Olmo2Config, Olmo2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4306)
if SMALL:
    config = Olmo2Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    B, S = 2, 16
else:
    config = Olmo2Config(
        vocab_size=50304,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=4096,
    )
    B, S = 8, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Olmo2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
