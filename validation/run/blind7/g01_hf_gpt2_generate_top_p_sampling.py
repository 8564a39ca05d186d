"""HF GPT2LMHeadModel, a gpt2-medium-sized config (1024 wide, 24 layers, 355M), bf16, `generate()` with
nucleus sampling (`do_sample=True, top_p=0.92, top_k=0, temperature=0.8`: the logits processors sort
the whole vocabulary per row, softmax, cumsum, scatter) at batch 8 x 256 for exactly 64 new tokens;
then batch 32 x 128 for 32 tokens."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

D, LAYERS, HEADS, VOCAB, B, T, NEW = (
    (64, 2, 4, 500, 2, 16, 4) if os.environ.get("SMOKE") else (1024, 24, 16, 50257, 8, 256, 64)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(701)
config = GPT2Config(n_embd=D, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB, n_positions=1024)
model = GPT2LMHeadModel(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for batch, prompt, new in ((B, T, NEW), (4 * B, T // 2, NEW // 2)):
    ids = torch.randint(0, VOCAB, (batch, prompt), device=device)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        top_p=0.92,
        top_k=0,
        temperature=0.8,
        max_new_tokens=new,
        min_new_tokens=new,
        pad_token_id=0,
    )
    print(f"generated {tuple(out.shape)}")
    del out, ids
    if device == "cuda":
        print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
