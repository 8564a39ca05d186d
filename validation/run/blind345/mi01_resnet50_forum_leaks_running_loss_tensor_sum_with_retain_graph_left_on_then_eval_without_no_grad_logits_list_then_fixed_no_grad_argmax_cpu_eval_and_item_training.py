"""The memory questions of an image-classification forum thread, in one script: a torchvision resnet50
(100 classes, fp32, SGD momentum 0.9 + weight decay, batch 32 at 224 x 224) trained and evaluated first the
way the question's code does it, then the way the answers fix it. The user prints `memory_allocated()` after
every step and `max_memory_reserved()` at the end of every phase.

The mistakes: the running loss summed as a tensor (`running_loss += loss`, so `running_loss` holds every
step's graph) while `loss.backward(retain_graph=True)` is still on from an earlier debugging session (so each
step's saved activations are not freed by its backward, and the graph kept by `running_loss` keeps them);
then an evaluation pass without `torch.no_grad()` in which the logits of every batch are appended to a list
for a later accuracy (each logits tensor keeps its batch's whole graph: no backward ever frees it). The fixes:
`running_loss = 0.0` (the old graphs die), evaluation under `torch.no_grad()` keeping `argmax(1).cpu()` only,
training with `loss.item()` and no retain_graph, `zero_grad(set_to_none=True)`.

Phases: 0 model and optimizer; 1 three leaky training steps (allocated grows by a step's activations each
step); 2 the leaky running loss reset, three leaky evaluation batches (grows by a forward's activations per
batch); 3 the logits list cleared, three evaluation batches under no_grad; 4 three fixed training steps,
some `memory_stats()` keys printed. 5 phases. Seeded."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import resnet50

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3451)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
B, IMG, STEPS = (4, 64, 2) if SMALL else (32, 224, 3)
CLASSES = 100


def mem(tag):
    if cuda:
        print(f"  {tag}: allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB")


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def batch():
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B,), device=device)
    return x, y


model = resnet50(num_classes=CLASSES).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
report("resnet50 and SGD")

# the question's training loop
model.train()
running_loss = 0.0
for step in range(STEPS):
    x, y = batch()
    optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward(retain_graph=True)
    optimizer.step()
    running_loss += loss
    mem(f"leaky step {step}")
print(f"mean loss {running_loss.item() / STEPS:.4f}")
report("training with running_loss += loss and retain_graph=True")

# the question's evaluation
running_loss = 0.0
del out, loss
model.eval()
all_logits, all_labels = [], []
for step in range(STEPS):
    x, y = batch()
    logits = model(x)
    all_logits.append(logits)
    all_labels.append(y)
    mem(f"eval batch {step} without no_grad")
acc = (torch.cat(all_logits).argmax(1) == torch.cat(all_labels)).float().mean().item()
print(f"accuracy {acc:.4f}")
report("evaluation without no_grad, logits kept in a list")

# the answer's evaluation
all_logits.clear()
all_labels.clear()
del logits
preds, labels = [], []
with torch.no_grad():
    for step in range(STEPS):
        x, y = batch()
        preds.append(model(x).argmax(1).cpu())
        labels.append(y.cpu())
        mem(f"eval batch {step} under no_grad")
acc = (torch.cat(preds) == torch.cat(labels)).float().mean().item()
print(f"accuracy {acc:.4f}")
report("evaluation under no_grad, argmax on the host")

# the answer's training loop
model.train()
running_loss = 0.0
for step in range(STEPS):
    x, y = batch()
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
    mem(f"fixed step {step}")
print(f"mean loss {running_loss / STEPS:.4f}")
if cuda:
    stats = torch.cuda.memory_stats()
    keys = (
        "allocated_bytes.all.peak",
        "active_bytes.all.peak",
        "inactive_split_bytes.all.current",
        "num_alloc_retries",
    )
    print({k: stats[k] for k in keys})
report("training with loss.item()")
