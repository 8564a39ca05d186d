"""HF OPTForCausalLM from an OPTConfig (1024 wide, 12 layers, 16 heads, learned positions, ReLU FFN),
fp32 weights under bf16 autocast with gradient checkpointing (use_reentrant=False), AdamW (foreach),
labels=input_ids, batch 6 x 1024, 2 steps; then a no_grad eval at batch 12."""

import os

import torch
from transformers import OPTConfig, OPTForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1501)
if SMALL:
    config = OPTConfig(
        vocab_size=300,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
        word_embed_proj_dim=32,
    )
    BATCH, SEQ = 2, 16
else:
    config = OPTConfig(
        vocab_size=50272,
        hidden_size=1024,
        ffn_dim=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        max_position_embeddings=2048,
        word_embed_proj_dim=1024,
    )
    BATCH, SEQ = 6, 1024
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = OPTForCausalLM(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    ids = torch.randint(0, config.vocab_size, (BATCH * 2, SEQ), device=device)
    logits = model(input_ids=ids).logits
del logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
