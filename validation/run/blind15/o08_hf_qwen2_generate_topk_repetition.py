"""HF Qwen2ForCausalLM from a Qwen2Config (896 wide, 8 layers, 14 heads, 2 key-value heads, 151,936
vocabulary, tied), bf16 weights, sampling generate() with top_k=50, temperature 0.8 and
repetition_penalty=1.1 at batch 8, prompt 256, 128 new tokens (min_new_tokens equal), then the same with
num_return_sequences=4 at batch 2; 2 phases."""

import os

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1508)
if SMALL:
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    BATCH, PROMPT, NEW = 2, 8, 4
else:
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=8,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    BATCH, PROMPT, NEW = 8, 256, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for name, batch, copies in (("sample", BATCH, 1), ("sample4", max(BATCH // 4, 1), 4)):
    ids = torch.randint(0, config.vocab_size, (batch, PROMPT), device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=True,
            top_k=50,
            temperature=0.8,
            repetition_penalty=1.1,
            num_return_sequences=copies,
            pad_token_id=0,
        )
    assert out.shape == (batch * copies, PROMPT + NEW)
    del out
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
