"""peft's IA3 on an HF OPTForCausalLM from an OPTConfig (OPT-1.3B sizes: 2,048 wide, 24 layers),
bf16 weights: learned scaling vectors on k_proj, v_proj and fc2 only, the base frozen; fine-tuned at
batch 8 of 1,024 tokens with AdamW, 3 steps; 4 phases."""

import os

import torch
from peft import IA3Config, get_peft_model
from transformers import OPTConfig, OPTForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6205)
if SMALL:
    config = OPTConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        ffn_dim=64,
        num_attention_heads=2,
        word_embed_proj_dim=32,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = OPTConfig(
        vocab_size=50272,
        hidden_size=2048,
        num_hidden_layers=24,
        ffn_dim=8192,
        num_attention_heads=32,
        word_embed_proj_dim=2048,
        max_position_embeddings=2048,
    )
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
base = OPTForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model = get_peft_model(
    base,
    IA3Config(task_type="CAUSAL_LM", target_modules=["k_proj", "v_proj", "fc2"], feedforward_modules=["fc2"]),
)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
