"""Long-prompt inference with HF transformers Zamba2 (Mamba-2 layers with two shared attention
blocks interleaved every third layer, LoRA adapters per use, the torch chunked-scan path: no
mamba-ssm kernels), built from a config at 18 layers, 1,536 wide, 24 attention heads, 48 Mamba
heads, a 32,000 vocabulary, bf16 weights, under torch.inference_mode: greedy generate of 24 new
tokens after a 4,096-token prompt (batch 1), then 4 prompts of 1,024 tokens with top-p 0.9
sampling for 32 new tokens; 3 phases."""

import os

import torch
from transformers import Zamba2Config, Zamba2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10108)
if SMALL:
    cfg = Zamba2Config(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=6,
        layers_block_type=["linear_attention", "linear_attention", "hybrid"] * 2,
        num_attention_heads=4,
        n_mamba_heads=4,
        mamba_d_state=16,
        adapter_rank=8,
        chunk_size=16,
        max_position_embeddings=512,
    )
    LONG, SHORT, B = 96, 16, 2
else:
    cfg = Zamba2Config(
        vocab_size=32000,
        hidden_size=1536,
        num_hidden_layers=18,
        layers_block_type=["linear_attention", "linear_attention", "hybrid"] * 6,
        num_attention_heads=24,
        n_mamba_heads=48,
        mamba_d_state=64,
        num_mem_blocks=2,
        use_shared_attention_adapter=True,
        adapter_rank=128,
        max_position_embeddings=16384,
    )
    LONG, SHORT, B = 4096, 1024, 4
cfg.use_mamba_kernels = False
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Zamba2ForCausalLM(cfg).to(device=device, dtype=dtype).eval()
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
    out = model.generate(prompts, max_new_tokens=32, min_new_tokens=32, do_sample=True, top_p=0.9, top_k=0)
    if device == "cuda":
        print(
            f"batch {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
