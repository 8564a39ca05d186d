"""Serving extractive QA: an HF BertForQuestionAnswering from config (bert-large sized) cast to fp16,
inference_mode, 10 batches of 32 whose padded lengths are drawn (seeded) between 64 and 512 tokens,
start and end logits kept on the GPU for every batch; 2 phases (the batches, then after freeing)."""

import os
import random

import torch
from transformers import BertConfig, BertForQuestionAnswering

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4401)
rng = random.Random(4401)
if SMALL:
    config = BertConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, LO, HI = 2, 8, 32
else:
    config = BertConfig(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    )
    B, LO, HI = 32, 64, 512
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForQuestionAnswering(config).to(device).half().eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
kept = []
with torch.inference_mode():
    for i in range(10):
        S = rng.randint(LO, HI)
        ids = torch.randint(1, config.vocab_size, (B, S), device=device)
        types = torch.zeros_like(ids)
        types[:, S // 3 :] = 1
        out = model(input_ids=ids, token_type_ids=types, attention_mask=torch.ones_like(ids))
        kept.append((out.start_logits, out.end_logits))
        if device == "cuda":
            a, r = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
            print(f"batch {i} len {S} allocated {a} reserved {r}")
if device == "cuda":
    print(f"batches peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del kept, out, ids, types
if device == "cuda":
    print(f"freed allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
