"""HF Phi3ForCausalLM from a small Phi3Config (fused qkv / gate_up), fp32, SGD momentum with foreach=False,
zero_grad(set_to_none=False), clip_grad_norm_, 3 steps (needs transformers)."""

import os

import torch
from transformers import Phi3Config, Phi3ForCausalLM

HID, INTER, LAYERS, HEADS, VOCAB, B, SEQ = (
    (64, 128, 2, 4, 512, 2, 32) if os.environ.get("SMOKE") else (768, 2048, 8, 12, 32064, 8, 512)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(31)

config = Phi3Config(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=HEADS,
    max_position_embeddings=2048,
    pad_token_id=0,
    use_cache=False,
)
model = Phi3ForCausalLM(config).to(device)
model.train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4, foreach=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    input_ids = torch.randint(1, VOCAB, (B, SEQ), device=device)
    loss = model(input_ids=input_ids, labels=input_ids).loss
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5, foreach=False)
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} norm {norm.item():.2f} "
            f"peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
