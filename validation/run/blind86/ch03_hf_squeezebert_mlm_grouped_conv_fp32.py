"""HF SqueezeBertForMaskedLM (attention and feed-forward as grouped 1x1 Conv1d, 4 groups) built from
its config, 12 layers, 768 wide, fp32, 16 x 256 tokens with 15% of them masked (labels -100
elsewhere), Adam with weight decay, 3 steps; 4 phases."""

import os

import torch
from transformers import SqueezeBertConfig, SqueezeBertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8603)
if SMALL:
    config = SqueezeBertConfig(
        vocab_size=128,
        hidden_size=32,
        embedding_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = SqueezeBertConfig()
    B, L = 16, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SqueezeBertForMaskedLM(config).to(device)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    mask = torch.rand(B, L, device=device) < 0.15
    labels = torch.where(mask, ids, torch.full_like(ids, -100))
    inputs = ids.masked_fill(mask, 4)
    attn = torch.ones(B, L, dtype=torch.long, device=device)
    loss = model(input_ids=inputs, attention_mask=attn, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, labels, inputs, attn, loss
