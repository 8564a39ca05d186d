"""HF Qwen3ForCausalLM from a Qwen3Config (1024 wide, 8 layers, 16 heads of 128, 8 key-value heads,
151,936 vocabulary, tied), bf16 weights, greedy generate() on a left-padded batch of 4 prompts of 180
to 420 tokens (padding in the attention mask), 96 new tokens (min_new_tokens equal); 1 phase."""

import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2005)
if SMALL:
    config = Qwen3Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    LENGTHS, NEW = (6, 9, 12, 16), 4
else:
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    LENGTHS, NEW = (180, 260, 340, 420), 96
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
longest = max(LENGTHS)
ids = torch.zeros(len(LENGTHS), longest, dtype=torch.long, device=device)
mask = torch.zeros_like(ids)
for i, n in enumerate(LENGTHS):
    ids[i, longest - n :] = torch.randint(1, config.vocab_size, (n,), device=device)
    mask[i, longest - n :] = 1
with torch.no_grad():
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
assert out.shape == (len(LENGTHS), longest + NEW)
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
