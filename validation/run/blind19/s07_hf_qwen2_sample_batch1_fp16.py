"""HF Qwen2ForCausalLM from a Qwen2Config (1536 wide, 8 layers, 12 heads, 2 key-value heads, 151,936
vocabulary, tied), fp16 weights, sampling generate() with top_p=0.9 and temperature 0.7 at batch 1 with
a 2,048-token prompt and 128 new tokens (min_new_tokens equal), then num_return_sequences=3 from a
512-token prompt; 2 phases."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1907)
if SMALL:
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    RUNS = ((24, 4, 1), (16, 3, 3))
else:
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )
    RUNS = ((2048, 128, 1), (512, 128, 3))
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.float16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for prompt, new, copies in RUNS:
    ids = torch.randint(0, config.vocab_size, (1, prompt), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            top_p=0.9,
            temperature=0.7,
            num_return_sequences=copies,
            pad_token_id=0,
        )
    assert out.shape == (copies, prompt + new)
    del out
    if device == "cuda":
        print(f"n{copies} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
