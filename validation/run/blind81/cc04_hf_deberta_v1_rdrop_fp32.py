"""HF DebertaForSequenceClassification (DeBERTa v1: disentangled content-to-position and
position-to-content attention) built from its config, 12 layers, 768 wide, fp32, fine-tuned with
R-Drop: two dropout passes of each batch, cross-entropy on both plus a symmetric KL between them,
AdamW, batch 16 of 256 tokens with padding, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import DebertaConfig, DebertaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8104)
if SMALL:
    config = DebertaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        relative_attention=True,
        max_relative_positions=-1,
        pos_att_type=["c2p", "p2c"],
        position_biased_input=False,
        num_labels=3,
    )
    B, L = 2, 16
else:
    config = DebertaConfig(
        vocab_size=50265,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=512,
        relative_attention=True,
        max_relative_positions=-1,
        pos_att_type=["c2p", "p2c"],
        position_biased_input=False,
        num_labels=3,
    )
    B, L = 16, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DebertaForSequenceClassification(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    lengths = torch.randint(L // 2, L + 1, (B,), device=device)
    mask = (torch.arange(L, device=device)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    y = torch.randint(0, 3, (B,), device=device)
    a = model(input_ids=ids, attention_mask=mask).logits
    b = model(input_ids=ids, attention_mask=mask).logits
    la, lb = F.log_softmax(a, -1), F.log_softmax(b, -1)
    kl = F.kl_div(la, lb, log_target=True, reduction="batchmean") + F.kl_div(
        lb, la, log_target=True, reduction="batchmean"
    )
    loss = 0.5 * (F.cross_entropy(a, y) + F.cross_entropy(b, y)) + 2.0 * kl
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, lengths, mask, y, a, b, la, lb, kl, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
