"""A GPT-2 (small, from `GPT2Config`, SDPA attention) fine-tuned while the script retunes the caching
allocator at run time with `torch.cuda.memory._set_allocator_settings(...)`, as one does after reading a
memory profile, under a per-process limit of 25% of the card (`set_per_process_memory_fraction(0.25)`).

Phases:
1. set-up: the model in fp32 on the GPU, `AdamW` (foreach), the limit set, then
   `_set_allocator_settings("garbage_collection_threshold:0.5")` (cached blocks reclaimed once usage
   passes half the limit);
2. 6 training steps under bf16 autocast at batch 6 with varying lengths (384, 1024, 640, 896, 512, 1024);
3. `_set_allocator_settings("roundup_power2_divisions:[256:1,1024:4,>:2],max_split_size_mb:100")` and
   `empty_cache()`, then the same 6 lengths again at batch 6;
4. a batch-size finder at 1,024 tokens: forward and backward at 4, 8, 16, ... until
   `torch.OutOfMemoryError`, reading `memory_stats()` (`num_ooms`, `num_alloc_retries`) after each try and
   `empty_cache()` after the failure, then 2 optimizer steps at half the largest batch that fit;
5. `_set_allocator_settings("garbage_collection_threshold:0.9")`, then no_grad perplexity over 4 batches of
   12 x 1,024 in bf16 autocast.
The only value that decides a size is the batch finder's OOM (a memory figure). Seeded."""

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(3103)
dev = torch.device("cuda")


def report(tag):
    s = torch.cuda.memory_stats()
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()} "
        f"ooms {s['num_ooms']} retries {s['num_alloc_retries']}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0)
cfg._attn_implementation = "sdpa"
model = GPT2LMHeadModel(cfg).to(dev)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, foreach=True)
torch.cuda.set_per_process_memory_fraction(0.25)
torch.cuda.memory._set_allocator_settings("garbage_collection_threshold:0.5")
report("set-up")


def step(bs, length, update=True):
    ids = torch.randint(0, cfg.vocab_size, (bs, length), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    if update:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


LENGTHS = [384, 1024, 640, 896, 512, 1024]
for n in LENGTHS:
    print(f"gc-threshold step len {n} loss {step(6, n):.4f}")
report("steps under gc threshold 0.5")

torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:[256:1,1024:4,>:2],max_split_size_mb:100")
torch.cuda.empty_cache()
for n in LENGTHS:
    print(f"rounded step len {n} loss {step(6, n):.4f}")
report("steps with roundup list and max split")

bs, fit = 4, 0
while bs <= 256:
    try:
        step(bs, 1024, update=False)
        fit = bs
        ok = True
    except torch.OutOfMemoryError:
        ok = False
    opt.zero_grad(set_to_none=True)
    s = torch.cuda.memory_stats()
    print(f"finder bs {bs} ok {ok} ooms {s['num_ooms']} retries {s['num_alloc_retries']}")
    if not ok:
        torch.cuda.empty_cache()
        break
    bs *= 2
use = max(fit // 2, 1)
for _ in range(2):
    print(f"finder-sized step bs {use} loss {step(use, 1024):.4f}")
report("batch finder")

torch.cuda.memory._set_allocator_settings("garbage_collection_threshold:0.9")
model.eval()
nll = 0.0
with torch.no_grad():
    for _ in range(4):
        ids = torch.randint(0, cfg.vocab_size, (12, 1024), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits
        nll += F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()).item()
        del ids, logits
print(f"eval ppl {torch.tensor(nll / 4).exp().item():.2f}")
report("evaluation under gc threshold 0.9")
