"""HF FalconForCausalLM (Falcon-1B-like: 24 layers, 2,048 wide, multi-query attention, parallel
attention/MLP, rotary, 65,024 vocab) built from its config in bf16 weights, serving
document-grounded requests with prompt-lookup decoding (generate's n-gram candidates from the prompt,
10 candidate tokens, max 3-gram match): a 2,000-token prompt of repeated passages, 160 new tokens;
then a 700-token prompt, 200 new tokens; then the same 700-token prompt decoded greedily without
lookup; 3 phases."""

import os

import torch
from transformers import FalconConfig, FalconForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8905)
if SMALL:
    config = FalconConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    CASES = ((40, 6), (24, 8))
else:
    config = FalconConfig(
        vocab_size=65024,
        hidden_size=2048,
        num_hidden_layers=24,
        num_attention_heads=32,
        max_position_embeddings=4096,
    )
    CASES = ((2000, 160), (700, 200))
config.pad_token_id = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = FalconForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def prompt(L):
    passage = torch.randint(3, config.vocab_size, (1, L // 5), device=device)
    return torch.cat([passage] * 5, 1)


def report(tag, out):
    if device == "cuda":
        print(
            f"{tag} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


for L, new in CASES:
    ids = prompt(L)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            prompt_lookup_num_tokens=10,
            max_matching_ngram_size=3,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
        )
    report(f"lookup {L}", out)
with torch.inference_mode():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
    )
report("greedy", out)
