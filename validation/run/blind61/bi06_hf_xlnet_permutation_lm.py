"""HF XLNetLMHeadModel from an XLNetConfig (768 wide, 12 layers, two-stream relative attention by
einsum), trained on the permutation-LM objective: a random factorisation order per sequence as a
(B, L, L) perm_mask and the last 85 tokens predicted through a target_mapping; batch 4 of 512
tokens, fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import XLNetConfig, XLNetLMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6106)
if SMALL:
    config = XLNetConfig(vocab_size=100, d_model=32, n_layer=2, n_head=2, d_inner=64)
    B, L, P = 2, 16, 4
else:
    config = XLNetConfig(vocab_size=32000, d_model=768, n_layer=12, n_head=12, d_inner=3072)
    B, L, P = 4, 512, 85
device = "cuda" if torch.cuda.is_available() else "cpu"
model = XLNetLMHeadModel(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    order = torch.argsort(torch.rand(B, L, device=device), dim=1)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(L, device=device).expand(B, L))
    perm_mask = (rank[:, None, :] >= rank[:, :, None]).float()
    perm_mask[:, :, : L - P] = 0.0
    target_mapping = torch.zeros(B, P, L, device=device)
    target_mapping[:, torch.arange(P), torch.arange(L - P, L)] = 1.0
    out = model(
        input_ids=ids, perm_mask=perm_mask, target_mapping=target_mapping, labels=ids[:, L - P :].contiguous()
    )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, order, rank, perm_mask, target_mapping, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
