"""HF model.generate() on a small GPT2LMHeadModel from GPT2Config (random init, fp32), left-padded
batch, greedy, max_new_tokens == min_new_tokens."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

LAYERS, D, HEADS, VOCAB, B, PROMPT, NEW = (
    (2, 64, 4, 256, 2, 8, 4) if os.environ.get("SMOKE") else (6, 768, 12, 50257, 8, 64, 48)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=1024,
    n_embd=D,
    n_layer=LAYERS,
    n_head=HEADS,
    bos_token_id=VOCAB - 1,
    eos_token_id=VOCAB - 1,
    pad_token_id=VOCAB - 1,
)
model = GPT2LMHeadModel(config).to(device).eval()
input_ids = torch.randint(0, VOCAB - 1, (B, PROMPT), device=device)
attention_mask = torch.ones_like(input_ids)
attention_mask[: B // 2, : PROMPT // 4] = 0  # left padding on half of the batch
input_ids[attention_mask == 0] = VOCAB - 1
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    out = model.generate(
        input_ids,
        attention_mask=attention_mask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
print(out.shape)
