"""Assisted generation with HF Helium built from configs: a 16-layer target (1536 wide, 12 heads
with 4 KV heads) and a 2-layer draft of 512 wide sharing its 48,000-symbol vocabulary, both fp16,
under no_grad: greedy assisted decoding (5 draft tokens a round, the heuristic schedule) of 96
tokens after a 1,200-token prompt, then speculative sampling (do_sample with a fixed seed, top-k
40, temperature 0.7) of 96 tokens after a 700-token prompt, then the target alone sampling the
same for comparison; 4 phases."""

import os

import torch
from transformers import HeliumConfig, HeliumForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11004)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 48000


def helium(layers, width, heads, kv):
    cfg = HeliumConfig(
        vocab_size=V,
        hidden_size=64 if SMALL else width,
        intermediate_size=128 if SMALL else width * 8 // 3,
        num_hidden_layers=2 if SMALL else layers,
        num_attention_heads=4 if SMALL else heads,
        num_key_value_heads=2 if SMALL else kv,
        head_dim=16 if SMALL else 128,
        max_position_embeddings=4096,
        pad_token_id=3,
        eos_token_id=2,
        bos_token_id=1,
    )
    return HeliumForCausalLM(cfg).to(device, torch.float16).eval()


target = helium(16, 1536, 12, 4)
draft = helium(2, 512, 4, 4)
N = 8 if SMALL else 96
gen = dict(max_new_tokens=N, min_new_tokens=N, pad_token_id=3)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    prompt = torch.randint(4, V, (1, 40 if SMALL else 1200), device=device)
    out = target.generate(prompt, assistant_model=draft, do_sample=False, **gen)
if device == "cuda":
    print(
        f"assisted greedy {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    prompt = torch.randint(4, V, (1, 30 if SMALL else 700), device=device)
    torch.manual_seed(7)
    out = target.generate(prompt, assistant_model=draft, do_sample=True, top_k=40, temperature=0.7, **gen)
if device == "cuda":
    print(
        f"assisted sample {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    torch.manual_seed(7)
    out = target.generate(prompt, do_sample=True, top_k=40, temperature=0.7, **gen)
if device == "cuda":
    print(
        f"plain sample {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
