"""Training GC ViT-Tiny (global context vision transformer: fused-MBConv downsamplers, window attention
with global query tokens from a feature extractor; `timm.create_model("gcvit_tiny", pretrained=False,
drop_path_rate=0.2)`) with timm's PSGD Kron optimizer (`timm.optim.create_optimizer_v2(model,
opt="kron", lr=1e-3, weight_decay=0.05)`: a Kronecker-factored preconditioner Q per parameter, updated
with a probability that anneals over steps, triangular factors for dims up to 2,048 and diagonal ones
above), bf16 autocast, gradient clipping at 1.0. Phase 1: 5 steps at batch 64 x 3 x 224 x 224,
cross entropy. Phase 2: `torch.no_grad()` bf16 autocast evaluation at batch 128, top-1 against random
labels. Seeded (torch and Python's random, which Kron's update schedule draws from). 2 phases."""

import random

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(2782)
random.seed(2782)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("gcvit_tiny", pretrained=False, num_classes=1000, drop_path_rate=0.2).to(dev)
optimizer = create_optimizer_v2(model, opt="kron", lr=1e-3, weight_decay=0.05)

model.train()
for _step in range(5):
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print("train", round(loss.item(), 3))
report("gcvit_tiny_kron_bf16_autocast_b64")

del x, y, loss
model.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(2):
        x = torch.randn(128, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (128,), device=dev)
        correct += (model(x).argmax(-1) == y).sum().item()
print("top1", correct / 256)
report("gcvit_tiny_no_grad_bf16_eval_b128")
