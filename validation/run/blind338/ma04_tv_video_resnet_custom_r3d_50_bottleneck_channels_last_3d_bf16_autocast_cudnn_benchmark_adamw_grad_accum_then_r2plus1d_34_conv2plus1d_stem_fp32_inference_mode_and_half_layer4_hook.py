"""Video ResNets assembled from torchvision.models.video.resnet's building blocks (no weights, no builder).

torchvision only ships 18-layer video ResNets; the deeper ones of the R(2+1)D paper are built here with its
VideoResNet class: an R3D-50 (Bottleneck blocks of Conv3DSimple 3 x 3 x 3, layers [3, 4, 6, 3], BasicStem)
and an R(2+1)D-34 (BasicBlock of Conv2Plus1D, layers [3, 4, 6, 3], R2Plus1dStem), for
Something-Something-v2's 174 classes.

1. Set-up: R3D-50 in torch.channels_last_3d, AdamW (foreach, lr 1e-3, wd 0.05), cudnn.benchmark True.
2. First step: batch 8 of 8-frame 160 x 160 clips in channels_last_3d under bf16 autocast, two micro-batches
   of 4 accumulated (loss / 2) before the optimizer step.
3. Two more accumulated steps.
4. R3D-50 and its optimizer deleted (no empty_cache); cudnn.benchmark False; R(2+1)D-34 in eval() under
   torch.inference_mode in fp32 on 6 clips of 32 x 112 x 112.
5. The R(2+1)D-34 converted with .half(), a forward hook on layer4 keeping its features, fp16 clips of
   16 x 112 x 112 at batch 16, the hooked features pooled with adaptive_avg_pool3d and L2-normalised
   (clip embeddings).

Phases: set-up; first step; steps 2-3; R(2+1)D-34 fp32 inference; half inference with the layer4 hook.
5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.video.resnet import (
    BasicBlock,
    BasicStem,
    Bottleneck,
    Conv2Plus1D,
    Conv3DSimple,
    R2Plus1dStem,
    VideoResNet,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(33804)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
torch.backends.cudnn.benchmark = True
if SMALL:
    B, T, S, EVAL_B, EVAL_T, EVAL_S, H_B, H_T = 2, 4, 32, 2, 4, 32, 2, 4
else:
    B, T, S, EVAL_B, EVAL_T, EVAL_S, H_B, H_T = 8, 8, 160, 6, 32, 112, 16, 16
N_CLASSES = 174
ACCUM = 2
CL3 = torch.channels_last_3d


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


model = VideoResNet(Bottleneck, [Conv3DSimple] * 4, [3, 4, 6, 3], BasicStem, num_classes=N_CLASSES)
model = model.to(device, memory_format=CL3)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, foreach=True)
print(f"R3D-50 parameters {sum(p.numel() for p in model.parameters())}")
report("r3d_50 setup")


def train_step(model, opt):
    model.train()
    opt.zero_grad(set_to_none=True)
    for _ in range(ACCUM):
        clips = torch.randn(B // ACCUM, 3, T, S, S, device=device).contiguous(memory_format=CL3)
        labels = torch.randint(0, N_CLASSES, (B // ACCUM,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(clips), labels) / ACCUM
        loss.backward()
    opt.step()
    return loss.detach()


loss = train_step(model, opt)
print(f"step 0 loss {loss.item():.4f}")
report("r3d_50 first step")
for _ in range(2):
    loss = train_step(model, opt)
print(f"step 2 loss {loss.item():.4f}")
report("r3d_50 steps 2-3")

del model, opt, loss
torch.backends.cudnn.benchmark = False
model = VideoResNet(BasicBlock, [Conv2Plus1D] * 4, [3, 4, 6, 3], R2Plus1dStem, num_classes=N_CLASSES)
model = model.to(device).eval()
with torch.inference_mode():
    clips = torch.randn(EVAL_B, 3, EVAL_T, EVAL_S, EVAL_S, device=device)
    preds = model(clips).softmax(-1).argmax(-1).cpu()
print(f"R(2+1)D-34 predictions {preds.tolist()}")
report("r2plus1d_34 fp32 inference")

if amp:
    model.half()
features = {}
hook = model.layer4.register_forward_hook(lambda mod, inp, out: features.__setitem__("layer4", out))
with torch.inference_mode():
    clips = torch.randn(H_B, 3, H_T, EVAL_S, EVAL_S, device=device, dtype=torch.half if amp else torch.float)
    logits = model(clips)
    emb = F.normalize(F.adaptive_avg_pool3d(features["layer4"], 1).flatten(1).float(), dim=-1)
    sim = emb @ emb.T
hook.remove()
print(f"embeddings {tuple(emb.shape)}, logits {tuple(logits.shape)}, mean similarity {sim.mean().item():.4f}")
if device == "cuda":
    print(f"half inference peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
