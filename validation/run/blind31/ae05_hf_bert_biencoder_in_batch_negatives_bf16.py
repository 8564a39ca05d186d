"""A sentence-embedding bi-encoder as sentence-transformers trains it: one HF BertModel (768 wide,
6 layers) in bf16 encodes queries (64 tokens) and passages (256 tokens) with attention masks, mean
pooling over the mask, normalized embeddings, a scaled query-by-passage similarity matrix and
cross-entropy over in-batch negatives; sdpa attention, batch 64, AdamW (foreach), 2 steps; 3
phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3105)
if SMALL:
    config = BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    B, SQ, SP = 4, 8, 16
else:
    config = BertConfig(
        vocab_size=30522, hidden_size=768, num_hidden_layers=6, num_attention_heads=12, intermediate_size=3072
    )
    B, SQ, SP = 64, 64, 256
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertModel(config, add_pooling_layer=False).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)


def embed(ids, mask):
    h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(h.dtype)
    return F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    q = torch.randint(1, config.vocab_size, (B, SQ), device=device)
    p = torch.randint(1, config.vocab_size, (B, SP), device=device)
    qm = torch.ones_like(q)
    qm[:, SQ // 2 :] = 0
    pm = torch.ones_like(p)
    pm[:, SP - SP // 4 :] = 0
    scores = embed(q, qm) @ embed(p, pm).T * 20.0
    loss = F.cross_entropy(scores.float(), torch.arange(B, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del q, p, qm, pm, scores, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
