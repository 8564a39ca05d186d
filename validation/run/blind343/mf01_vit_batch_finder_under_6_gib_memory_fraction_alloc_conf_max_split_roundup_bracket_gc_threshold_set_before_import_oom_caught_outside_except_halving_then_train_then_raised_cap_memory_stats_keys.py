"""A ViT classifier whose batch size is found by trial under a fixed memory budget, the way a user shares a
card: `PYTORCH_CUDA_ALLOC_CONF` is set by the script in `os.environ` before `import torch`
(`max_split_size_mb:256`, `roundup_power2_divisions:[256:1,512:2,1024:4,>:8]`,
`garbage_collection_threshold:0.7`), and `torch.cuda.set_per_process_memory_fraction` caps the process at 6
GiB of the card (the fraction computed from `total_memory`, so both cards get the same cap).

Model: patch-16 embedding by Conv2d at 224 px (196 patches + a class token, learned positions), 8
`nn.TransformerEncoderLayer` (batch_first, norm_first, GELU, 512 wide, 8 heads, MLP 2,048, dropout 0.1),
LayerNorm and a 1,000-class head; fp32, AdamW (foreach), cross_entropy with label smoothing.

Phases: 0 the model and optimizer under the cap; 1 the batch finder: one training step at 512, and on
`torch.OutOfMemoryError` (caught; the clean-up done after the `except` block, so the failed step's frames are
gone) `zero_grad(set_to_none=True)`, `empty_cache()` and half the batch, until a step completes; the
`memory_stats()` keys an allocator-tuning user reads (num_ooms, num_alloc_retries, oversize_allocations,
oversize_segments, max_split_size, num_device_alloc/free) printed; 2 four more training steps at the batch
found; 3 evaluation at twice that batch under `inference_mode` + bf16 autocast; 4 the cap raised to 12 GiB and
one training step at twice the batch found. 5 phases. Seeded; sizes fixed by the cap, not by the data."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "max_split_size_mb:256,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],garbage_collection_threshold:0.7"
)

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3431)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    D, L, HEADS, MLP, IMG, CLASSES, START = 64, 2, 2, 128, 64, 10, 8
else:
    D, L, HEADS, MLP, IMG, CLASSES, START = 512, 8, 8, 2048, 224, 1000, 512
PATCH = 16
GIB = 2**30
KEYS = (
    "num_ooms",
    "num_alloc_retries",
    "oversize_allocations.current",
    "oversize_segments.peak",
    "max_split_size",
    "num_device_alloc",
    "num_device_free",
)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def cap(gib):
    if device == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(gib * GIB / total)


def show_stats(tag):
    if device == "cuda":
        stats = torch.cuda.memory_stats()
        print(tag, {k: stats.get(k) for k in KEYS})


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        n = (IMG // PATCH) ** 2
        self.patch = nn.Conv2d(3, D, PATCH, stride=PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, n + 1, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, HEADS, MLP, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


def batch(n):
    return torch.randn(n, 3, IMG, IMG, device=device), torch.randint(0, CLASSES, (n,), device=device)


def train_step(n):
    x, y = batch(n)
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


cap(6)
model = ViT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05, foreach=True)
report("model and AdamW under a 6 GiB cap")

n = START
found = None
while found is None:
    failed = False
    try:
        loss = train_step(n)
    except torch.OutOfMemoryError:
        failed = True
    if failed:
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        print(f"batch {n}: out of memory, retrying at {n // 2}")
        n //= 2
    else:
        found = n
        print(f"batch {n} fits, loss {loss:.4f}")
show_stats("after the batch finder")
report("batch finder")

for _step in range(4):
    loss = train_step(found)
print(f"4 steps at {found}, loss {loss:.4f}")
report("training at the batch found")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x, y = batch(2 * found)
    acc = (model(x).argmax(-1) == y).float().mean().item()
del x, y
model.train()
print(f"eval accuracy {acc:.4f}")
report("bf16 inference_mode evaluation at twice the batch")

cap(12)
loss = train_step(2 * found)
print(f"one step at {2 * found} under 12 GiB, loss {loss:.4f}")
show_stats("end")
report("raised cap, twice the batch")
