"""Chat-style serving with HF transformers Seed-OSS (grouped-query attention with QKV biases, 128-dim
heads, a 155,136-token vocabulary), built from a config at 16 layers, 1,536 wide, 12 query and 2 KV
heads, fp16 weights, under torch.inference_mode: 6 prompts of 180 to 700 tokens left-padded on the
host (attention mask built there) sampled with typical_p 0.9, an epsilon cutoff, a repetition
penalty and a sequence bias, 2 return sequences each, 64 new tokens; then 4 prompts of 1,024 tokens
decoded greedily into a static cache with the per-step scores returned; 2 phases."""

import os

import torch
from transformers import SeedOssConfig, SeedOssForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10604)
if SMALL:
    cfg = SeedOssConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
    )
    LO, HI, NEW, LONG = 12, 40, 6, 48
else:
    cfg = SeedOssConfig(
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=16,
        num_attention_heads=12,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=32768,
    )
    LO, HI, NEW, LONG = 180, 700, 64, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = SeedOssForCausalLM(cfg).to(device=device, dtype=dtype).eval()
model.generation_config.pad_token_id = cfg.pad_token_id

lengths = torch.randint(LO, HI + 1, (6,)).tolist()
width = max(lengths)
ids = torch.full((6, width), cfg.pad_token_id, dtype=torch.long)
mask = torch.zeros(6, width, dtype=torch.long)
for i, n in enumerate(lengths):
    ids[i, width - n :] = torch.randint(3, cfg.vocab_size, (n,))
    mask[i, width - n :] = 1
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        do_sample=True,
        typical_p=0.9,
        epsilon_cutoff=3e-4,
        top_k=0,
        repetition_penalty=1.1,
        sequence_bias={(5,): -4.0, (7, 8): 2.5},
        num_return_sequences=2,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
    )
    if device == "cuda":
        print(
            f"sampled {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out
    prompts = torch.randint(3, cfg.vocab_size, (4, LONG), device=device)
    res = model.generate(
        prompts,
        do_sample=False,
        cache_implementation="static",
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        return_dict_in_generate=True,
        output_scores=True,
    )
    top = torch.stack(res.scores, dim=1).max(-1).values.mean()
    if device == "cuda":
        print(
            f"static {tuple(res.sequences.shape)} {top.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
