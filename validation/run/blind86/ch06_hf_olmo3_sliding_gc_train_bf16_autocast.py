"""HF Olmo3ForCausalLM (QK-norm, post-norm blocks, three sliding-window layers of 512 to one full
layer) built from its config, 8 layers, 1,024 wide, a 50,304 vocabulary, fp32 weights under bf16
autocast, non-reentrant gradient checkpointing, 2 x 2,048 tokens, AdamW (foreach), 3 steps, then one
greedy 32-token generate of batch 2 under `torch.inference_mode`; 5 phases."""

import os

import torch
from transformers import Olmo3Config, Olmo3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8606)
if SMALL:
    config = Olmo3Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        max_position_embeddings=128,
        sliding_window=8,
    )
    B, L, NEW = 2, 32, 4
else:
    config = Olmo3Config(
        vocab_size=50304,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        max_position_embeddings=4096,
        sliding_window=512,
    )
    B, L, NEW = 2, 2048, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Olmo3ForCausalLM(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(2, config.vocab_size, (B, L), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, loss
model.eval()
prompt = torch.randint(2, config.vocab_size, (2, 64 if not SMALL else 8), device=device)
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    out = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=1)
del out, prompt
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
