"""Cache and decoding choices a user compares before serving a model by hand with HF `generate()`: a
LlamaForCausalLM from a LlamaConfig (1.1B sizes: 2,048 hidden, 16 layers, 32 heads, 8 KV heads, 8,192
intermediate, 32,000-token vocabulary) in bf16, and a 4-layer, 512-hidden Llama draft sharing the
vocabulary; greedy decoding of 8 left-padded prompts (384 to 512 tokens) for 64 new tokens with the
default dynamic cache; then assisted generation (`assistant_model=draft`, 4 draft tokens a round,
constant schedule) on three prompts one at a time (batch 1, as assisted decoding requires); then the
batch again with `cache_implementation="static"`, then with `cache_implementation="offloaded"`
(layers moved to the host between uses; the dynamic cache again on the CPU fallback), the agreement
of the three batch outputs printed; all under torch.inference_mode; 5 phases."""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34604)
if SMALL:
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    draft_config = LlamaConfig(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
    )
    BATCH, LENS, NEW, N_ASSIST = 2, (24, 32), 8, 2
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=2048,
    )
    draft_config = LlamaConfig(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    BATCH, LENS, NEW, N_ASSIST = 8, (384, 512), 64, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForCausalLM(config).to(torch.bfloat16).to(device).eval()
draft = LlamaForCausalLM(draft_config).to(torch.bfloat16).to(device).eval()
draft.generation_config.num_assistant_tokens = 4
draft.generation_config.num_assistant_tokens_schedule = "constant"
common = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=2)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gen = torch.Generator().manual_seed(11)
lengths = torch.randint(LENS[0], LENS[1] + 1, (BATCH,), generator=gen).tolist()
L = max(lengths)
ids = torch.zeros(BATCH, L, dtype=torch.long)
mask = torch.zeros_like(ids)
for r, n in enumerate(lengths):
    ids[r, L - n :] = torch.randint(3, config.vocab_size, (n,), generator=gen)
    mask[r, L - n :] = 1
ids, mask = ids.to(device), mask.to(device)

with torch.inference_mode():
    dynamic = model.generate(input_ids=ids, attention_mask=mask, **common)[:, L:].cpu()
print(f"dynamic cache: {tuple(dynamic.shape)}")
if device == "cuda":
    print(f"dynamic peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

assisted = []
with torch.inference_mode():
    for r in range(N_ASSIST):
        prompt = ids[r : r + 1, L - lengths[r] :]
        out = model.generate(input_ids=prompt, assistant_model=draft, **common)
        assisted.append(out[0, prompt.shape[1] :].cpu())
same = sum(bool((a == dynamic[r]).all()) for r, a in enumerate(assisted))
print(f"assisted: {len(assisted)} prompts, {same} equal to the batched greedy output")
if device == "cuda":
    print(f"assisted peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    static = model.generate(input_ids=ids, attention_mask=mask, cache_implementation="static", **common)[
        :, L:
    ].cpu()
print(f"static cache: agreement with dynamic {(static == dynamic).float().mean():.3f}")
if device == "cuda":
    print(f"static peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

offload = "offloaded" if device == "cuda" else "dynamic"  # the offloaded cache needs an accelerator stream
with torch.inference_mode():
    offloaded = model.generate(input_ids=ids, attention_mask=mask, cache_implementation=offload, **common)[
        :, L:
    ].cpu()
print(f"offloaded cache: agreement with dynamic {(offloaded == dynamic).float().mean():.3f}")
if device == "cuda":
    print(f"offloaded peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
