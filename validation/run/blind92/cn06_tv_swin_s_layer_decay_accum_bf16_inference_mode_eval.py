"""torchvision Swin-S (no pretrained weights, its default stochastic depth 0.3) fine-tuned at 224 x 224 with
layer-wise learning-rate decay (0.8 per stage, one AdamW parameter group per stage plus the head,
no weight decay on norms and biases), bf16 autocast, gradient accumulation over 2 micro-batches of
24 images and gradient clipping, 3 optimizer steps, then an eval batch of 64 under
torch.inference_mode with bf16 autocast; 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision import models

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9206)
B, EB, R = (2, 2, 64) if SMALL else (24, 64, 224)
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
model = models.swin_s(weights=None, num_classes=200).to(device)

stages = [model.features[0], model.features[1], model.features[2], model.features[3], model.features[4]]
stages += [model.features[5], model.features[6], model.features[7]]
stages += [torch.nn.ModuleList([model.norm, model.head])]
groups = []
depth = len(stages)
for i, stage in enumerate(stages):
    scale = 0.8 ** (depth - 1 - i)
    decay, no_decay = [], []
    for name, p in stage.named_parameters():
        (no_decay if p.ndim == 1 or "relative_position_bias_table" in name else decay).append(p)
    groups.append({"params": decay, "lr": 1e-3 * scale, "weight_decay": 0.05})
    groups.append({"params": no_decay, "lr": 1e-3 * scale, "weight_decay": 0.0})
optimizer = torch.optim.AdamW(groups, lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    for _micro in range(ACCUM):
        x = torch.randn(B, 3, R, R, device=device)
        y = torch.randint(0, 200, (B,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y) / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    probs = model(torch.randn(EB, 3, R, R, device=device)).softmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(probs.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
