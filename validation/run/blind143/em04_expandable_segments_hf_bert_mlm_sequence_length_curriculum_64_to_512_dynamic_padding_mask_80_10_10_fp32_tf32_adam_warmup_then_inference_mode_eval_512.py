"""BERT masked-LM pre-training with a sequence-length curriculum under expandable segments
(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" set before torch is imported): a BertForMaskedLM
from BertConfig (12 layers, width 768, 12 heads, vocab 30,522, 512 positions), the maximum length
growing 64 -> 128 -> 256 -> 512 every 10 steps at a fixed batch of 32, each sample's length drawn by
a seeded CPU generator between half the stage's maximum and the maximum and the batch padded to its
longest (dynamic padding, attention mask), 15% of the real tokens masked (80/10/10) and the rest
labelled -100; fp32 with TF32 matmuls, Adam with linear warm-up; 40 steps, one phase per stage, then
an inference_mode evaluation of 4 batches of 64 at 512; 6 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14304)
STAGES = [16, 32, 64] if SMALL else [64, 128, 256, 512]
PER_STAGE = 2 if SMALL else 10
B, EVAL_B, EVAL_N = (4, 4, 2) if SMALL else (32, 64, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True

cfg = BertConfig(
    vocab_size=30522,
    hidden_size=64 if SMALL else 768,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 12,
    intermediate_size=256 if SMALL else 3072,
    max_position_embeddings=max(STAGES),
)
model = BertForMaskedLM(cfg).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.01)
total = PER_STAGE * len(STAGES)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (total // 4)))
gen = torch.Generator().manual_seed(11)
MASK_ID, CLS, SEP = 103, 101, 102
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch_of(batch, max_len):
    lengths = torch.randint(max_len // 2, max_len + 1, (batch,), generator=gen)
    longest = int(lengths.max())
    ids = torch.randint(1000, cfg.vocab_size, (batch, longest), generator=gen)
    attn = torch.arange(longest)[None] < lengths[:, None]
    ids[:, 0] = CLS
    ids[torch.arange(batch), lengths - 1] = SEP
    ids[~attn] = 0
    special = (ids == CLS) | (ids == SEP) | ~attn
    pick = (torch.rand(batch, longest, generator=gen) < 0.15) & ~special
    labels = ids.masked_fill(~pick, -100)
    r = torch.rand(batch, longest, generator=gen)
    ids = torch.where(pick & (r < 0.8), torch.full_like(ids, MASK_ID), ids)
    rand_tok = torch.randint(1000, cfg.vocab_size, ids.shape, generator=gen)
    ids = torch.where(pick & (r >= 0.8) & (r < 0.9), rand_tok, ids)
    return ids.to(device), attn.long().to(device), labels.to(device)


model.train()
step = 0
for max_len in STAGES:
    for _ in range(PER_STAGE):
        ids, attn, labels = batch_of(B, max_len)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
    if device == "cuda":
        print(
            f"stage {max_len} to step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, attn, labels, loss

model.eval()
hits, seen = 0, 0
with torch.inference_mode():
    for _ in range(EVAL_N):
        ids, attn, labels = batch_of(EVAL_B, STAGES[-1])
        logits = model(input_ids=ids, attention_mask=attn).logits
        sel = labels != -100
        hits += int(((logits.argmax(-1) == labels) & sel).sum())
        seen += int(sel.sum())
        del logits
if device == "cuda":
    print(f"eval acc {hits / max(seen, 1):.4f} peak {torch.cuda.max_memory_allocated()}"
          f" reserved {torch.cuda.memory_reserved()}")
print(f"done {seen > 0}")
