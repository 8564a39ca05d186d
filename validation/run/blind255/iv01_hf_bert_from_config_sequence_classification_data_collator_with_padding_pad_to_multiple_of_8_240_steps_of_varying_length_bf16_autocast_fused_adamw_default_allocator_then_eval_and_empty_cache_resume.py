"""A long fine-tuning run with dynamic padding under the default allocator: Hugging Face's
BertForSequenceClassification from a BertConfig (6 layers, hidden 512, 8 heads, intermediate 2,048,
vocab 30,522, 512 positions, sdpa attention, 3 labels), batch 32, every batch padded by transformers'
own DataCollatorWithPadding(pad_to_multiple_of=8) to its longest example, the example lengths drawn
on the host from a seeded random.Random (a skewed distribution: most between 16 and 160 tokens, one
batch in eight with a long tail up to 512). bf16 autocast, fused AdamW (lr 3e-5, weight decay 0.01),
linear warmup, clipping at 1.0, zero_grad(set_to_none=True). The shapes change nearly every step, so
the cache accumulates blocks of many sizes over the run.

Phases: set-up (model, optimizer); the first 40 steps; the next 200 steps (the long, fragmenting
stretch); evaluation under no_grad over 30 batches of 64 of varying length; torch.cuda.empty_cache()
then 40 more training steps. 5 phases. No value-dependent sizes: every shape comes from the host RNG."""

import random

import torch
from transformers import BertConfig, BertForSequenceClassification, DataCollatorWithPadding


class _Tok:
    """The collator only needs a tokenizer's pad() (a PreTrainedTokenizerBase API); this stand-in pads
    right with pad id 0 to a multiple of 8, like BertTokenizerFast.pad(padding=True, pad_to_multiple_of=8)."""

    padding_side = "right"
    pad_token_id = 0

    def pad(self, features, padding=True, max_length=None, pad_to_multiple_of=None, return_tensors="pt"):
        longest = max(len(f["input_ids"]) for f in features)
        if pad_to_multiple_of:
            longest = (longest + pad_to_multiple_of - 1) // pad_to_multiple_of * pad_to_multiple_of
        ids = torch.zeros(len(features), longest, dtype=torch.long)
        mask = torch.zeros(len(features), longest, dtype=torch.long)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            ids[i, :n] = torch.tensor(f["input_ids"])
            mask[i, :n] = 1
        labels = torch.tensor([f["labels"] for f in features])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


torch.manual_seed(25501)
rng = random.Random(255010)
cfg = BertConfig(
    vocab_size=30522,
    hidden_size=512,
    num_hidden_layers=6,
    num_attention_heads=8,
    intermediate_size=2048,
    max_position_embeddings=512,
    num_labels=3,
)
cfg._attn_implementation = "sdpa"
model = BertForSequenceClassification(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01, fused=True)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
collator = DataCollatorWithPadding(_Tok(), padding=True, pad_to_multiple_of=8, return_tensors="pt")


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def length():
    if rng.random() < 0.125:
        return rng.randint(160, 512)
    return rng.randint(16, 160)


def batch(n):
    feats = [
        {"input_ids": [rng.randrange(1000, 30000) for _ in range(length())], "labels": rng.randrange(3)}
        for _ in range(n)
    ]
    return {k: v.cuda(non_blocking=True) for k, v in collator(feats).items()}


def train(steps):
    model.train()
    for _ in range(steps):
        b = batch(32)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        del b, loss


report("setup")
train(40)
report("train_first_40_steps")
train(200)
report("train_next_200_steps")

model.eval()
correct = torch.zeros((), device="cuda")
with torch.no_grad():
    for _ in range(30):
        b = batch(64)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        correct += (logits.argmax(-1) == b["labels"]).sum()
        del b, logits
print(f"eval accuracy {correct.item() / (30 * 64):.3f}")
report("eval_30_batches_of_64")

torch.cuda.empty_cache()
train(40)
report("empty_cache_then_40_steps")
