"""Memory mistakes in an ordinary image-classification loop, each followed by its fix: a torchvision
ResNet-50 (random weights, channels-last, fp16 autocast, GradScaler, SGD with momentum 0.9 and
Nesterov) trained on batch 96 of 224x224 images while the running loss is summed as a tensor
(`running += loss`, no `.item()`), 2 steps; then a validation loop written without `torch.no_grad()`
that sums the batch losses as tensors too (`val_loss = val_loss + loss`), so every batch's autograd
graph and its saved activations stay alive until the end of the loop, 3 batches of 128; then the
usual fix: `del val_loss, running`, `torch.cuda.empty_cache()`, the same validation under no_grad with
`.item()` per batch and the predictions' accuracy by argmax; then one more training step after the
cache was emptied (the pool regrows); 4 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import resnet50

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13301)
B, VB, IMG, NVAL = (4, 6, 64, 2) if SMALL else (96, 128, 224, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = resnet50(weights=None, num_classes=1000).to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step():
    x = torch.randn(B, 3, IMG, IMG, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss


def report(tag):
    if device == "cuda":
        print(
            f"{tag} allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
running = 0.0
for _ in range(2):
    running += train_step()
report(f"train running {running.item():.3f}")

# the mistake: validation without no_grad, losses summed as tensors
model.eval()
val_loss = 0.0
correct = 0
for _ in range(NVAL):
    x = torch.randn(VB, 3, IMG, IMG, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (VB,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        out = model(x)
        loss = F.cross_entropy(out, y)
    val_loss = val_loss + loss
    correct = correct + (out.argmax(1) == y).sum()
report(f"val without no_grad loss {val_loss.item() / NVAL:.3f} correct {int(correct)}")

# the fix
del val_loss, running, out, loss, correct
torch.cuda.empty_cache()
total, correct = 0.0, 0
with torch.no_grad():
    for _ in range(NVAL):
        x = torch.randn(VB, 3, IMG, IMG, device=device).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (VB,), device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            out = model(x)
            total += F.cross_entropy(out, y).item()
        correct += (out.argmax(1) == y).sum().item()
report(f"val no_grad loss {total / NVAL:.3f} correct {correct}")

model.train()
loss = train_step()
report(f"train again loss {loss.item():.3f}")
