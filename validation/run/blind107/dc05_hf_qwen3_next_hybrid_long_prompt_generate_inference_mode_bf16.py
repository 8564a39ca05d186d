"""Long-context inference with HF Qwen3-Next built from a config (random weights): a hybrid of
gated DeltaNet linear attention (transformers' torch chunked delta rule and causal conv1d, no fla
kernels) and gated full attention every fourth layer, a sparse MoE of 16 experts (top 4) with a
shared expert; 8 layers of 1024 wide, bf16, under inference_mode: greedy generation of 48 tokens
after one 6,144-token prompt, then 32 tokens for a left-padded batch of two prompts (2,048 and
1,300 tokens, the mask from host lengths); 3 phases."""

import os

import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10705)
device = "cuda" if torch.cuda.is_available() else "cpu"
L1, L2, N1, N2 = (100, (64, 40), 4, 3) if SMALL else (6144, (2048, 1300), 48, 32)
cfg = Qwen3NextConfig(
    vocab_size=1000 if SMALL else 32000,
    hidden_size=128 if SMALL else 1024,
    intermediate_size=256 if SMALL else 2816,
    num_hidden_layers=4 if SMALL else 8,
    num_attention_heads=4 if SMALL else 8,
    num_key_value_heads=2,
    head_dim=32 if SMALL else 128,
    linear_num_key_heads=4 if SMALL else 8,
    linear_num_value_heads=8 if SMALL else 16,
    linear_key_head_dim=32 if SMALL else 64,
    linear_value_head_dim=32 if SMALL else 64,
    num_experts=4 if SMALL else 16,
    num_experts_per_tok=2 if SMALL else 4,
    moe_intermediate_size=64 if SMALL else 512,
    shared_expert_intermediate_size=64 if SMALL else 512,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = Qwen3NextForCausalLM(cfg).to(device, torch.bfloat16).eval()
gen = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    prompt = torch.randint(3, cfg.vocab_size, (1, L1), device=device)
    out = model.generate(prompt, max_new_tokens=N1, min_new_tokens=N1, **gen)
if device == "cuda":
    print(
        f"long {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del prompt, out
width = max(L2)
ids = torch.zeros(len(L2), width, dtype=torch.long)
mask = torch.zeros(len(L2), width, dtype=torch.long)
for i, n in enumerate(L2):
    ids[i, width - n :] = torch.randint(3, cfg.vocab_size, (n,))
    mask[i, width - n :] = 1
with torch.inference_mode():
    out = model.generate(
        ids.to(device), attention_mask=mask.to(device), max_new_tokens=N2, min_new_tokens=N2, **gen
    )
if device == "cuda":
    print(
        f"batch {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
