"""Length-grouped, token-budget batching over a long run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
set before torch is imported. transformers' GPT2LMHeadModel from a GPT2Config (8 layers, 640 wide,
10 heads, vocab 32,000, 1,024 positions, sdpa attention). A sampler in the manner of Trainer's
group_by_length (LengthGroupedSampler): a seeded random.Random draws 50 x 64 document lengths (log-uniform
between 24 and 1,024 tokens), shuffles them into mega-batches of 64 and sorts each by length, longest first;
each batch then takes documents in that order until a budget of 8,192 padded tokens is reached (so short
documents come in batches of up to 64 and long ones in batches of 8), padded right to the batch's longest
with an attention mask and -100 labels on the padding. bf16 autocast, foreach AdamW (lr 3e-4, betas
0.9/0.95, weight decay 0.1 on matrices only), clipping at 1.0.

Phases: set-up; the first 80 steps; the next 80 steps; evaluation under no_grad of 15 batches of the
same sampler; 6 steps at the full 1,024 tokens, batch 8. 5 phases. Every shape comes from the host RNG."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import math
import random

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(25502)
rng = random.Random(255020)
V, CTX, BUDGET = 32000, 1024, 8192
cfg = GPT2Config(
    vocab_size=V, n_positions=CTX, n_embd=640, n_layer=8, n_head=10, bos_token_id=V - 1, eos_token_id=V - 1
)
cfg._attn_implementation = "sdpa"
model = GPT2LMHeadModel(cfg).cuda()
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    foreach=True,
)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def length_grouped_batches():
    """LengthGroupedSampler-style order (mega-batches of 64 sorted by length), then token-budget batches."""
    while True:
        lens = [int(math.exp(rng.uniform(math.log(24), math.log(CTX)))) for _ in range(50 * 64)]
        rng.shuffle(lens)
        order = []
        for i in range(0, len(lens), 64):
            order += sorted(lens[i : i + 64], reverse=True)
        cur = []
        for n in order:
            if cur and max([*cur, n]) * (len(cur) + 1) > BUDGET:
                yield cur
                cur = []
            cur.append(n)


def collate(lens):
    longest = max(lens)
    ids = torch.zeros(len(lens), longest, dtype=torch.long)
    mask = torch.zeros(len(lens), longest, dtype=torch.long)
    for i, n in enumerate(lens):
        ids[i, :n] = torch.randint(0, V, (n,))
        mask[i, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids.cuda(), mask.cuda(), labels.cuda()


def step(lens):
    ids, mask, labels = collate(lens)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


batches = length_grouped_batches()
report("setup")
model.train()
for _ in range(80):
    step(next(batches))
report("train_steps_0_79")
for _ in range(80):
    step(next(batches))
report("train_steps_80_159")

model.eval()
total = torch.zeros((), device="cuda")
with torch.no_grad():
    for _ in range(15):
        ids, mask, labels = collate(next(batches))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total += model(input_ids=ids, attention_mask=mask, labels=labels).loss.float()
        del ids, mask, labels
print(f"eval loss {total.item() / 15:.3f}")
report("eval_no_grad_15_batches")

model.train()
for _ in range(6):
    step([CTX] * (BUDGET // CTX))
report("full_context_6_steps")
