"""HF GPT2LMHeadModel from a GPT-2 medium GPT2Config (1024 wide, 24 layers, 16 heads, 50257 vocab, tied
head), fp32 weights and math, `labels=input_ids`, gradient accumulation over 4 micro-batches of 4 x 1024
(`loss / accum` each), clip_grad_norm_, AdamW (foreach default) with a cosine schedule, 2 optimizer steps;
a phase per micro-batch in the first step."""

import math
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

EMBD, LAYERS, HEADS, VOCAB, CTX, MICRO, ACCUM = (
    (64, 2, 4, 500, 32, 2, 4) if os.environ.get("SMOKE") else (1024, 24, 16, 50257, 1024, 4, 4)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(505)

config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=CTX,
    n_embd=EMBD,
    n_layer=LAYERS,
    n_head=HEADS,
    bos_token_id=VOCAB - 1,
    eos_token_id=VOCAB - 1,
    use_cache=False,
)
model = GPT2LMHeadModel(config).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
total_steps = 100
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: 0.5 * (1.0 + math.cos(math.pi * min(s, total_steps) / total_steps))
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    running = 0.0
    for micro in range(ACCUM):
        input_ids = torch.randint(0, VOCAB, (MICRO, CTX), device=device)
        out = model(input_ids=input_ids, labels=input_ids)
        loss = out.loss / ACCUM
        loss.backward()
        running += loss.item()
        if device == "cuda" and step == 0:
            print(
                f"micro {micro} peak {torch.cuda.max_memory_allocated()} "
                f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {running:.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
