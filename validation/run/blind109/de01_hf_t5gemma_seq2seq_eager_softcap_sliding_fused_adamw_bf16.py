"""HF T5Gemma (a Gemma-2 encoder-decoder: sliding and global layers, attention and final logit
soft-capping, so eager attention) built from a config: 6 encoder and 6 decoder layers of 768 wide,
12 heads of 64 (4 KV heads), a 32,000-symbol vocabulary; bf16 weights under fused AdamW on
right-padded source batches of 8 (lengths from the host, 512 at most) and 128-token targets with
padding labels -100, 3 steps, then a no_grad loss over 16 longer sources; 5 phases."""

import os

import torch
from transformers import T5GemmaConfig, T5GemmaForConditionalGeneration, T5GemmaModuleConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10901)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 32000
module = dict(
    vocab_size=V,
    hidden_size=64 if SMALL else 768,
    intermediate_size=128 if SMALL else 2048,
    num_hidden_layers=2 if SMALL else 6,
    num_attention_heads=4 if SMALL else 12,
    num_key_value_heads=2 if SMALL else 4,
    head_dim=16 if SMALL else 64,
    query_pre_attn_scalar=16 if SMALL else 64,
    sliding_window=16 if SMALL else 256,
    max_position_embeddings=2048,
)
cfg = T5GemmaConfig(
    encoder=T5GemmaModuleConfig(**module),
    decoder=T5GemmaModuleConfig(**module),
    vocab_size=V,
    dropout_rate=0.1,
)
cfg._attn_implementation = "eager"
model = T5GemmaForConditionalGeneration(cfg).to(device, torch.bfloat16)
model.config.use_cache = False
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device == "cuda")
SRC = (
    [[30, 12, 25, 8], [31, 20, 17, 5], [29, 32, 9, 14]]
    if SMALL
    else [
        [512, 311, 490, 128, 77, 402, 256, 333],
        [205, 512, 498, 61, 444, 300, 128, 190],
        [100, 380, 512, 512, 222, 45, 417, 300],
    ]
)
TGT = 12 if SMALL else 128


def batch(lengths, tgt):
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    labels = torch.randint(3, V, (len(lengths), tgt))
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, V, (n,))
        mask[i, :n] = 1
        labels[i, max(4, tgt * n // width) :] = -100
    return ids.to(device), mask.to(device), labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step, lengths in enumerate(SRC):
    ids, mask, labels = batch(lengths, TGT)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
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
    del ids, mask, labels, loss
model.eval()
with torch.no_grad():
    ids, mask, labels = batch([40, 33, 21, 9] if SMALL else [900, 1024, 640, 1000] * 4, 2 * TGT)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
if device == "cuda":
    print(
        f"eval {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
