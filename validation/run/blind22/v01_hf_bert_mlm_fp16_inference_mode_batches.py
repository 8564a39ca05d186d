"""HF BertForMaskedLM from a BertConfig (768 wide, 12 layers, 12 heads, 30,522 vocabulary), fp16
weights, under torch.inference_mode: batch 32 x 256, then torch.cuda.empty_cache() and batch 8 x 512,
the logits' argmax each time; 3 phases."""

import os

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2201)
if SMALL:
    config = BertConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    SHAPES = [(2, 16), (1, 32)]
else:
    config = BertConfig()
    SHAPES = [(32, 256), (8, 512)]
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForMaskedLM(config).to(device=device, dtype=torch.float16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for i, (b, t) in enumerate(SHAPES):
    with torch.inference_mode():
        ids = torch.randint(0, config.vocab_size, (b, t), device=device)
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        best = logits.argmax(-1)
    assert best.shape == (b, t)
    del logits, best, ids
    if device == "cuda":
        print(
            f"batch {b}x{t} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        if i == 0:
            torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
