"""HF DebertaV2ForSequenceClassification from a DebertaV2Config (deberta-v3-base sizes: 768 wide,
12 layers, relative attention with 256 position buckets, c2p and p2c), fp32, batch 16 at 256 tokens,
3 labels, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2905)
common = dict(
    relative_attention=True,
    pos_att_type=["p2c", "c2p"],
    position_buckets=256,
    norm_rel_ebd="layer_norm",
    share_att_key=True,
    max_relative_positions=-1,
    position_biased_input=False,
    num_labels=3,
)
if SMALL:
    config = DebertaV2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=64,
        **{**common, "position_buckets": 8},
    )
    B, S = 2, 16
else:
    config = DebertaV2Config(vocab_size=128100, max_position_embeddings=512, **common)
    B, S = 16, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DebertaV2ForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    labels = torch.randint(0, 3, (B,), device=device)
    loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
