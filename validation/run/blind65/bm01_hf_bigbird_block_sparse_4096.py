"""HF BigBirdForSequenceClassification from a BigBirdConfig (768 wide, 12 layers, block-sparse
attention: blocks of 64, 3 random blocks, global first and last blocks) fine-tuned on 4,096-token
documents at batch 4 in fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import BigBirdConfig, BigBirdForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6501)
if SMALL:
    config = BigBirdConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=1024,
        block_size=16,
        num_random_blocks=2,
        num_labels=3,
    )
    B, L = 2, 512
else:
    config = BigBirdConfig(max_position_embeddings=4096, num_labels=3)
    B, L = 4, 4096
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BigBirdForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
