"""A batch-size finder written the way forum questions about "CUDA out of memory after I caught the
error" write it, then the way the answers do. A residual MLP (8 pre-LN blocks of 1,024 -> 4,096 -> 1,024,
GELU, fp32, Adam, MSE against random targets) under `torch.cuda.set_per_process_memory_fraction` of 4 GiB
of the card (the fraction computed from `total_memory`, the same cap on both cards).

The mistakes: each caught `torch.OutOfMemoryError` is appended to a list "for the summary", and the retry
(`empty_cache()`, half the batch) is done inside the `except` block: the exception's traceback keeps the
frames of the failed step (the step function's and every module's `forward`), whose locals keep the
partial forward (or, for a failure in backward, the whole graph), so each retry has less room than the
last and the finder settles far below what fits; then an evaluation helper that catches the error with
`except ... as e: err = e` (its frame and the traceback then form a reference cycle that only the cyclic
collector frees). The fixes: `del` the list, `gc.collect()`, `empty_cache()`; a finder that only sets a flag
in the `except` block and cleans up after it; `gc.collect()` after the helper returns.

Phases: 0 model and Adam under the cap; 1 the leaky finder from 65,536 rows (a line per failure); 2 the
list dropped, `gc.collect()`, `empty_cache()`, the flag finder from 65,536, three steps at the batch found;
3 the helper evaluated at 262,144 rows under no_grad (out of memory, the cycle kept), allocated printed,
`gc.collect()`, `empty_cache()`, the helper at the batch found times four; `memory_stats()` keys printed.
4 phases. Seeded."""

import gc
import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3454)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
D, HID, BLOCKS, START, BIG, FLOOR = (64, 256, 2, 64, 256, 8) if SMALL else (1024, 4096, 8, 65536, 262144, 64)
KEYS = ("num_ooms", "num_alloc_retries", "allocated_bytes.all.peak", "num_device_alloc", "num_device_free")


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} max reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, HID)
        self.fc2 = nn.Linear(HID, D)

    def forward(self, x):
        h = self.norm(x)
        h = F.gelu(self.fc1(h))
        return x + self.fc2(h)


class ResMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(BLOCKS)])
        self.head = nn.Linear(D, D)

    def forward(self, x):
        return self.head(self.blocks(x))


if cuda:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(4 * 2**30 / total)
model = ResMLP().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
report("residual MLP and Adam under a 4 GiB cap")


def train_step(bs):
    x = torch.randn(bs, D, device=device)
    target = torch.randn(bs, D, device=device)
    out = model(x)
    loss = F.mse_loss(out, target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


# the question's finder
failures = []
bs = START
while bs >= FLOOR:
    try:
        loss = train_step(bs)
        print(f"batch {bs} fits, loss {loss:.4f}")
        break
    except torch.OutOfMemoryError as e:
        failures.append(e)
        print(f"batch {bs}: out of memory ({len(failures)} so far)")
        if cuda:
            torch.cuda.empty_cache()
            print(f"  allocated after empty_cache {torch.cuda.memory_allocated() / 2**20:.0f} MiB")
        bs //= 2
leaky_bs = bs
report(f"finder keeping the exceptions settles at {leaky_bs}")

# the answer's finder
del failures
gc.collect()
optimizer.zero_grad(set_to_none=True)
if cuda:
    torch.cuda.empty_cache()
    print(f"after del + gc.collect + empty_cache: allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB")
bs = START
while bs >= FLOOR:
    oom = False
    try:
        loss = train_step(bs)
    except torch.OutOfMemoryError:
        oom = True
    if not oom:
        break
    optimizer.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.empty_cache()
    bs //= 2
found = bs
for _ in range(3):
    loss = train_step(found)
print(f"flag finder: batch {found} (the leaky one found {leaky_bs}), loss {loss:.4f}")
report("flag finder and three steps")


def safe_eval(n):
    try:
        with torch.no_grad():
            return model(torch.randn(n, D, device=device)).pow(2).mean().item()
    except torch.OutOfMemoryError as e:
        err = e
        print(f"eval at {n} failed: {type(err).__name__}")
        return None


model.eval()
print(f"eval at {BIG}: {safe_eval(BIG)}")
if cuda:
    print(f"  allocated after the failed eval {torch.cuda.memory_allocated() / 2**20:.0f} MiB")
gc.collect()
if cuda:
    torch.cuda.empty_cache()
    print(f"  allocated after gc.collect {torch.cuda.memory_allocated() / 2**20:.0f} MiB")
val = safe_eval(4 * found)
print(f"eval at {4 * found}: {val if val is None else round(val, 4)}")
if cuda:
    stats = torch.cuda.memory_stats()
    print({k: stats[k] for k in KEYS})
report("eval helper: cycle kept, collected, then evaluation at 4x")
