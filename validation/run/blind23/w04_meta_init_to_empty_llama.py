"""An HF LlamaForCausalLM built on the meta device (with torch.device("meta")), materialised on the
GPU with to_empty(device="cuda") and initialised by the model's own init_weights(), bf16 via
to(torch.bfloat16), then AdamW (foreach default) for 3 steps at batch 4 x 1024 (1024 wide, 8 layers,
16 heads, 8 key-value heads, 32,000 vocabulary); 4 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2304)
if SMALL:
    config = LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4
    )
    B, T = 2, 16
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, T = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
with torch.device("meta"):
    model = LlamaForCausalLM(config)
model = model.to_empty(device=device)
model.init_weights()
model = model.to(torch.bfloat16)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
