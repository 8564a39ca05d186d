"""HF DebertaV2ForTokenClassification from a DebertaV2Config (768 wide, 6 layers, relative attention with
position buckets, 13 labels), fp32, AdamW (foreach) with a linear warmup schedule, gradient clipping,
batch 8 x 384, 3 steps."""

import os

import torch
from transformers import DebertaV2Config, DebertaV2ForTokenClassification, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1302)
if SMALL:
    config = DebertaV2Config(vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=64, relative_attention=True,
                             position_buckets=16, pos_att_type=["p2c", "c2p"], num_labels=13)
    BATCH, SEQ = 2, 16
else:
    config = DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
                             intermediate_size=3072, max_position_embeddings=512, relative_attention=True,
                             position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
                             pos_att_type=["p2c", "c2p"], num_labels=13)
    BATCH, SEQ = 8, 384
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DebertaV2ForTokenClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
scheduler = get_linear_schedule_with_warmup(optimizer, 10, 100)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long, device=device)
    labels = torch.randint(0, 13, (BATCH, SEQ), device=device)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
