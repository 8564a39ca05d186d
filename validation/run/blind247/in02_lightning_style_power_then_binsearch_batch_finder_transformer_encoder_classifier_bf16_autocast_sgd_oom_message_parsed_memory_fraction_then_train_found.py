"""The batch-size finder of PyTorch Lightning's `Tuner.scale_batch_size(mode="binsearch")`, written out by
hand: a trial is 2 training steps of an `nn.TransformerEncoder` text classifier (8 layers, d 768, 12
heads, feed-forward 3072, GELU, batch_first, norm_first, sequence 256, vocab 30522, mean-pooled head)
in bf16 autocast with SGD momentum, under `torch.cuda.set_per_process_memory_fraction(0.03)` (4.5 GB).
Power scaling from batch 2 doubles until a trial raises `torch.cuda.OutOfMemoryError`; binary search
then halves the interval between the last batch that fitted and the first that failed until they are
one apart (Lightning's `_run_binary_scaling`). As Lightning's `garbage_collection_cuda()`, every trial
ends with `gc.collect()` and `torch.cuda.empty_cache()`, after an out-of-memory inside the `except`
block (its traceback alive); the error's "Tried to allocate" figure is parsed and printed. The optimizer's
momentum is dropped between trials (`opt.state.clear()`, as Lightning restores its checkpoint). Then 3
steps at the batch found, then inference under `torch.inference_mode` at twice that batch.

The answer is the batch found and the memory figures. No value-dependent sizes. 5 phases."""

import gc
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2472)
V, D, T, C = 30522, 768, 256, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, T, D))
        layer = nn.TransformerEncoderLayer(
            D, 12, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.enc = nn.TransformerEncoder(layer, 8, enable_nested_tensor=False)
        self.head = nn.Linear(D, C)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids) + self.pos).mean(1))


torch.cuda.set_per_process_memory_fraction(0.03)
model = Classifier().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
report("setup")


def garbage_collection_cuda():
    gc.collect()
    torch.cuda.empty_cache()


def trial(batch):
    model.train()
    for _ in range(2):
        ids = torch.randint(0, V, (batch, T), device="cuda")
        y = torch.randint(0, C, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(ids), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def fits(batch):
    try:
        trial(batch)
        ok = True
    except torch.cuda.OutOfMemoryError as e:
        opt.zero_grad(set_to_none=True)
        m = re.search(r"Tried to allocate ([0-9.]+ [KMG]?i?B)", str(e))
        print(f"batch {batch}: out of memory, tried to allocate {m.group(1)}")
        garbage_collection_cuda()
        ok = False
    opt.state.clear()
    garbage_collection_cuda()
    if ok:
        print(f"batch {batch}: fits")
    return ok


batch = 2
while fits(batch):
    batch *= 2
low, high = batch // 2, batch
print("power scaling: fits", low, "fails", high)
report("power_scaling")

while high - low > 1:
    mid = (low + high) // 2
    if fits(mid):
        low = mid
    else:
        high = mid
found = low
print("found batch", found)
report("binary_search")

model.train()
for step in range(3):
    ids = torch.randint(0, V, (found, T), device="cuda")
    y = torch.randint(0, C, (found,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(ids), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, round(loss.item(), 3))
del ids, y, loss
report("train_found_batch")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids = torch.randint(0, V, (2 * found, T), device="cuda")
    pred = model(ids).argmax(-1)
    print("predicted", pred.shape[0])
report("inference_twice_the_batch")
