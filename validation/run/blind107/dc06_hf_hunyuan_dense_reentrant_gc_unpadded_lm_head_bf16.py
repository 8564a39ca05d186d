"""HF HunYuan-V1 dense (query/key norms, grouped-query attention) built from a config (12 layers of
1024 wide, 16 heads, 4 KV heads, a 64,000-symbol vocabulary) trained in bf16 with transformers'
gradient checkpointing in its reentrant form (use_reentrant=True), on right-padded batches of 8
documents of host-given lengths: the base model's last hidden states are gathered at the real tokens
only (a boolean index by the host-built attention mask) before the LM head and cross entropy, so
no logits are made for padding; foreach AdamW with gradient clipping, 3 steps, then a no_grad
scoring pass of 12 other lengths; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import HunYuanDenseV1Config, HunYuanDenseV1ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10706)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 64000
TRAIN = (
    [[30, 12, 25], [8, 31, 20], [17, 5, 29]]
    if SMALL
    else [
        [1024, 731, 512, 977, 300, 866, 145, 640],
        [998, 1024, 77, 610, 455, 812, 233, 1001],
        [512, 512, 960, 128, 1024, 700, 350, 44],
    ]
)
EVAL = [9, 16, 3] if SMALL else [1500, 1211, 90, 640, 2048, 333, 1777, 980, 12, 1200, 1999, 705]
cfg = HunYuanDenseV1Config(
    vocab_size=V,
    hidden_size=64 if SMALL else 1024,
    intermediate_size=128 if SMALL else 2816,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 16,
    num_key_value_heads=2 if SMALL else 4,
    head_dim=16 if SMALL else 64,
    max_position_embeddings=4096,
    use_cache=False,
)
model = HunYuanDenseV1ForCausalLM(cfg).to(device, torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, foreach=True)


def padded(lengths):
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, V, (n,))
        mask[i, :n] = True
    return ids.to(device), mask.to(device)


def lm_loss(ids, mask):
    hidden = model.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    keep = mask[:, 1:]
    h = hidden[:, :-1][keep]
    logits = model.lm_head(h).float()
    return F.cross_entropy(logits, ids[:, 1:][keep])


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step, lengths in enumerate(TRAIN):
    ids, mask = padded(lengths)
    loss = lm_loss(ids, mask)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, loss
model.eval()
with torch.no_grad():
    ids, mask = padded(EVAL)
    loss = lm_loss(ids, mask)
if device == "cuda":
    print(
        f"eval {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
