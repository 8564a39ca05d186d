"""HF ElectraForPreTraining (the replaced-token discriminator) from an ElectraConfig (electra-base
discriminator sizes: 768 wide, 12 layers), fp32, binary labels per token, batch 16 at 512 tokens,
AdamW (foreach) with clip_grad_norm_, 2 steps; 3 phases."""

import os

import torch
from transformers import ElectraConfig, ElectraForPreTraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2702)
if SMALL:
    config = ElectraConfig(
        vocab_size=128,
        embedding_size=16,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    B, S = 2, 16
else:
    config = ElectraConfig(
        embedding_size=768, hidden_size=768, intermediate_size=3072, num_attention_heads=12
    )
    B, S = 16, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ElectraForPreTraining(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    labels = torch.randint(0, 2, (B, S), device=device)
    mask = torch.ones(B, S, dtype=torch.long, device=device)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, mask, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
