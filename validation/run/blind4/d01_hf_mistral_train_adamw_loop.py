"""HF MistralForCausalLM from a small config (GQA, sliding window), bf16 weights, AdamW(foreach=False),
2 steps (needs transformers)."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, SEQ = (
    (64, 128, 2, 4, 2, 512, 2, 32) if os.environ.get("SMOKE") else (1024, 3584, 8, 16, 4, 32000, 4, 1024)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(41)
config = MistralConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    sliding_window=512,
    max_position_embeddings=4096,
    use_cache=False,
)
model = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, VOCAB, (B, SEQ), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
