"""Grad-CAM on a torchvision ResNet-101 in eval mode at batch 32 of 448x448, fp32: a forward hook
keeps layer4's activations and a full backward hook keeps their gradients; the class score is
back-propagated (parameters frozen, input requiring grad for a saliency map too), the CAM is
weighted, ReLU'd and upsampled bilinearly to the input size; twice, hooks removed after; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5805)
B, HW = (2, 64) if SMALL else (32, 448)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.resnet101(num_classes=1000).to(device).eval()
model.requires_grad_(False)
store = {}


def keep_act(module, inp, out):
    store["act"] = out


def keep_grad(module, grad_in, grad_out):
    store["grad"] = grad_out[0]


handles = [model.layer4.register_forward_hook(keep_act), model.layer4.register_full_backward_hook(keep_grad)]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for rnd in range(2):
    img = torch.randn(B, 3, HW, HW, device=device, requires_grad=True)
    logits = model(img)
    score = logits.gather(1, logits.argmax(dim=1, keepdim=True)).sum()
    score.backward()
    weights = store["grad"].mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * store["act"]).sum(dim=1, keepdim=True))
    cam = F.interpolate(cam, size=(HW, HW), mode="bilinear", align_corners=False).detach()
    saliency = img.grad.abs().amax(dim=1)
    del img, logits, score, weights
    store.clear()
    if device == "cuda":
        print(f"round {rnd} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
for hd in handles:
    hd.remove()
