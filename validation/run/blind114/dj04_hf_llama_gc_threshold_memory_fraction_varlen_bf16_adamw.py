"""A small HF Llama (from LlamaConfig: 16 layers, width 1536, grouped-query attention with 4 KV
heads, vocab 32,000) trained in bf16 weights under a memory cap and the allocator's garbage collector:
PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.6" set before torch is imported and
set_per_process_memory_fraction(0.25), so cached blocks are released once reserved memory passes 60% of
the cap; batch 8 with the sequence length changing every step (1,024, 2,048, 1,536, 512, 2,048), AdamW
(foreach), 5 steps; 7 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.6"

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11404)
FRACTION = 0.25
B = 2 if SMALL else 8
LENS = [64, 128, 96, 32, 128] if SMALL else [1024, 2048, 1536, 512, 2048]
device = "cuda" if torch.cuda.is_available() else "cpu"

if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)
cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=128 if SMALL else 1536,
    intermediate_size=344 if SMALL else 4096,
    num_hidden_layers=2 if SMALL else 16,
    num_attention_heads=4 if SMALL else 12,
    num_key_value_heads=2 if SMALL else 4,
    max_position_embeddings=4096,
    torch_dtype=torch.bfloat16,
)
model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step, n in enumerate(LENS):
    ids = torch.randint(0, cfg.vocab_size, (B, n), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} len {n} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, loss
