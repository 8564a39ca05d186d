"""A Llama-style decoder trained with its evaluation generations kept in their own memory pool, so
that the KV caches and logits of generate do not fragment the training cache: transformers'
LlamaForCausalLM from LlamaConfig (hidden 1,024, 12 layers, 16 heads and 4 KV heads, intermediate
2,816, vocab 32,000, sdpa attention; about 220M parameters), fp32 weights, bf16 autocast, AdamW
(lr 3e-4, betas 0.9/0.95, weight decay 0.1, foreach), gradient clipping at 1.0, batch 8 of 1,024
random tokens; PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:200 set before torch is imported. The
evaluations run under torch.cuda.use_mem_pool(pool) with pool = torch.cuda.memory.MemPool() created
once: greedy generate of 64 new tokens from 4 prompts of 256 tokens, then (the pool keeps its cached
blocks through the training between) 8 prompts of 384 tokens. Phases: 3 training steps; the first
generate inside the pool; 3 training steps; the second generate inside the same pool; the pool
deleted and torch.cuda.empty_cache(), then 2 training steps of 4 sequences of 2,048 tokens (a batch
shape the cache has not seen); 5 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:200"

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16505)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    BATCH, SEQ, LONG_BATCH, LONG_SEQ, NEW = 2, 32, 1, 64, 8
    EVALS = ((2, 16), (3, 24))
else:
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    BATCH, SEQ, LONG_BATCH, LONG_SEQ, NEW = 8, 1024, 4, 2048, 64
    EVALS = ((4, 256), (8, 384))
cfg._attn_implementation = "sdpa"
cfg.pad_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"

model = LlamaForCausalLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)


def train(steps, batch, seq):
    model.train()
    for _ in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.item()


def evaluate(batch, prompt_len):
    model.eval()
    prompts = torch.randint(1, cfg.vocab_size, (batch, prompt_len), device=device)
    mask = torch.ones_like(prompts)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        out = model.generate(
            input_ids=prompts, attention_mask=mask, max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW
        )
    return out[:, prompt_len:].cpu()


def report(name):
    if device == "cuda":
        print(
            f"{name}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


print(f"train loss {train(3, BATCH, SEQ):.4f}")
report("train a")

pool = torch.cuda.memory.MemPool() if device == "cuda" else None
for i, (batch, prompt_len) in enumerate(EVALS):
    if pool is not None:
        with torch.cuda.use_mem_pool(pool):
            tokens = evaluate(batch, prompt_len)
        held = sum(seg["total_size"] for seg in pool.snapshot())
    else:
        tokens, held = evaluate(batch, prompt_len), 0
    print(f"eval {i}: generated {tuple(tokens.shape)}, pool holds {held} bytes")
    report(f"eval {i}")
    if i == 0:
        print(f"train loss {train(3, BATCH, SEQ):.4f}")
        report("train b")

del pool
if device == "cuda":
    torch.cuda.empty_cache()
print(f"long train loss {train(2, LONG_BATCH, LONG_SEQ):.4f}")
report("train long")
