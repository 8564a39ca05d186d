"""HF Gemma3ForCausalLM from a Gemma3TextConfig (1152 wide, 12 layers, 4 heads of 256, 1 key-value head,
sliding window 512 on five layers of six, 32,000 vocabulary), bf16 weights, gradient checkpointing,
AdamW(fused=True), batch 2 at 2048 tokens, 2 steps."""

import os

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1806)
if SMALL:
    config = Gemma3TextConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=8,
        max_position_embeddings=128,
    )
    BATCH, SEQ = 2, 16
else:
    config = Gemma3TextConfig(
        vocab_size=32000,
        hidden_size=1152,
        intermediate_size=6912,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        sliding_window=512,
        max_position_embeddings=8192,
    )
    BATCH, SEQ = 2, 2048
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Gemma3ForCausalLM(config).to(device=device, dtype=torch.bfloat16).train()
model.gradient_checkpointing_enable()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
