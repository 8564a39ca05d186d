"""HF Qwen2ForCausalLM from a small Qwen2Config (fp32, tied embeddings, 152k vocab) trained 2 steps with
AdamW, labels=input_ids (needs transformers)."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, SEQ = (
    (64, 128, 2, 4, 2, 512, 2, 16) if os.environ.get("SMOKE") else (896, 4864, 6, 14, 2, 151936, 4, 512)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

config = Qwen2Config(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    attn_implementation="sdpa",
)
model = Qwen2ForCausalLM(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
print(f"params {model.num_parameters() / 1e6:.1f}M")
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    input_ids = torch.randint(0, VOCAB, (B, SEQ), device=device)
    attention_mask = torch.ones_like(input_ids)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
