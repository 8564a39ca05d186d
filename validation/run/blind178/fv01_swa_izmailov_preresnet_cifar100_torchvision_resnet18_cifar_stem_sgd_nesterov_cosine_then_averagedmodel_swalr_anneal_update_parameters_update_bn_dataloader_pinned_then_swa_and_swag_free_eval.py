"""Stochastic Weight Averaging after Izmailov et al. 2018 ("Averaging Weights Leads to Wider Optima and
Better Generalization") as the PyTorch recipe (torch.optim.swa_utils) writes it: torchvision's
resnet18 with a CIFAR stem (conv1 a 3 x 3 of stride 1, maxpool an Identity) for CIFAR-100-shaped
batches (256 x 3 x 32 x 32 from a seeded CPU generator, the labels too); fp32; SGD (lr 0.1, momentum
0.9, nesterov, weight decay 5e-4) with CosineAnnealingLR for the first steps, then SWA: an
AveragedModel(model) (a deep copy with its n_averaged buffer), SWALR(anneal_strategy "cos",
anneal_epochs 2, swa_lr 0.05) stepped per step, swa_model.update_parameters(model) after each step
(the default running-mean avg_fn over the parameters), then torch.optim.swa_utils.update_bn over a
DataLoader (TensorDataset of 2,048 CPU images, batch 512, pin_memory, no workers) that resets the
BatchNorm running statistics and recomputes them in cumulative mode, then evaluation of the SWA model
and of the last SGD model under no_grad at batch 1,024 (top-1 and the NLL). Phases: the first SGD
step; 3 cosine steps; 4 SWA steps with update_parameters; update_bn; evaluation: 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17801)
if SMALL:
    B, N_BN, BN_B, N_EVAL, EVAL_B, COS_STEPS, SWA_STEPS = 8, 32, 16, 32, 16, 2, 2
else:
    B, N_BN, BN_B, N_EVAL, EVAL_B, COS_STEPS, SWA_STEPS = 256, 2048, 512, 4096, 1024, 3, 4
NUM_CLASSES = 100
device = "cuda" if torch.cuda.is_available() else "cpu"


def cifar_resnet18():
    m = torchvision.models.resnet18(num_classes=NUM_CLASSES)
    m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


model = cifar_resnet18().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
data_gen = torch.Generator().manual_seed(17801)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()


def train_step(step):
    images = torch.randn(B, 3, 32, 32, generator=data_gen)
    labels = torch.randint(0, NUM_CLASSES, (B,), generator=data_gen)
    images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    out = model(images)
    loss = F.cross_entropy(out, labels)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.4f}")


train_step(0)
scheduler.step()
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, 1 + COS_STEPS):
    train_step(step)
    scheduler.step()
if device == "cuda":
    print(f"cosine peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

swa_model = AveragedModel(model)
swa_scheduler = SWALR(optimizer, swa_lr=0.05, anneal_epochs=2, anneal_strategy="cos")
for step in range(1 + COS_STEPS, 1 + COS_STEPS + SWA_STEPS):
    train_step(step)
    swa_model.update_parameters(model)
    swa_scheduler.step()
print(f"n_averaged {int(swa_model.n_averaged)}")
if device == "cuda":
    print(f"swa peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

bn_images = torch.randn(N_BN, 3, 32, 32, generator=data_gen)
bn_labels = torch.randint(0, NUM_CLASSES, (N_BN,), generator=data_gen)
loader = DataLoader(
    TensorDataset(bn_images, bn_labels), batch_size=BN_B, shuffle=False, pin_memory=device == "cuda"
)
update_bn(loader, swa_model, device=device)
if device == "cuda":
    print(f"update_bn peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

eval_images = torch.randn(N_EVAL, 3, 32, 32, generator=data_gen)
eval_labels = torch.randint(0, NUM_CLASSES, (N_EVAL,), generator=data_gen)
for name, net in (("swa", swa_model), ("sgd", model)):
    net.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    nll = torch.zeros((), device=device)
    with torch.no_grad():
        for i in range(0, N_EVAL, EVAL_B):
            x = eval_images[i : i + EVAL_B].to(device)
            y = eval_labels[i : i + EVAL_B].to(device)
            logits = net(x)
            nll += F.cross_entropy(logits, y, reduction="sum")
            correct += (logits.argmax(dim=1) == y).sum()
    print(f"{name} top1 {correct.item() / N_EVAL:.4f} nll {nll.item() / N_EVAL:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
