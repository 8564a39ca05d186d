"""torchvision EfficientNet-B1 trained under bf16 autocast with mixup (a Beta(0.2, 0.2) mixing weight,
the batch mixed with its flip) on label-smoothed soft targets, AdamW, and an EMA copy of the weights and
buffers (`AveragedModel` with `get_ema_multi_avg_fn(0.999)`), batch 32 at 240x240, 2 steps, then the
EMA model evaluated under `torch.inference_mode`; 4 phases."""

import os

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torchvision.models import efficientnet_b1

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8103)
B, R, C = (2, 64, 10) if SMALL else (32, 240, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = efficientnet_b1(num_classes=C).to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
beta = torch.distributions.Beta(torch.tensor(0.2), torch.tensor(0.2))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    lam = float(beta.sample())
    x = lam * x + (1 - lam) * x.flip(0)
    target = F.one_hot(y, C).float() * 0.9 + 0.1 / C
    target = lam * target + (1 - lam) * target.flip(0)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = torch.sum(-target * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    del x, y, target, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
ema.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    pred = ema(torch.randn(2 * B, 3, R, R, device=device)).argmax(-1)
del pred
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
