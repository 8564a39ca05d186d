"""Adding tokens to a pretrained vocabulary, as chat fine-tunes do: an HF GPT2LMHeadModel from
config (GPT-2 medium: 1024 wide, 24 layers, 16 heads) moved to the GPU in bf16, then
resize_token_embeddings(+2048 tokens, pad to a multiple of 64) with transformers' default mean
resizing (the new rows drawn from a Gaussian over the old embeddings' mean and covariance, computed
in fp32), then 2 steps of bf16 training at batch 8 x 1024, AdamW (foreach); 4 phases."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3502)
if SMALL:
    config = GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    B, S, NEW = 2, 16, 20
else:
    config = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=1024, n_layer=24, n_head=16)
    B, S, NEW = 8, 1024, 2048
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device=device, dtype=torch.bfloat16)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.resize_token_embeddings(config.vocab_size + NEW, pad_to_multiple_of=64)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
if device == "cuda":
    print(f"resize peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, model.config.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
