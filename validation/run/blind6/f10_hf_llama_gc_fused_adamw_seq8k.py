"""HF LlamaForCausalLM from a TinyLlama-like LlamaConfig (2048 wide, 22 layers, GQA 32/4, SwiGLU 5632,
32k vocab, untied; 1.1B), bf16 weights, `model.gradient_checkpointing_enable()` (transformers' default
kwargs), `AdamW(fused=True)`, long-context batch 6 x 8192 with `labels=input_ids`, 2 steps; then a
`no_grad` forward at batch 1 x 16384 (`logits_to_keep=1`)."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

D, FF, LAYERS, HEADS, KV, VOCAB, B, T = (
    (64, 160, 2, 4, 2, 300, 1, 64) if os.environ.get("SMOKE") else (2048, 5632, 22, 32, 4, 32000, 6, 8192)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(610)

config = LlamaConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=2 * T,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    use_cache=False,
)
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    input_ids = torch.randint(0, VOCAB, (B, T), device=device)
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    out = model(input_ids=torch.randint(0, VOCAB, (1, 2 * T), device=device), logits_to_keep=1)
    print(f"long prefill logits {tuple(out.logits.shape)}")
    del out
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
