"""HF Exaone4ForCausalLM (QK-norm, post-norm, three sliding-window layers of 1,024 per global layer
without RoPE) built from its config, 8 layers, 1,280 wide, a 102,400 vocabulary, bf16 weights,
4 micro-batches of 2 x 1,536 tokens accumulated per step with padded right ends (attention mask,
labels -100 on padding), Adam (foreach) with a LinearLR warm-up, 2 optimizer steps; 3 phases."""

import os

import torch
from transformers import Exaone4Config, Exaone4ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8706)
if SMALL:
    config = Exaone4Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=8,
        sliding_window_pattern=4,
    )
    B, L = 2, 32
else:
    config = Exaone4Config(
        vocab_size=102400,
        hidden_size=1280,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=10,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        sliding_window=1024,
        sliding_window_pattern=4,
    )
    B, L = 2, 1536
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Exaone4ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    total = 0.0
    for micro in range(4):
        ids = torch.randint(3, config.vocab_size, (B, L), device=device)
        lengths = torch.tensor([L, L - (L // 8) * (micro + 1)], device=device)
        attn = (torch.arange(L, device=device)[None] < lengths[:, None]).long()
        labels = ids.masked_fill(attn == 0, -100)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss / 4
        loss.backward()
        total += loss.item()
        del ids, lengths, attn, labels, loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {total:.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
