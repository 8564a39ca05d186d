"""One long variable-shape run whose allocator settings change at run time, as a user chasing
fragmentation would: Hugging Face's LlamaForCausalLM from a LlamaConfig (6 layers, hidden 768, 12 query
heads and 4 key/value heads, intermediate 2,048, vocab 32,000, 2,048 positions, sdpa attention), weights
in bf16 (pure bf16, no autocast), AdamW (foreach, lr 2e-4, weight decay 0.1), clipping at 1.0. Each
optimizer step accumulates 2 micro-batches; every micro-batch has a batch size and length drawn on the
host from a seeded random.Random (batch 2-8, length 64-1,024 in multiples of 64), right padding with an
attention mask and -100 labels.

Phases: set-up; 40 steps under the default settings; torch.cuda.memory._set_allocator_settings(
"max_split_size_mb:64") then 40 steps; torch.cuda.empty_cache() and _set_allocator_settings(
"expandable_segments:True") then 40 steps; evaluation under no_grad over 20 batches of the same
distribution. 5 phases. Every shape comes from the host RNG."""

import random

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(25505)
rng = random.Random(255050)
V = 32000
cfg = LlamaConfig(
    vocab_size=V,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=6,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, foreach=True)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def micro_batch():
    b = rng.randint(2, 8)
    lengths = [rng.randint(1, 16) * 64 for _ in range(b)]
    longest = max(lengths)
    ids = torch.zeros(b, longest, dtype=torch.long)
    mask = torch.zeros(b, longest, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, V, (n,))
        mask[i, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids.cuda(), mask.cuda(), labels.cuda()


def train(steps):
    model.train()
    for _ in range(steps):
        for _ in range(2):
            ids, mask, labels = micro_batch()
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / 2
            loss.backward()
            del ids, mask, labels, loss
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)


report("setup")
train(40)
report("default_settings_40_steps")
torch.cuda.memory._set_allocator_settings("max_split_size_mb:64")
train(40)
report("max_split_size_mb_64_40_steps")
torch.cuda.empty_cache()
torch.cuda.memory._set_allocator_settings("expandable_segments:True")
train(40)
report("expandable_segments_40_steps")

model.eval()
total = torch.zeros((), device="cuda")
with torch.no_grad():
    for _ in range(20):
        ids, mask, labels = micro_batch()
        total += model(input_ids=ids, attention_mask=mask, labels=labels).loss.float()
        del ids, mask, labels
print(f"eval loss {total.item() / 20:.3f}")
report("eval_no_grad_20_batches")
