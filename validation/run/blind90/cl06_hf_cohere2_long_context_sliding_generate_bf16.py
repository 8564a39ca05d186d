"""Long-context inference with HF Cohere2ForCausalLM (three sliding-window layers of 4,096 with
RoPE to each global layer without positions, parallel attention and MLP blocks, logit scaling)
built from its config, 16 layers, 2,048 wide, 4 KV heads, a 256,000 vocabulary, tied embeddings,
bf16 weights: greedy generation of 32 new tokens after a 16,384-token prompt at batch 1, then after
two 6,144-token prompts, under inference_mode with the dynamic cache; 3 phases."""

import os

import torch
from transformers import Cohere2Config, Cohere2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9006)
if SMALL:
    config = Cohere2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    RUNS, NEW = ((1, 40), (2, 24)), 4
else:
    config = Cohere2Config(
        vocab_size=256000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        sliding_window=4096,
        max_position_embeddings=32768,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    RUNS, NEW = ((1, 16384), (2, 6144)), 32
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Cohere2ForCausalLM(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b, L in RUNS:
    ids = torch.randint(3, config.vocab_size, (b, L), device=device)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
    if device == "cuda":
        print(
            f"batch {b} prompt {L} out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
