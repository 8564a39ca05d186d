"""3-D ResNets from torchvision.models.video for CT/MRI volume classification (random init, no weights).

Part 1: r3d_18 for chest-CT malignancy classification (2 classes): the stem's Conv3d is replaced by a
single-channel one (1 -> 64, kernel (3, 7, 7), stride (1, 2, 2)), input crops 1 x 64 x 128 x 128 in HU
normalised to [-1, 1]; class-weighted cross-entropy (weights 1, 3); fp32 Adam (lr 1e-4, weight decay 1e-4),
batch 8. Phases: the first step; 3 more; then Grad-CAM on 4 eval volumes: a forward hook on layer4 keeps
its activation and a full backward hook its output gradient, the malignant logit's sum is backpropagated,
channel weights are the gradients' spatial means, the ReLU'd weighted sum is upsampled trilinearly to
64 x 128 x 128, min-max normalised per volume and moved to the host (hooks then removed).

Part 2: r2plus1d_18 for 4-class MRI sequence classification (3 channels: T1, T2, FLAIR; 32 x 112 x 112
crops), channels_last_3d model and inputs, bf16 autocast, AdamW(foreach=False, lr 3e-4), batch 8, 2 steps;
then torch.inference_mode evaluation of 32 volumes in batches of 16 with softmax probabilities moved to the
host. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.video import r2plus1d_18, r3d_18

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(188_04)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    BATCH, CT, MRI, STEPS, CAM_N, EVAL_N, EVAL_B = 2, (16, 32, 32), (8, 32, 32), 1, 2, 4, 2
else:
    BATCH, CT, MRI, STEPS, CAM_N, EVAL_N, EVAL_B = 8, (64, 128, 128), (32, 112, 112), 3, 4, 32, 16

model = r3d_18(num_classes=2)
model.stem[0] = nn.Conv3d(1, 64, kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False)
model = model.to(device)
print(f"r3d_18 params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-4)
class_weights = torch.tensor([1.0, 3.0], device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def ct_batch(n):
    x = torch.rand(n, 1, *CT, device=device) * 2 - 1
    y = torch.randint(0, 2, (n,), device=device)
    return x, y


model.train()
for step in range(STEPS + 1):
    x, y = ct_batch(BATCH)
    logits = model(x)
    loss = F.cross_entropy(logits, y, weight=class_weights)
    opt.zero_grad()
    loss.backward()
    opt.step()
    acc = (logits.argmax(1) == y).float().mean()
    print(f"step {step} loss {loss.item():.4f} acc {acc.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, logits, loss, acc
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# Grad-CAM on layer4
store = {}


def save_activation(module, inputs, output):
    store["act"] = output.detach()


def save_gradient(module, grad_input, grad_output):
    store["grad"] = grad_output[0].detach()


h1 = model.layer4.register_forward_hook(save_activation)
h2 = model.layer4.register_full_backward_hook(save_gradient)
model.eval()
x, _ = ct_batch(CAM_N)
x.requires_grad_(True)
logits = model(x)
model.zero_grad(set_to_none=True)
logits[:, 1].sum().backward()
weights = store["grad"].mean(dim=(2, 3, 4), keepdim=True)
cam = F.relu((weights * store["act"]).sum(1, keepdim=True))
cam = F.interpolate(cam, size=CT, mode="trilinear", align_corners=False)
flat = cam.flatten(1)
lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
cam = ((flat - lo) / (hi - lo + 1e-8)).view_as(cam).cpu()
h1.remove()
h2.remove()
print(f"grad-cam {tuple(cam.shape)} mean {cam.mean().item():.3f}")
store.clear()
del x, logits, weights, flat, lo, hi
model.zero_grad(set_to_none=True)
if device == "cuda":
    print(f"grad-cam peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, opt
net = r2plus1d_18(num_classes=4).to(device).to(memory_format=torch.channels_last_3d)
print(f"r2plus1d_18 params {sum(p.numel() for p in net.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(net.parameters(), lr=3e-4, foreach=False)


def mri_batch(n):
    x = torch.randn(n, 3, *MRI, device=device).contiguous(memory_format=torch.channels_last_3d)
    y = torch.randint(0, 4, (n,), device=device)
    return x, y


net.train()
for step in range(2):
    x, y = mri_batch(BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"r2plus1d step {step} loss {loss.item():.4f}")
del x, y, loss
if device == "cuda":
    print(f"r2plus1d train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net.eval()
probs = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(EVAL_N // EVAL_B):
        x, _ = mri_batch(EVAL_B)
        probs.append(torch.softmax(net(x).float(), 1).cpu())
probs = torch.cat(probs)
print(f"eval probs {tuple(probs.shape)} mean max {probs.max(1).values.mean().item():.3f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
