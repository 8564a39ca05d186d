"""Pre-training a GPT-NeoX on token-budget batches with a defragmentation policy read from the allocator's own
snapshot, under `PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:96,roundup_power2_divisions:[64:8,256:4,1024:2,>:1]"`
set in `os.environ` before torch is imported (fine rounding for small blocks, none above 1 GiB, and blocks over
96 MiB never split).

The model: `GPTNeoXForCausalLM` from a `GPTNeoXConfig` (8 layers, hidden 1,024, 16 heads, vocabulary 50,304,
sdpa attention), random init, bf16 autocast, AdamW (foreach), gradient clipping. Batches hold host-drawn
document lengths (64..1,024 tokens) grouped up to a token budget, right padded to the longest row with an
attention mask and -100 labels on the padding (dynamic padding).

Every 2 steps the policy walks `torch.cuda.memory_snapshot()`: the bytes of inactive blocks over all segments,
the largest of them and the reserved total; when the inactive bytes pass 25% of reserved and the largest
inactive block is under half of them, it calls `torch.cuda.empty_cache()` (and prints
`memory_stats()["inactive_split_bytes.all.current"]` before).

Phases: set-up; 12 training steps at a 4,096-token budget; no_grad evaluation over 24 documents sorted by
length (batches of 4, growing); `reset_accumulated_memory_stats()`, then 8 steps at a 6,144-token budget, the
policy still on; `memory_summary(abbreviated=True)` printed at the end. 4 phases. Control flow depends on memory
figures only (the policy's `empty_cache()` calls)."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "max_split_size_mb:96,roundup_power2_divisions:[64:8,256:4,1024:2,>:1]"
)

import torch  # noqa: E402
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM  # noqa: E402

torch.manual_seed(3024)
gen = torch.Generator().manual_seed(30240)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = GPTNeoXConfig(
    vocab_size=50304,
    hidden_size=1024,
    num_hidden_layers=8,
    num_attention_heads=16,
    intermediate_size=4096,
    max_position_embeddings=2048,
    attn_implementation="sdpa",
)
model = GPTNeoXForCausalLM(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
report("set-up")


def token_budget_batch(budget):
    lengths = []
    while True:
        n = int(torch.randint(64, 1025, (1,), generator=gen))
        if (len(lengths) + 1) * max(lengths + [n]) > budget:
            break
        lengths.append(n)
    return pad(lengths)


def pad(lengths):
    t = max(lengths)
    ids = torch.zeros(len(lengths), t, dtype=torch.long)
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(0, cfg.vocab_size, (n,), generator=gen)
        mask[i, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids.cuda(), mask.cuda(), labels.cuda()


defrags = 0


def defrag_policy(step):
    global defrags
    snap = torch.cuda.memory_snapshot()
    reserved = sum(seg["total_size"] for seg in snap)
    inactive = [b["size"] for seg in snap for b in seg["blocks"] if b["state"] == "inactive"]
    free, largest = sum(inactive), max(inactive, default=0)
    if free > 0.25 * reserved and largest < 0.5 * free:
        split = torch.cuda.memory_stats()["inactive_split_bytes.all.current"]
        print(
            f"step {step}: defrag, {len(snap)} segments, inactive {free} (split {split}), largest {largest}"
        )
        torch.cuda.empty_cache()
        defrags += 1


def train(steps, budget):
    for step in range(steps):
        ids, mask, labels = token_budget_batch(budget)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        del ids, mask, labels
        if step % 2 == 1:
            defrag_policy(step)
    print(f"{steps} steps at {budget} tokens, loss {loss.item():.4f}, defrags so far {defrags}")


train(12, 4096)
report("training")

model.eval()
docs = sorted(int(n) for n in torch.randint(64, 1025, (24,), generator=gen))
total = 0.0
with torch.no_grad():
    for i in range(0, 24, 4):
        ids, mask, labels = pad(docs[i : i + 4])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total += model(input_ids=ids, attention_mask=mask, labels=labels).loss.item()
        del ids, mask, labels
print(f"eval loss {total / 6:.4f}")
report("evaluation")

model.train()
torch.cuda.reset_accumulated_memory_stats()
train(8, 6144)
print(torch.cuda.memory_summary(abbreviated=True))
report("training at a larger budget")
