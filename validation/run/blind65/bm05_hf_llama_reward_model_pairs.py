"""A reward model as RLHF trains one: HF LlamaForSequenceClassification (num_labels=1) from a
LlamaConfig (2,048 wide, 16 layers, 8 KV heads), bf16 weights, gradient checkpointing, chosen and
rejected responses of 1,024 tokens stacked into one batch of 2 x 4, the pairwise loss
-logsigmoid(r_chosen - r_rejected), AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6505)
if SMALL:
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=1,
        pad_token_id=0,
    )
    B, L = 2, 16
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        num_labels=1,
        pad_token_id=0,
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForSequenceClassification(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (2 * B, L), device=device)
    rewards = model(input_ids=ids).logits.squeeze(-1).float()
    loss = -F.logsigmoid(rewards[:B] - rewards[B:]).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, rewards, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
