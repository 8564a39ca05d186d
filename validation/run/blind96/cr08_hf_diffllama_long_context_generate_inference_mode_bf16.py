"""Long-context inference with HF transformers DiffLlama (differential attention: two SDPA calls
per layer sharing Q and K over the halves of V, a head-pair RMSNorm), built from a config at
12 layers, 2,048 wide, 16 heads with 4 KV heads, a 32,000 vocabulary, bf16 weights, under
torch.inference_mode: greedy generate of 24 new tokens after a 16,384-token prompt (batch 1), then
4 prompts of 2,048 tokens sampled with top-k 50 for 32 new tokens; 3 phases."""

import os

import torch
from transformers import DiffLlamaConfig, DiffLlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9608)
if SMALL:
    cfg = DiffLlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    LONG, SHORT, B = 64, 16, 2
else:
    cfg = DiffLlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=32768,
    )
    LONG, SHORT, B = 16384, 2048, 4
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = DiffLlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
model.generation_config.pad_token_id = 0
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    prompt = torch.randint(3, cfg.vocab_size, (1, LONG), device=device)
    out = model.generate(prompt, max_new_tokens=24, min_new_tokens=24, do_sample=False)
    if device == "cuda":
        print(
            f"long {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del prompt, out
    prompts = torch.randint(3, cfg.vocab_size, (B, SHORT), device=device)
    out = model.generate(prompts, max_new_tokens=32, min_new_tokens=32, do_sample=True, top_k=50)
    if device == "cuda":
        print(
            f"batch {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
