"""peft LoRA (r=8, alpha 16, target_modules="all-linear") on an HF Qwen2ForCausalLM from a Qwen2Config
(1536 wide, 12 layers, GQA 12/2), bf16 base weights, gradient checkpointing (use_reentrant=False)
with `enable_input_require_grads`, labels=input_ids, batch 4 x 1,024, AdamW, 2 steps; 3 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5601)
if SMALL:
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=12,
        num_key_value_heads=2,
    )
    BATCH, SEQ = 2, 16
else:
    config = Qwen2Config(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=2,
    )
    BATCH, SEQ = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
