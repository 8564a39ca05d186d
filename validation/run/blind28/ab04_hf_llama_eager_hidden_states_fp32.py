"""HF LlamaForCausalLM with eager attention (the softmax materialised in fp32) from a small
LlamaConfig (768 wide, 6 layers, 12 heads), fp32 weights, output_hidden_states=True and a loss on the
middle layer's states added to the LM loss, batch 8 at 512 tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2804)
if SMALL:
    config = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    B, S = 2, 16
else:
    config = LlamaConfig(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=12
    )
    B, S = 8, 512
config._attn_implementation = "eager"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    out = model(input_ids=ids, labels=ids, output_hidden_states=True)
    mid = out.hidden_states[len(out.hidden_states) // 2]
    loss = out.loss + 0.01 * mid.pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, out, mid, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
