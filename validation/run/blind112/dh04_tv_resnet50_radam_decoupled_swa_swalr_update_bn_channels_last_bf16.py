"""torchvision ResNet-50 from random weights on 1,000 classes, channels_last, trained under bf16
autocast with RAdam (decoupled weight decay, foreach) for 2 steps, then stochastic weight averaging
(torch.optim.swa_utils): an AveragedModel copy updated after each of 2 more steps under SWALR's
annealing; then torch.optim.swa_utils.update_bn recomputing the averaged model's BatchNorm
statistics over 3 batches from a list, and the averaged model evaluated under inference_mode and
bf16 autocast; batch 96 at 224x224; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11204)
B, S = (2, 64) if SMALL else (96, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = torchvision.models.resnet50(weights=None).to(device, memory_format=torch.channels_last)
opt = torch.optim.RAdam(
    model.parameters(), lr=1e-3, weight_decay=0.05, decoupled_weight_decay=True, foreach=True
)
swa_model = AveragedModel(model)
swa_sched = SWALR(opt, swa_lr=5e-4, anneal_epochs=2, anneal_strategy="cos")


def batch(n):
    x = torch.randn(n, 3, S, S, device=device).contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 1000, (n,), device=device)


def train_step():
    x, y = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(2):
    loss = train_step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
for _ in range(2, 4):
    loss = train_step()
    swa_model.update_parameters(model)
    swa_sched.step()
if device == "cuda":
    print(f"swa steps loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
del loss
loader = [batch(B)[0] for _ in range(3)]
update_bn(loader, swa_model, device=device)
del loader
swa_model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x, y = batch(2 * B)
    acc = (swa_model(x).argmax(1) == y).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
