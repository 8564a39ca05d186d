"""Causal-LM pre-training of a GPT-2 (from GPT2Config: 8 layers, width 768, 12 heads, vocab 50,257,
1,024 positions) with length bucketing and a token budget, as fairseq/Megatron-style data loaders do:
per step a seeded CPU generator draws a bucket (128, 256, 384, 512, 768 or 1,024), the batch size is
the 16,384-token budget divided by the bucket, each sample's length is drawn inside the bucket and the
batch is padded to its own longest sample (attention mask, labels -100 on the padding); bf16
autocast, fused AdamW, clipping; 60 steps in three phases of 20, then a no_grad evaluation over the
six buckets at batch 16 with the per-token loss; 5 phases."""

import math
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14301)
BUCKETS = [16, 32, 48, 64] if SMALL else [128, 256, 384, 512, 768, 1024]
BUDGET = 256 if SMALL else 16384
STEPS, PER_PHASE = (6, 2) if SMALL else (60, 20)
EVAL_B = 2 if SMALL else 16
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = GPT2Config(
    vocab_size=50257,
    n_positions=max(BUCKETS),
    n_embd=64 if SMALL else 768,
    n_layer=2 if SMALL else 8,
    n_head=4 if SMALL else 12,
)
model = GPT2LMHeadModel(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                        fused=device == "cuda")
gen = torch.Generator().manual_seed(43)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(bucket, batch):
    prev = ([0] + BUCKETS)[BUCKETS.index(bucket)]
    lengths = torch.randint(max(prev + 1, 8), bucket + 1, (batch,), generator=gen)
    longest = int(lengths.max())
    ids = torch.randint(0, cfg.vocab_size, (batch, longest), generator=gen)
    mask = (torch.arange(longest)[None, :] < lengths[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    return ids.to(device), mask.to(device), labels.to(device), int(lengths.sum())


model.train()
for step in range(STEPS):
    bucket = BUCKETS[int(torch.randint(0, len(BUCKETS), (1,), generator=gen))]
    batch = BUDGET // bucket
    ids, mask, labels, ntok = make_batch(bucket, batch)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss = out.loss.item()
    del out, ids, mask, labels
    if (step + 1) % PER_PHASE == 0 and device == "cuda":
        print(
            f"steps {step + 1 - PER_PHASE}-{step} last bucket {bucket} x {batch} ({ntok} tokens) loss {loss:.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
nll, count = 0.0, 0
with torch.no_grad():
    for bucket in BUCKETS:
        ids, mask, labels, ntok = make_batch(bucket, EVAL_B)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=ids, attention_mask=mask).logits
        lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        tgt = labels[:, 1:]
        keep = tgt != -100
        tok = lp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        nll -= (tok * keep).sum().item()
        count += int(keep.sum())
        del logits, lp, tok
if device == "cuda":
    print(f"eval ppl {math.exp(nll / count):.1f} peak {torch.cuda.max_memory_allocated()}"
          f" reserved {torch.cuda.memory_reserved()}")
print(f"done {math.isfinite(nll)}")
