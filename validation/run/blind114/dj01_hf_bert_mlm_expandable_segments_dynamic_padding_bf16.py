"""Masked-language-model pretraining of HF BERT-base (from BertConfig) with expandable segments
(PYTORCH_CUDA_ALLOC_CONF set by the script before torch is imported) on dynamically padded batches:
each step's 48 sequences have lengths drawn on the GPU and are padded to the longest of the step
(up to 128, 512, 256, 384 tokens), 15% of the real tokens masked (80/10/10), bf16 autocast, fused
AdamW, 4 steps; then empty_cache and an evaluation of 96 sequences of 512 under no_grad; 6 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11401)
B, BE = (4, 8) if SMALL else (48, 96)
LENS = [32, 64, 48, 40] if SMALL else [128, 512, 256, 384]
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = BertConfig(
    vocab_size=30522,
    hidden_size=128 if SMALL else 768,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 12,
    intermediate_size=512 if SMALL else 3072,
    max_position_embeddings=512,
)
model = BertForMaskedLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device == "cuda")
MASK_ID, PAD_ID = 103, 0


def make_batch(n, longest):
    lengths = torch.randint(longest // 2, longest + 1, (n,), device=device)
    lengths[0] = longest
    width = int(lengths.max())
    pos = torch.arange(width, device=device)
    attn = (pos[None, :] < lengths[:, None]).long()
    ids = torch.randint(1000, cfg.vocab_size, (n, width), device=device) * attn
    pick = (torch.rand(n, width, device=device) < 0.15) & attn.bool()
    labels = torch.where(pick, ids, torch.full_like(ids, -100))
    r = torch.rand(n, width, device=device)
    ids = torch.where(pick & (r < 0.8), torch.full_like(ids, MASK_ID), ids)
    rand_tok = torch.randint(1000, cfg.vocab_size, (n, width), device=device)
    ids = torch.where(pick & (r >= 0.8) & (r < 0.9), rand_tok, ids)
    return ids, attn, labels


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step, longest in enumerate(LENS):
    ids, attn, labels = make_batch(B, longest)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=attn, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} len {ids.shape[1]} loss {out.loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, labels, out
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"empty_cache reserved {torch.cuda.memory_reserved()}")
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids, attn, labels = make_batch(BE, 128 if SMALL else 512)
    out = model(input_ids=ids, attention_mask=attn, labels=labels)
if device == "cuda":
    print(
        f"eval loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
