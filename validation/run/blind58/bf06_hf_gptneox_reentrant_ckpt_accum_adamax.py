"""HF GPTNeoXForCausalLM from a GPTNeoXConfig (Pythia-410M-sized: 1,024 wide, 24 layers, partial
rotary 0.25, parallel residual) with gradient checkpointing in its reentrant form
(gradient_checkpointing_kwargs use_reentrant=True, inputs made to require grads), 4 micro-batches
of 4 x 1,024 tokens accumulated per step under bf16 autocast, Adamax, 2 steps; 3 phases."""

import os

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5806)
if SMALL:
    config = GPTNeoXConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        rotary_pct=0.25,
        max_position_embeddings=64,
    )
    MB, L = 2, 16
else:
    config = GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        rotary_pct=0.25,
        max_position_embeddings=2048,
    )
    MB, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPTNeoXForCausalLM(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.enable_input_require_grads()
model.train()
optimizer = torch.optim.Adamax(model.parameters(), lr=6e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _micro in range(4):
        ids = torch.randint(0, config.vocab_size, (MB, L), device=device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss / 4
        loss.backward()
        del ids, loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
