"""HF BloomForCausalLM from a BloomConfig (1024 wide, 8 layers, 16 heads, ALiBi with baddbmm attention),
fp32, AdamW, labels=input_ids, batch 4 x 512, 2 steps."""

import os

import torch
from transformers import BloomConfig, BloomForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1704)
if SMALL:
    config = BloomConfig(vocab_size=300, hidden_size=32, n_layer=1, n_head=4)
    BATCH, SEQ = 2, 16
else:
    config = BloomConfig(vocab_size=50000, hidden_size=1024, n_layer=8, n_head=16)
    BATCH, SEQ = 4, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BloomForCausalLM(config).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
