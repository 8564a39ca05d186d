"""HF OPTForCausalLM from an OPTConfig (opt-350m-like: 24 layers, 1,024 wide, a 512-wide projected
embedding) trained in fp32 weights under fp16 autocast with a GradScaler, 1,024-token sequences at batch
8, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import OPTConfig, OPTForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7301)
if SMALL:
    config = OPTConfig(
        vocab_size=100,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        word_embed_proj_dim=16,
    )
    B, L = 2, 16
else:
    config = OPTConfig(
        vocab_size=50272,
        hidden_size=1024,
        ffn_dim=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        word_embed_proj_dim=512,
        do_layer_norm_before=False,
    )
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = OPTForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(4, config.vocab_size, (B, L), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16 if device == "cuda" else torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
