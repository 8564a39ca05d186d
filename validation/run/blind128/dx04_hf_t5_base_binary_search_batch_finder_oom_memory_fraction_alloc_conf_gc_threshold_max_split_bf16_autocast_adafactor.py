"""A batch-size finder that doubles then bisects (as Lightning's "binsearch" mode): the allocator is
configured before torch is imported (PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6,
max_split_size_mb:256) and the process capped with set_per_process_memory_fraction(0.1); a T5-base
from T5Config (fp32 weights, bf16 autocast, Hugging Face's Adafactor with a fixed learning rate)
takes one training step (512 source, 128 target tokens) at batch 8, 16, 32, ... until one raises
torch.OutOfMemoryError, then three bisection steps between the last fitting and the first failing
batch; after each failure the gradients are dropped and the cache emptied; then two training steps
at the largest batch that fitted and a greedy generate of 24 tokens; 6 phases."""

import gc
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.6,max_split_size_mb:256"

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12804)
if SMALL:
    cfg = T5Config(
        vocab_size=512,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    SRC, TGT, START, LIMIT = 32, 16, 2, 8
else:
    cfg = T5Config(
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=3072,
        num_layers=12,
        num_heads=12,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    SRC, TGT, START, LIMIT = 512, 128, 8, 4096
FRACTION = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)
model = T5ForConditionalGeneration(cfg).to(device)
optimizer = Adafactor(
    model.parameters(), lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False
)


def train_step(batch):
    src = torch.randint(0, cfg.vocab_size, (batch, SRC), device=device)
    tgt = torch.randint(0, cfg.vocab_size, (batch, TGT), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(input_ids=src, labels=tgt).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def fits(batch):
    failed = False
    try:
        train_step(batch)
    except torch.OutOfMemoryError:
        failed = True
    if failed:
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return not failed


def report(name):
    if device == "cuda":
        print(
            f"{name} allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


if device == "cuda":
    print(
        f"model {torch.cuda.memory_allocated()}"
        f" limit {int(FRACTION * torch.cuda.get_device_properties(0).total_memory)}"
    )
    torch.cuda.reset_peak_memory_stats()
model.train()
low, high = None, START
while high <= LIMIT and fits(high):
    low, high = high, 2 * high
print(f"doubling: fits {low}, fails {high}")
report("doubling")
for _ in range(3):
    if high - low <= 1:
        break
    mid = (low + high) // 2
    if fits(mid):
        low = mid
    else:
        high = mid
print(f"bisection: fits {low}, fails {high}")
report("bisection")
for _ in range(2):
    loss = train_step(low)
print(f"train at {low} loss {loss:.3f}")
report("train")
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    src = torch.randint(0, cfg.vocab_size, (low, SRC), device=device)
    out = model.generate(input_ids=src, max_new_tokens=24, do_sample=False)
print(f"generate {tuple(out.shape)}")
report("generate")
