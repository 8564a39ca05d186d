"""Deep ensembles after Lakshminarayanan et al. 2017 ("Simple and Scalable Predictive Uncertainty
Estimation using Deep Ensembles") trained together in one process as the torch.func model-ensembling
tutorial writes it: members built independently (each its own seeded init), their weights stacked by
torch.func.stack_module_state into new leaf tensors with a leading ensemble dimension, a stateless
copy of one member on the "meta" device, and torch.func.functional_call under torch.vmap. First 32
MLPs (3,072 -> 2,048 -> 2,048 -> 100, GELU) on CIFAR-100-shaped flattened inputs, each member its own
bootstrap minibatch of 512 (in_dims 0 for the data), fp32, Adam(foreach=True, lr 1e-3) over the
stacked parameters, the summed per-member cross entropy; then the ensemble's evaluation of 4 batches
of 2,048 shared by all members (in_dims None for the data) under no_grad: the mean of the members'
softmax, its NLL, the predictive entropy and the members' disagreement with the mean's argmax. Then
8 small ConvNets (3 -> 64 -> 128 -> 256 channels, 3 x 3 convs, the last two of stride 2, ReLU, global
average pooling, Linear(256, 10)) vmapped over 8 x 128 x 3 x 32 x 32 images (vmap's convolution rule
folds the members into a grouped convolution), under bf16 autocast with AdamW(fused=True, lr 2e-3,
weight decay 0.05), 3 steps, then their evaluation at 1,024 under inference_mode. Phases: the MLPs'
first step; 3 more steps; the MLP ensemble's evaluation; the ConvNet ensemble's training; its
evaluation: 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17805)
if SMALL:
    M, D_IN, H, C, B, STEPS, EVAL_N, EVAL_B = 3, 48, 32, 10, 4, 2, 1, 8
    MC, CB, CSTEPS, C_EVAL_B, IMG, CH = 2, 2, 2, 4, 8, (4, 8, 16)
else:
    M, D_IN, H, C, B, STEPS, EVAL_N, EVAL_B = 32, 3072, 2048, 100, 512, 3, 4, 2048
    MC, CB, CSTEPS, C_EVAL_B, IMG, CH = 8, 128, 3, 1024, 32, (64, 128, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D_IN, H)
        self.fc2 = nn.Linear(H, H)
        self.fc3 = nn.Linear(H, C)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, CH[0], 3, padding=1)
        self.conv2 = nn.Conv2d(CH[0], CH[1], 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(CH[1], CH[2], 3, stride=2, padding=1)
        self.fc = nn.Linear(CH[2], 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return self.fc(x.mean(dim=(2, 3)))


def make_ensemble(cls, n):
    models = [cls().to(device) for _ in range(n)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    del models
    return base, params, buffers


data_gen = torch.Generator().manual_seed(17805)
base, params, buffers = make_ensemble(MLP, M)
print(f"stacked params {sum(p.numel() for p in params.values())}")
optimizer = torch.optim.Adam(params.values(), lr=1e-3, foreach=True)


def member_loss(p, b, x, y):
    return F.cross_entropy(functional_call(base, (p, b), (x,)), y)


def member_logits(p, b, x):
    return functional_call(base, (p, b), (x,))


if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
for step in range(1 + STEPS):
    x = torch.randn(M, B, D_IN, generator=data_gen).to(device)
    y = torch.randint(0, C, (M, B), generator=data_gen).to(device)
    losses = torch.vmap(member_loss, in_dims=(0, 0, 0, 0))(params, buffers, x, y)
    optimizer.zero_grad(set_to_none=True)
    losses.sum().backward()
    optimizer.step()
    print(f"step {step} mean member loss {losses.mean().item():.4f}")
    if device == "cuda" and step in (0, STEPS):
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"mlp step {step} peak {peak} reserved {reserved}")
        torch.cuda.reset_peak_memory_stats()
del x, y, losses

nll = torch.zeros((), device=device)
entropy = torch.zeros((), device=device)
disagree = torch.zeros((), device=device)
with torch.no_grad():
    for _ in range(EVAL_N):
        x = torch.randn(EVAL_B, D_IN, generator=data_gen).to(device)
        y = torch.randint(0, C, (EVAL_B,), generator=data_gen).to(device)
        logits = torch.vmap(member_logits, in_dims=(0, 0, None))(params, buffers, x)
        probs = logits.softmax(dim=-1)
        mean_p = probs.mean(dim=0)
        nll += F.nll_loss(mean_p.clamp_min(1e-12).log(), y, reduction="sum")
        entropy += -(mean_p * mean_p.clamp_min(1e-12).log()).sum()
        disagree += (logits.argmax(dim=-1) != mean_p.argmax(dim=-1)[None]).float().mean(dim=0).sum()
n = EVAL_N * EVAL_B
print(f"ensemble nll {nll.item() / n:.4f} entropy {entropy.item() / n:.4f}")
print(f"disagreement {disagree.item() / n:.4f}")
del x, y, logits, probs, mean_p
if device == "cuda":
    print(f"mlp eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
del optimizer, params, buffers
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

base, cparams, cbuffers = make_ensemble(ConvNet, MC)
coptimizer = torch.optim.AdamW(cparams.values(), lr=2e-3, weight_decay=0.05, fused=device == "cuda")
for step in range(CSTEPS):
    x = torch.randn(MC, CB, 3, IMG, IMG, generator=data_gen).to(device)
    y = torch.randint(0, 10, (MC, CB), generator=data_gen).to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        losses = torch.vmap(member_loss)(cparams, cbuffers, x, y)
    coptimizer.zero_grad(set_to_none=True)
    losses.sum().backward()
    coptimizer.step()
    print(f"convnet step {step} mean member loss {losses.mean().item():.4f}")
del x, y, losses
if device == "cuda":
    print(f"convnet train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    x = torch.randn(C_EVAL_B, 3, IMG, IMG, generator=data_gen).to(device)
    y = torch.randint(0, 10, (C_EVAL_B,), generator=data_gen).to(device)
    logits = torch.vmap(member_logits, in_dims=(0, 0, None))(cparams, cbuffers, x)
    mean_p = logits.float().softmax(dim=-1).mean(dim=0)
    acc = (mean_p.argmax(dim=-1) == y).float().mean()
print(f"convnet ensemble acc {acc.item():.4f}")
if device == "cuda":
    print(f"convnet eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
