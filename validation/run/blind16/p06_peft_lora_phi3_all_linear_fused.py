"""peft LoRA (r=16, alpha 32, dropout 0.05, target_modules="all-linear") on an HF Phi3ForCausalLM from a
Phi3Config (1536 wide, 8 layers, 16 heads, fused qkv and gate_up projections), bf16 base weights,
AdamW(fused=True) over the adapters, labels=input_ids, batch 4 x 1024, 2 steps."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Phi3Config, Phi3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1606)
if SMALL:
    config = Phi3Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        pad_token_id=0,
    )
    BATCH, SEQ = 2, 16
else:
    config = Phi3Config(
        vocab_size=32064,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=4096,
        pad_token_id=0,
    )
    BATCH, SEQ = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
base = Phi3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model = get_peft_model(
    base,
    LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM"),
)
model.train()
optimizer = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=2e-4, fused=device == "cuda"
)
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
