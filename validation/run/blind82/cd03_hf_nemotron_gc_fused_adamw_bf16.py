"""HF NemotronForCausalLM (squared-ReLU MLP without a gate, LayerNorm1P, rotary on half of each head)
built from its config, 12 layers, 2,048 wide, a 256,000 vocabulary, bf16 weights, gradient
checkpointing (non-reentrant), fused AdamW, batch 2 of 1,024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import NemotronConfig, NemotronForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8203)
if SMALL:
    config = NemotronConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        bos_token_id=1,
        eos_token_id=2,
    )
    B, L = 2, 16
else:
    config = NemotronConfig(
        vocab_size=256000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    )
    B, L = 2, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = NemotronForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(3, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
