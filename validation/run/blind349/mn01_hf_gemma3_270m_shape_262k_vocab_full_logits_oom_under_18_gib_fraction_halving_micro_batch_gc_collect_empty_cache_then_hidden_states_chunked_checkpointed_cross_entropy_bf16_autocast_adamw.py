"""A Gemma-3 270M-shaped causal LM (transformers 5.17 `Gemma3ForCausalLM` from a `Gemma3TextConfig`: 18 layers
of 640, 4 query heads and 1 key/value head of 256, MLP 2,048, a 262,144-token vocabulary with the embedding
tied to the head, sliding window 512 on five layers of six, SDPA) fine-tuned in fp32 weights under bf16
autocast with AdamW, on a card shared with other jobs: `torch.cuda.set_per_process_memory_fraction` leaves
this process 18 GiB.

What a user does after the first CUDA OOM. The first try passes `labels=` at micro-batch 8 x 1,024: the
(8, 1024, 262144) logits, their fp32 upcast in the loss and the log-softmax do not fit. The OOM is caught
(`torch.OutOfMemoryError`), the flag set, and outside the `except` block the usual cleanup runs
(`optimizer.zero_grad(set_to_none=True)`, `gc.collect()`, `torch.cuda.empty_cache()`); the micro-batch is
halved and the number of accumulation steps doubled (the same 8 sequences a step) until a whole step
succeeds. Then the fix found on the forums: the logits are never made whole. The decoder's last hidden
states (`model.model(...)`) are cut into chunks of 1,024 rows, each chunk's logits and summed cross-entropy
computed inside `torch.utils.checkpoint(use_reentrant=False)` (the backward recomputes one chunk at a time),
at micro-batch 8 again in one step; then an evaluation of the same chunked loss under `no_grad` at 16.

Phases: 0 model and AdamW; 1 the full-logits step that runs out of memory, with the cleanup; 2 the halving
loop until an accumulated step fits, then one more step at that size; 3 two steps of the chunked
checkpointed loss at micro-batch 8; 4 chunked evaluation under no_grad at 16 x 1,024. Seeded."""

import gc
import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(349_01)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, FF, L, HD, T, B, CHUNK, WIN = 1024, 64, 128, 6, 16, 64, 8, 128, 32
else:
    V, D, FF, L, HD, T, B, CHUNK, WIN = 262144, 640, 2048, 18, 256, 1024, 8, 1024, 512
CAP_BYTES = 18 * 2**30


def report(tag):
    if cuda:
        s = torch.cuda.memory_stats()
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()} "
            f"num_ooms {s.get('num_ooms', 0)} num_alloc_retries {s.get('num_alloc_retries', 0)}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


if cuda:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_BYTES / total)
    print(f"memory fraction {CAP_BYTES / total:.4f} of {total} bytes")

config = Gemma3TextConfig(
    vocab_size=V,
    hidden_size=D,
    intermediate_size=FF,
    num_hidden_layers=L,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=HD,
    max_position_embeddings=32768,
    sliding_window=WIN,
    query_pre_attn_scalar=HD,
    tie_word_embeddings=True,
    attn_implementation="sdpa",
    use_cache=False,
)
model = Gemma3ForCausalLM(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
report("Gemma3 270M shape and AdamW")


def tokens(n):
    ids = torch.randint(0, V, (n, T), device=device)
    return ids, ids.clone()


def hf_step(micro, accum):
    """One optimizer step of `accum` micro-batches through the model's own loss (full logits)."""
    for _ in range(accum):
        ids, labels = tokens(micro)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=labels)
        (out.loss / accum).backward()
        loss = out.loss.item()
        del out
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


micro, accum = B, 1
oom = False
try:
    hf_step(micro, accum)
except torch.OutOfMemoryError as e:
    print(f"OOM at micro-batch {micro}: {str(e).splitlines()[0][:80]}")
    oom = True
if oom:
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
report("full logits at micro-batch 8: OOM caught, cleanup")

done = not oom
while not done:
    micro, accum = micro // 2, accum * 2
    if micro == 0:
        raise SystemExit("no micro-batch fits")
    oom = False
    try:
        loss = hf_step(micro, accum)
        done = True
        print(f"micro-batch {micro} x {accum} accumulation steps fits: loss {loss:.3f}")
    except torch.OutOfMemoryError:
        print(f"OOM at micro-batch {micro}")
        oom = True
    if oom:
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
loss = hf_step(micro, accum)
print(f"again at micro-batch {micro}: loss {loss:.3f}")
report("halved micro-batch with gradient accumulation")


def chunk_ce(h, w, y):
    logits = F.linear(h, w).float()
    return F.cross_entropy(logits, y, reduction="sum", ignore_index=-100)


def chunked_loss(ids, labels):
    h = model.model(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, D)
    y = labels[:, 1:].reshape(-1)
    w = model.lm_head.weight
    total = h.new_zeros((), dtype=torch.float32)
    for s in range(0, h.size(0), CHUNK):
        total = total + checkpoint(chunk_ce, h[s : s + CHUNK], w, y[s : s + CHUNK], use_reentrant=False)
    return total / y.numel()


for step in range(2):
    ids, labels = tokens(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = chunked_loss(ids, labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"chunked step {step}: loss {loss.item():.3f}")
del loss
report("hidden states, chunked checkpointed cross-entropy at micro-batch 8")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids, labels = tokens(2 * B)
    val = chunked_loss(ids, labels)
print(f"eval loss {val.item():.3f}")
report("chunked evaluation under no_grad at 16")
