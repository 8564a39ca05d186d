"""HF Lfm2ForCausalLM (Liquid's hybrid: gated short-convolution blocks with 6 of 16 layers full
GQA attention, the convolution on its slow path without causal-conv1d) built from its config,
1,024 wide, a 65,536 vocabulary, tied embeddings, bf16 weights, 4 x 1,024 tokens, fused AdamW with
gradient clipping, 3 steps; 4 phases."""

import os

import torch
from transformers import Lfm2Config, Lfm2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9003)
if SMALL:
    config = Lfm2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        full_attn_idxs=[1, 3],
        block_multiple_of=16,
        max_position_embeddings=256,
    )
    B, L = 2, 16
else:
    config = Lfm2Config(
        vocab_size=65536,
        hidden_size=1024,
        intermediate_size=6656,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        full_attn_idxs=[2, 5, 8, 10, 12, 14],
        max_position_embeddings=4096,
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Lfm2ForCausalLM(config).to(device=device, dtype=dtype)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
