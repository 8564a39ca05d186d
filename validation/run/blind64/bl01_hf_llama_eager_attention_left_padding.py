"""HF LlamaForCausalLM from a LlamaConfig (1,536 wide, 16 layers, 12 heads, 4 KV heads) with
attn_implementation="eager" (the attention weights materialized and softmaxed in fp32), bf16 weights,
fine-tuned on left-padded batches of 8 sequences of 1,024 tokens (a padding mask, labels -100 on the
padding), AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6401)
if SMALL:
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    B, L = 2, 16
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=16,
        num_attention_heads=12,
        num_key_value_heads=4,
    )
    B, L = 8, 1024
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
pad = [(L // 8) * (i % 4) for i in range(B)]
mask = torch.tensor([[0] * p + [1] * (L - p) for p in pad], device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (B, L), device=device) * mask
    labels = ids.masked_fill(mask == 0, -100)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
