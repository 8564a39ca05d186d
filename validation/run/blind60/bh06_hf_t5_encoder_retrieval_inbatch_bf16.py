"""A dual-encoder retriever on HF T5EncoderModel from a T5Config (T5-base width, 12 layers, relative
position buckets): queries of 64 tokens and passages of 256 tokens at batch 128, mean pooling over
the attention mask, in-batch negatives with a learnable temperature, cross-entropy both ways;
gradient checkpointing on, bf16 autocast, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import T5Config, T5EncoderModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6006)
if SMALL:
    config = T5Config(vocab_size=300, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4)
    B, LQ, LP = 4, 8, 16
else:
    config = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)
    B, LQ, LP = 128, 64, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
encoder = T5EncoderModel(config).to(device)
encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
log_temp = torch.nn.Parameter(torch.tensor(2.996, device=device))
optimizer = torch.optim.AdamW([*encoder.parameters(), log_temp], lr=1e-4)


def embed(ids, mask):
    out = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(out.dtype)
    return F.normalize((out * m).sum(1) / m.sum(1), dim=-1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    q = torch.randint(2, config.vocab_size, (B, LQ), device=device)
    p = torch.randint(2, config.vocab_size, (B, LP), device=device)
    qm = torch.ones_like(q)
    pm = (
        torch.arange(LP, device=device)[None, :] < torch.randint(LP // 2, LP + 1, (B, 1), device=device)
    ).long()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        scores = embed(q, qm).float() @ embed(p, pm).float().t() * log_temp.exp()
    target = torch.arange(B, device=device)
    loss = (F.cross_entropy(scores, target) + F.cross_entropy(scores.t(), target)) / 2
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del q, p, qm, pm, scores, target, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
