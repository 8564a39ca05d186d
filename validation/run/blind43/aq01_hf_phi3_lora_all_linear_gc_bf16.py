"""LoRA on every linear layer: an HF Phi3ForCausalLM from config (fused qkv_proj and gate_up_proj,
2560 wide, 10 layers) in bf16, peft rank 8 on "all-linear", gradient checkpointing (non-reentrant)
with input grads enabled, AdamW (foreach), batch 4 at 1024 tokens, 2 steps; 3 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Phi3Config, Phi3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4301)
if SMALL:
    config = Phi3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        pad_token_id=0,
    )
    B, S = 2, 16
else:
    config = Phi3Config(
        vocab_size=32064,
        hidden_size=2560,
        intermediate_size=6912,
        num_hidden_layers=10,
        num_attention_heads=20,
        num_key_value_heads=20,
        max_position_embeddings=4096,
        pad_token_id=0,
    )
    B, S = 4, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
base = Phi3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
model.train()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (B, S), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
