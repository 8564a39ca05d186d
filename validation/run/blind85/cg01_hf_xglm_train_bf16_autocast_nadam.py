"""HF XGLMForCausalLM (sinusoidal positions, scaled embeddings, pre-norm decoder) built from its
config, 12 layers, 1,024 wide, a 50,000 vocabulary, fp32 weights under bf16 autocast, 4 x 768
tokens, NAdam with decoupled weight decay, 3 optimizer steps; 4 phases."""

import os

import torch
from transformers import XGLMConfig, XGLMForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8501)
if SMALL:
    config = XGLMConfig(
        vocab_size=128, d_model=32, ffn_dim=64, num_layers=2, attention_heads=4, max_position_embeddings=64
    )
    B, L = 2, 16
else:
    config = XGLMConfig(
        vocab_size=50000,
        d_model=1024,
        ffn_dim=4096,
        num_layers=12,
        attention_heads=16,
        max_position_embeddings=2048,
    )
    B, L = 4, 768
config.dropout = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = XGLMForCausalLM(config).to(device)
model.train()
optimizer = torch.optim.NAdam(model.parameters(), lr=2e-4, weight_decay=0.01, decoupled_weight_decay=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(3, config.vocab_size, (B, L), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, loss
