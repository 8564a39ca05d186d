"""HF MambaForCausalLM from a MambaConfig (768 wide, 8 layers, state 16) on its pure-PyTorch path (no
mamba_ssm/causal_conv1d kernels: the sequential selective scan over every position), fp32, AdamW,
labels=input_ids, batch 4 x 256, 2 steps."""

import os

import torch
from transformers import MambaConfig, MambaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1502)
if SMALL:
    config = MambaConfig(vocab_size=300, hidden_size=32, state_size=4, num_hidden_layers=1, expand=2)
    BATCH, SEQ = 2, 8
else:
    config = MambaConfig(vocab_size=32000, hidden_size=768, state_size=16, num_hidden_layers=8, expand=2)
    BATCH, SEQ = 4, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MambaForCausalLM(config).to(device).train()
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
