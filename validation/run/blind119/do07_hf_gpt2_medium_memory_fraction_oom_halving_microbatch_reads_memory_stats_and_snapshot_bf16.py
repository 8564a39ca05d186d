"""HF GPT-2 medium (from GPT2Config: 24 layers, width 1024) trained under bf16 autocast with AdamW
inside a process capped at 15% of the GPU by torch.cuda.set_per_process_memory_fraction: each global
batch of 32 x 1,024 tokens is split into micro-batches with gradient accumulation; an OutOfMemoryError
is caught, the partial gradients, the loss and the cache are freed, and the micro-batch is halved and
the batch retried (from 32); after each step the script reads torch.cuda.memory_stats() (num_ooms,
num_alloc_retries, inactive_split_bytes) and torch.cuda.memory_snapshot() (the cached but free bytes
per segment) and empties the cache when more than 1 GiB sits free in split segments; 6 phases."""

import gc
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11907)
FRACTION = 0.15
GLOBAL, T = (4, 64) if SMALL else (32, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"

if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)
cfg = GPT2Config(
    n_embd=128 if SMALL else 1024,
    n_layer=2 if SMALL else 24,
    n_head=4 if SMALL else 16,
    n_positions=1024,
    resid_pdrop=0.1,
    embd_pdrop=0.1,
    attn_pdrop=0.1,
)
model = GPT2LMHeadModel(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
micro = GLOBAL


def report(what):
    if device == "cuda":
        print(
            f"{what} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def accumulate(ids):
    total = 0.0
    for chunk in ids.split(micro):
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=chunk, labels=chunk).loss * (chunk.shape[0] / ids.shape[0])
        loss.backward()
        total += loss.item()
    return total


def train_step():
    global micro
    ids = torch.randint(0, cfg.vocab_size, (GLOBAL, T), device=device)
    while True:
        try:
            loss = accumulate(ids)
            break
        except torch.OutOfMemoryError:
            pass
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
        micro //= 2
        print(f"out of memory: micro-batch now {micro}")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def housekeeping():
    if device != "cuda":
        return
    stats = torch.cuda.memory_stats()
    free_in_segments = sum(
        block["size"]
        for seg in torch.cuda.memory_snapshot()
        for block in seg["blocks"]
        if block["state"] == "inactive"
    )
    print(
        f"ooms {stats['num_ooms']} retries {stats['num_alloc_retries']}"
        f" inactive split {stats['inactive_split_bytes.all.current']} free in segments {free_in_segments}"
    )
    if free_in_segments > 1 << 30:
        torch.cuda.empty_cache()


report("model")
for step in range(3):
    loss = train_step()
    housekeeping()
    report(f"step {step} micro {micro} loss {loss:.3f}")
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, cfg.vocab_size, (micro, T), device=device)
    nll = model(input_ids=ids, labels=ids).loss
housekeeping()
report(f"eval nll {nll.item():.3f}")
