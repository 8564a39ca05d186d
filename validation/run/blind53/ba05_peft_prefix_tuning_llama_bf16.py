"""peft prefix tuning (30 virtual tokens, its reparameterising MLP of 1024 kept, as
`prefix_projection=True` builds it) on an HF LlamaForCausalLM from a LlamaConfig (2048 wide,
12 layers, GQA 16/8), bf16 base weights with the prefix encoder in float32, labels=input_ids,
batch 8 x 768, AdamW, 2 steps; 3 phases."""

import os

import torch
from peft import PrefixTuningConfig, TaskType, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5305)
if SMALL:
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=500,
    )
    BATCH, SEQ, HIDDEN = 2, 16, 32
else:
    config = LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=32000,
    )
    BATCH, SEQ, HIDDEN = 8, 768, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
prefix = PrefixTuningConfig(
    task_type=TaskType.CAUSAL_LM, num_virtual_tokens=30, prefix_projection=True, encoder_hidden_size=HIDDEN
)
model = get_peft_model(model, prefix)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
