"""Fine-tuning on a shared GPU with an emergency reserve: the process caps itself with
`torch.cuda.set_per_process_memory_fraction(0.07)` (about 5.5 GiB of an H100) and, first thing, parks 1 GiB
in a `torch.cuda.MemPool(use_on_oom=True)` (four 256 MiB tensors made under `use_mem_pool` and deleted, so the
pool keeps their cached segments): an allocation that would otherwise fail is served from the reserve's free
blocks. Evaluation logits go to a second pool made with `MemPool(no_split=True)`.

The model: `BertForSequenceClassification` from a `BertConfig` (8 layers, hidden 768, 12 heads, 3 labels,
sdpa attention), random init, trained under bf16 autocast with fused AdamW on sequences of 256 tokens.

Phases: set-up (reserve pool, model, optimizer); a batch-size finder that starts at 192 and halves on
`torch.OutOfMemoryError` (inputs, outputs and gradients dropped, `empty_cache()`, then the next size); 6
training steps at the size found; inference_mode evaluation at 256, 128 and 192 rows whose logits and
softmax are kept inside `use_mem_pool(eval_pool)`; the reserve and the evaluation pool deleted,
`empty_cache()`, the fraction raised to 0.25 and 3 steps at twice the size found. 5 phases. Batch sizes
depend only on memory figures (the out-of-memory errors)."""

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(3022)
SEQ = 256


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


torch.cuda.set_per_process_memory_fraction(0.07)
reserve = torch.cuda.MemPool(use_on_oom=True)
with torch.cuda.use_mem_pool(reserve):
    spare = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
del spare
eval_pool = torch.cuda.MemPool(no_split=True)

cfg = BertConfig(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=8,
    num_attention_heads=12,
    intermediate_size=3072,
    num_labels=3,
    attn_implementation="sdpa",
)
model = BertForSequenceClassification(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)
report("set-up")


def make_batch(bs):
    ids = torch.randint(0, cfg.vocab_size, (bs, SEQ), device="cuda")
    mask = torch.ones(bs, SEQ, dtype=torch.long, device="cuda")
    mask[bs // 2 :, SEQ * 3 // 4 :] = 0
    labels = torch.randint(0, 3, (bs,), device="cuda")
    return ids, mask, labels


def train_step(bs):
    ids, mask, labels = make_batch(bs)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask).logits
    loss = F.cross_entropy(logits.float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


bs = 192
while True:
    try:
        loss = train_step(bs)
        print(f"batch {bs} fits, loss {loss:.4f}")
        break
    except torch.OutOfMemoryError:
        print(f"batch {bs} out of memory")
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        bs //= 2
report("batch finder")

for step in range(6):
    loss = train_step(bs)
print(f"trained at {bs}, loss {loss:.4f}")
report("training")

model.eval()
kept = []
with torch.inference_mode():
    for ebs in (256, 128, 192):
        ids, mask, _ = make_batch(ebs)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=mask).logits
        with torch.cuda.use_mem_pool(eval_pool):
            probs = F.softmax(out.float(), dim=-1)
            kept.append(probs)
        del ids, mask, out
print(f"eval rows {sum(k.shape[0] for k in kept)}")
report("evaluation")

del kept, probs
del reserve, eval_pool
torch.cuda.empty_cache()
torch.cuda.set_per_process_memory_fraction(0.25)
model.train()
for step in range(3):
    loss = train_step(2 * bs)
print(f"trained at {2 * bs}, loss {loss:.4f}")
report("after the reserve")
