"""HF transformers UMT5 (T5 with a relative-position bias in every layer, gated GELU) built from a
config at 6+6 layers, 512 wide, 8 heads, vocabulary 64,000, fp32 weights trained under bf16 autocast
with AdamW; each micro-batch is 8 source sequences of up to 768 tokens and targets of up to 128,
their lengths drawn on the host, right-padded with the pad id / -100 labels on the host and copied
to the GPU with attention masks; gradient accumulation over 3 micro-batches, 3 optimizer steps, then
a greedy generate of 32 new tokens for 4 sources; 5 phases."""

import os
import random

import torch
from transformers import UMT5Config, UMT5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9702)
rng = random.Random(9702)
if SMALL:
    cfg = UMT5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    B, S, T, NEW = 2, 24, 8, 4
else:
    cfg = UMT5Config(vocab_size=64000, d_model=512, d_kv=64, d_ff=1536, num_layers=6, num_heads=8)
    B, S, T, NEW = 8, 768, 128, 32
cfg.dropout_rate = 0.1
ACCUM = 3
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch():
    src_len = [rng.randint(S // 3, S) for _ in range(B)]
    tgt_len = [rng.randint(T // 4, T) for _ in range(B)]
    src = [[rng.randint(2, cfg.vocab_size - 1) for _ in range(n)] + [0] * (S - n) for n in src_len]
    tgt = [[rng.randint(2, cfg.vocab_size - 1) for _ in range(n)] + [-100] * (T - n) for n in tgt_len]
    mask = [[1] * n + [0] * (S - n) for n in src_len]
    return torch.tensor(src).to(device), torch.tensor(mask).to(device), torch.tensor(tgt).to(device)


model = UMT5ForConditionalGeneration(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    for _micro in range(ACCUM):
        src, mask, labels = batch()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=src, attention_mask=mask, labels=labels).loss / ACCUM
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
    del loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    out = model.generate(
        input_ids=src[:4], attention_mask=mask[:4], max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False
    )
if device == "cuda":
    print(
        f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
