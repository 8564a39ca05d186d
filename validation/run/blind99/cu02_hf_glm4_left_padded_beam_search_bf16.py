"""Batched serving with HF GLM-4 (post-attention and post-MLP norms, partial rotary, grouped-query
attention), built from a config at 16 layers, 2,048 wide, 16 heads with 2 KV heads, a 65,536
vocabulary, bf16 weights: 4 left-padded prompts of 300 to 512 tokens (attention mask built on the
host) decoded by beam search with 4 beams and 2 returned sequences each for 40 new tokens, then
the same prompts sampled (temperature 0.8, top-k 40) for 64 new tokens; 3 phases."""

import os

import torch
from transformers import Glm4Config, Glm4ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9902)
if SMALL:
    cfg = Glm4Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        pad_token_id=0,
        eos_token_id=1,
    )
    LENGTHS, NEW_BEAM, NEW_SAMPLE = [20, 32, 25, 12], 6, 8
else:
    cfg = Glm4Config(
        vocab_size=65536,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=8192,
        pad_token_id=0,
        eos_token_id=1,
    )
    LENGTHS, NEW_BEAM, NEW_SAMPLE = [300, 512, 417, 356], 40, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = Glm4ForCausalLM(cfg).to(device=device, dtype=dtype).eval()
model.generation_config.pad_token_id = 0
model.generation_config.eos_token_id = 1

width = max(LENGTHS)
ids = torch.zeros(len(LENGTHS), width, dtype=torch.long)
mask = torch.zeros(len(LENGTHS), width, dtype=torch.long)
for i, n in enumerate(LENGTHS):
    ids[i, width - n :] = torch.randint(2, cfg.vocab_size, (n,))
    mask[i, width - n :] = 1
ids, mask = ids.to(device), mask.to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=NEW_BEAM,
        min_new_tokens=NEW_BEAM,
        length_penalty=1.2,
        do_sample=False,
    )
    if device == "cuda":
        print(
            f"beam {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=0.8,
        top_k=40,
        max_new_tokens=NEW_SAMPLE,
        min_new_tokens=NEW_SAMPLE,
    )
    if device == "cuda":
        print(
            f"sample {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
