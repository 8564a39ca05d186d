"""An image classifier fed by a `DataLoader` (2 workers, `pin_memory=True`, batch 256, the dataset
normalising uint8 images to float32 on the host), trained first the way a "memory grows during my epoch"
question does it and then the way the answers do. Model: timm `vit_tiny_patch16_224` (100 classes,
drop_path 0.1) built from its config, fp32 weights under bf16 autocast, AdamW.

The mistakes: the whole epoch copied to the GPU up front "so the GPU never waits"
(`[(x.to(device, non_blocking=True), y.to(device, non_blocking=True)) for x, y in loader]`: every float32
batch resident); a metric history of CUDA tensors (`history.append({"loss": loss, "acc": acc})`, the loss
still attached to its graph nodes); `zero_grad(set_to_none=False)`, so the gradients stay allocated between
steps; `torch.cuda.empty_cache()` after every step. The fixes: the cache dropped and each pinned batch copied
`non_blocking` as the loader yields it, the loss summed on the device as `loss.detach()` and read with one
`.item()` at the end of the epoch, `zero_grad()` (set_to_none=True), no `empty_cache()`.

Phases: 0 model and AdamW; 1 the epoch cached on the GPU (8 batches); 2 one leaky epoch over the cache,
allocated printed per step; 3 the cache and history dropped, one streamed epoch; 4 evaluation through a
second loader (batch 512, pin_memory) under `inference_mode` + bf16 autocast, `memory_stats()` keys printed.
5 phases. Seeded (the loader's shuffling by a seeded generator)."""

import os

import timm
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3455)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
IMG, B, EVAL_B, N, POOL = (32, 8, 16, 32, 16) if SMALL else (224, 256, 512, 2048, 512)
CLASSES = 100
KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_device_alloc", "num_device_free")


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


class FakeImages(Dataset):
    """N samples drawn from a pool of uint8 images, normalised to float32 on the host."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.pool = torch.randint(0, 256, (POOL, 3, IMG, IMG), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, CLASSES, (N,), generator=g)
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __len__(self):
        return N

    def __getitem__(self, i):
        x = self.pool[i % POOL].float().div_(255)
        return (x - self.mean) / self.std, self.labels[i]


data = FakeImages()
loader = DataLoader(
    data,
    batch_size=B,
    shuffle=True,
    num_workers=2,
    pin_memory=cuda,
    drop_last=True,
    generator=torch.Generator().manual_seed(1),
)
model = timm.create_model(
    "vit_tiny_patch16_224", pretrained=False, num_classes=CLASSES, img_size=IMG, drop_path_rate=0.1
).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.05)
report("vit_tiny, AdamW, DataLoader with pin_memory")

gpu_cache = [(x.to(device, non_blocking=True), y.to(device, non_blocking=True)) for x, y in loader]
if cuda:
    print(f"{len(gpu_cache)} batches cached: allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB")
report("the epoch copied to the GPU")

model.train()
history = []
for step, (x, y) in enumerate(gpu_cache):
    optimizer.zero_grad(set_to_none=False)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out.float(), y)
    loss.backward()
    optimizer.step()
    history.append({"loss": loss, "acc": (out.argmax(1) == y).float().mean()})
    if cuda:
        torch.cuda.empty_cache()
        print(f"  leaky step {step}: allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB")
print(f"leaky epoch: mean loss {torch.stack([h['loss'] for h in history]).mean().item():.4f}")
report("epoch over the GPU cache, CUDA metric history, set_to_none=False, empty_cache per step")

del gpu_cache, history, x, y, out, loss
optimizer.zero_grad()
total, steps = torch.zeros((), device=device), 0
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(x)
    loss = F.cross_entropy(out.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    total += loss.detach()
    steps += 1
print(f"streamed epoch: mean loss {total.item() / steps:.4f}")
del x, y, out, loss
report("streamed epoch, loss summed detached")

model.eval()
eval_loader = DataLoader(data, batch_size=EVAL_B, num_workers=2, pin_memory=cuda)
correct = torch.zeros((), dtype=torch.long, device=device)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    for x, y in eval_loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        correct += (model(x).argmax(1) == y).sum()
print(f"eval accuracy {correct.item() / N:.4f}")
if cuda:
    stats = torch.cuda.memory_stats()
    print({k: stats[k] for k in KEYS})
report("bf16 evaluation under inference_mode, batch 512")
