"""HF Qwen3ForCausalLM from a small Qwen3Config (bf16 weights, GQA 16/4, qk-norm), gradient checkpointing,
AdamW foreach default, 3 steps with labels."""

import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, SEQ = (
    (64, 128, 2, 4, 2, 512, 2, 32) if os.environ.get("SMOKE") else (1024, 3072, 12, 16, 4, 65536, 8, 1024)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(7)

config = Qwen3Config(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    head_dim=HID // HEADS,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    use_cache=False,
)
model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable()
model.train()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    input_ids = torch.randint(0, VOCAB, (B, SEQ), device=device)
    out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out
