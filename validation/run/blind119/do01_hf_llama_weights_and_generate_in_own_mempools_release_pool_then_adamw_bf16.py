"""An HF Llama (from LlamaConfig: 12 layers, width 2048, grouped-query attention with 4 KV heads, vocab
32,000) whose bf16 weights are placed in their own torch.cuda.MemPool (use_mem_pool around the move to
the GPU), then a greedy generate (batch 16, 256-token prompts, 64 new tokens) run entirely inside a
second MemPool holding the KV cache and the activations; the generated ids are copied out, the pool is
deleted and the cache emptied, and two AdamW (foreach) training steps follow outside any pool; 6 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11901)
B, PROMPT, NEW = (2, 16, 8) if SMALL else (16, 256, 64)
TB, TL = (2, 32) if SMALL else (4, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = LlamaConfig(
    vocab_size=32000,
    hidden_size=128 if SMALL else 2048,
    intermediate_size=344 if SMALL else 5632,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 16,
    num_key_value_heads=2 if SMALL else 4,
    max_position_embeddings=2048,
    torch_dtype=torch.bfloat16,
)
model = LlamaForCausalLM(cfg)
model.generation_config.pad_token_id = 0
if device == "cuda":
    weights_pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(weights_pool):
        model = model.to(device=device, dtype=torch.bfloat16)
    print(f"weights {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
else:
    model = model.to(dtype=torch.bfloat16)

model.eval()
prompts = torch.randint(1, cfg.vocab_size, (B, PROMPT), device=device)
if device == "cuda":
    kv_pool = torch.cuda.MemPool()
    with torch.no_grad(), torch.cuda.use_mem_pool(kv_pool):
        out = model.generate(prompts, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    print(
        f"generate in pool peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
    generated = out[:, PROMPT:].clone()
    del out
    del kv_pool
    torch.cuda.empty_cache()
    print(f"pool released allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
else:
    with torch.no_grad():
        generated = model.generate(prompts, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)[
            :, PROMPT:
        ]

model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
for step in range(2):
    ids = torch.randint(0, cfg.vocab_size, (TB, TL), device=device)
    ids[:, : generated.shape[1]] = generated[:TB]
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
