"""A timm `convnext_tiny` (28.6M parameters, 224 x 224, 1,000 classes) trained channels_last under bf16
autocast with AdamW and label smoothing, the way a user works through the usual advice after a CUDA OOM at
batch 128, one remedy per phase, all at the same batch of 128 images.

First the code as it was: `optimizer.zero_grad(set_to_none=False)` (the gradients stay allocated and are
zeroed in place between steps). Then `zero_grad(set_to_none=True)`. Then activation offloading for the
high-resolution part only: the stem and the first two stages run inside
`torch.autograd.graph.save_on_cpu(pin_memory=True)` (their saved tensors go to pinned host memory and come
back during backward), the last two stages as usual. Then checkpointing every other block by hand: the
forward is written out stage by stage (`stage.downsample`, then each block), and blocks with an even index
inside their stage run through `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`.

Phases: 0 model and AdamW; 1 two steps with set_to_none=False; 2 two steps with set_to_none=True; 3 two steps
with save_on_cpu(pin_memory=True) around the stem and stages 0-1; 4 two steps with every other block
checkpointed; 5 evaluation under `inference_mode` at 256. Seeded; needs timm."""

import os

import timm
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(349_02)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
B, RES = (4, 64) if SMALL else (128, 224)


def report(tag):
    if cuda:
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


model = timm.create_model("convnext_tiny", num_classes=1000, drop_path_rate=0.1)
model = model.to(device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
report("convnext_tiny and AdamW")


def batch(n):
    x = torch.randn(n, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (n,), device=device)
    return x, y


def forward_offloaded(x):
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        x = model.stem(x)
        x = model.stages[0](x)
        x = model.stages[1](x)
    x = model.stages[2](x)
    x = model.stages[3](x)
    return model.forward_head(model.norm_pre(x))


def forward_every_other(x):
    x = model.stem(x)
    for stage in model.stages:
        x = stage.downsample(x)
        for j, block in enumerate(stage.blocks):
            x = checkpoint(block, x, use_reentrant=False) if j % 2 == 0 else block(x)
    return model.forward_head(model.norm_pre(x))


def train(forward, set_to_none, steps=2):
    model.train()
    for step in range(steps):
        x, y = batch(B)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = forward(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)
        if cuda:
            allocated = torch.cuda.memory_allocated()
            print(f"  step {step}: loss {loss.item():.3f} allocated after zero_grad {allocated}")


train(model, set_to_none=False)
report("batch 128, zero_grad(set_to_none=False)")

train(model, set_to_none=True)
report("batch 128, zero_grad(set_to_none=True)")

train(forward_offloaded, set_to_none=True)
report("batch 128, save_on_cpu(pin_memory=True) around stem and stages 0-1")

train(forward_every_other, set_to_none=True)
report("batch 128, every other block checkpointed")

model.eval()
correct = 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x, y = batch(2 * B)
    correct += (model(x).argmax(-1) == y).sum().item()
print(f"eval top-1 {correct / (2 * B):.4f}")
report("evaluation at 256 under inference_mode")
