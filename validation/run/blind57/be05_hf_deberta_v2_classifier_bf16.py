"""HF DebertaV2ForSequenceClassification from a DebertaV2Config (768 wide, 12 layers, relative
position buckets 256, disentangled c2p/p2c attention) fine-tuned for 3 classes on 384-token
sequences with padding masks at batch 16 under bf16 autocast, AdamW with a linear warmup schedule
and gradient clipping, 3 steps; then evaluation of 64 sequences under inference_mode; 5 phases."""

import os

import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5705)
if SMALL:
    config = DebertaV2Config(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["p2c", "c2p"],
        num_labels=3,
    )
    B, L = 2, 16
else:
    config = DebertaV2Config(
        vocab_size=128100,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        relative_attention=True,
        position_buckets=256,
        pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        num_labels=3,
    )
    B, L = 16, 384
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DebertaV2ForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
lengths = torch.tensor([L - 17 * i % (L // 2) for i in range(B)])
mask = (torch.arange(L)[None, :] < lengths[:, None]).long().to(device)
for step in range(3):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device) * mask
    labels = torch.randint(0, 3, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    ids = torch.randint(5, config.vocab_size, (64, L), device=device)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
if device == "cuda":
    print(f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}")
