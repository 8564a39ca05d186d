"""A timm ConvNeXt-Small trained under bf16 autocast with AdamW (foreach), batch 64 at 224, fed from
pinned host batches copied with non_blocking=True, and snapshotted asynchronously every second step
the way async checkpointers do: the weights are cast to bf16 on the compute stream, a side stream
waits for it and copies each cast into a preallocated pinned host buffer with non_blocking=True, each
cast is marked with record_stream(side) and dropped at once, so the allocator keeps it until the
copy is done; the copy's event is waited on before the next snapshot; then a no_grad eval at batch
128; 6 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11906)
B, IMG = (4, 64) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
pin = device == "cuda"

model = timm.create_model(
    "convnext_nano" if SMALL else "convnext_small", num_classes=1000, drop_path_rate=0.1
)
model = model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05, foreach=True)
host_weights = [torch.empty(p.shape, dtype=torch.bfloat16, pin_memory=pin) for p in model.parameters()]
host_x = torch.empty(B, 3, IMG, IMG, pin_memory=pin)
side = torch.cuda.Stream() if device == "cuda" else None
copied = None


def report(what):
    if device == "cuda":
        print(
            f"{what} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def snapshot():
    global copied
    if device != "cuda":
        for h, p in zip(host_weights, model.parameters(), strict=True):
            h.copy_(p.detach())
        return
    if copied is not None:
        copied.synchronize()
    casts = [p.detach().to(torch.bfloat16) for p in model.parameters()]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for h, c in zip(host_weights, casts, strict=True):
            h.copy_(c, non_blocking=True)
            c.record_stream(side)
        copied = side.record_event()
    del casts


report("model")
for step in range(4):
    host_x.normal_()
    x = host_x.to(device, non_blocking=True)
    y = torch.randint(0, 1000, (B,)).pin_memory() if pin else torch.randint(0, 1000, (B,))
    y = y.to(device, non_blocking=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 2 == 1:
        snapshot()
        report(f"step {step} loss {loss.item():.3f} snapshot")
    del x, y, loss
if copied is not None:
    copied.synchronize()
report("snapshot done")
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(2 * B, 3, IMG, IMG).pin_memory() if pin else torch.randn(2 * B, 3, IMG, IMG)
    probs = model(x.to(device, non_blocking=True)).softmax(-1)
report(f"eval max prob {probs.max().item():.4f}")
