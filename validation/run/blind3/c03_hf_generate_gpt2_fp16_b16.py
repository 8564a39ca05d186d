"""HF generate() greedy on a GPT2LMHeadModel from GPT2Config converted with .half(), batch 16, fixed length
(min_new_tokens == max_new_tokens), then a longer prompt at batch 4."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

EMBD, LAYERS, HEADS, VOCAB, B, PROMPT, NEW = (
    (64, 2, 4, 512, 2, 8, 4) if os.environ.get("SMOKE") else (1024, 16, 16, 50257, 16, 96, 48)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(3)

config = GPT2Config(vocab_size=VOCAB, n_positions=1024, n_embd=EMBD, n_layer=LAYERS, n_head=HEADS)
model = GPT2LMHeadModel(config).to(device)
if device == "cuda":
    model = model.half()
model.eval()
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for batch, prompt in ((B, PROMPT), (max(1, B // 4), PROMPT * 4)):
    input_ids = torch.randint(0, VOCAB - 1, (batch, prompt), device=device)
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=VOCAB - 1,
    )
    tokens = out.cpu()
    if device == "cuda":
        print(
            f"batch {batch} prompt {prompt} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out
print(tokens.shape)
