"""Speculative decoding written by hand with two HF Gemma models from GemmaConfig sharing the
256,000-token vocabulary (bf16): an 18-layer, 2,048-wide target (8 heads, one KV head of 256, GeGLU
of 16,384) and a 6-layer, 1,024-wide draft. Each round the draft proposes 4 tokens one by one
(logits_to_keep=1), the target scores the last kept token and the 4 proposals in one forward, and a
fixed acceptance schedule (4, 2, 0, 3, 4, 1: a benchmark's stand-in for the accept/reject test, so
that every run does the same work) keeps that many proposals plus the target's token. First both
models hold StaticCaches written at explicit cache_position (rejected positions are overwritten
later) under inference_mode: batch 1 with a 1,536-token prompt to 64 new tokens, then batch 4 with
1,024 tokens to 48; then DynamicCaches cropped back after each round (DynamicCache.crop) under
no_grad: batch 1, 3,072 tokens to 32; 4 phases."""

import os

import torch
from transformers import DynamicCache, GemmaConfig, GemmaForCausalLM, StaticCache

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12903)
if SMALL:
    common = dict(vocab_size=256, max_position_embeddings=1024, head_dim=16, num_key_value_heads=1)
    target_cfg = GemmaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, **common
    )
    draft_cfg = GemmaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, **common
    )
    RUNS = ((1, 40, 12, "static"), (2, 32, 10, "static"), (1, 60, 8, "dynamic"))
else:
    common = dict(vocab_size=256000, max_position_embeddings=8192, head_dim=256, num_key_value_heads=1)
    target_cfg = GemmaConfig(
        hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8, **common
    )
    draft_cfg = GemmaConfig(
        hidden_size=1024, intermediate_size=4096, num_hidden_layers=6, num_attention_heads=4, **common
    )
    RUNS = ((1, 1536, 64, "static"), (4, 1024, 48, "static"), (1, 3072, 32, "dynamic"))
K = 4
SCHEDULE = (4, 2, 0, 3, 4, 1)
target_cfg._attn_implementation = draft_cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
target = GemmaForCausalLM(target_cfg).to(device=device, dtype=dtype).eval()
draft = GemmaForCausalLM(draft_cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def forward(model, ids, cache, start, keep=0):
    pos = torch.arange(start, start + ids.shape[1], device=device)
    return model(
        input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True, logits_to_keep=keep
    ).logits


def speculative(prompt, new_tokens, kind):
    n = prompt.shape[1]
    if kind == "static":
        t_cache = StaticCache(config=target_cfg, max_cache_len=n + new_tokens + 2 * K)
        d_cache = StaticCache(config=draft_cfg, max_cache_len=n + new_tokens + 2 * K)
    else:
        t_cache, d_cache = DynamicCache(config=target_cfg), DynamicCache(config=draft_cfg)
    first = forward(target, prompt, t_cache, 0, keep=1).argmax(-1)
    forward(draft, prompt[:, :-1], d_cache, 0, keep=1)
    seq = torch.cat([prompt, first], dim=1)
    t_len, d_len = n, n - 1
    rounds, agreed = 0, torch.zeros((), dtype=torch.long, device=device)
    while seq.shape[1] - n < new_tokens:
        L = seq.shape[1]
        d_in, proposal = seq[:, d_len:], []
        for i in range(K):
            d_in = forward(draft, d_in, d_cache, d_len, keep=1).argmax(-1)
            d_len = L + i
            proposal.append(d_in)
        proposal = torch.cat(proposal, dim=1)
        t_choice = forward(target, torch.cat([seq[:, -1:], proposal], dim=1), t_cache, t_len).argmax(-1)
        agreed += (t_choice[:, :K] == proposal).int().cumprod(dim=1).sum()
        a = SCHEDULE[rounds % len(SCHEDULE)]
        seq = torch.cat([seq, proposal[:, :a], t_choice[:, a : a + 1]], dim=1)
        t_len, d_len = L + a, min(d_len, L + a)
        if kind == "dynamic":
            for cache, keep in ((t_cache, t_len), (d_cache, d_len)):
                if cache.get_seq_length() > keep:
                    cache.crop(keep - cache.get_seq_length())
        rounds += 1
    return seq, rounds, agreed


for b, n, new, kind in RUNS:
    prompt = torch.randint(0, target_cfg.vocab_size, (b, n), device=device)
    with torch.inference_mode() if kind == "static" else torch.no_grad():
        seq, rounds, agreed = speculative(prompt, new, kind)
    if device == "cuda":
        print(
            f"{kind} batch {b} prompt {n} out {tuple(seq.shape)} rounds {rounds} agreed {agreed.item()}"
            f" peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {kind} {tuple(seq.shape)} rounds {rounds}")
    del prompt, seq, agreed
