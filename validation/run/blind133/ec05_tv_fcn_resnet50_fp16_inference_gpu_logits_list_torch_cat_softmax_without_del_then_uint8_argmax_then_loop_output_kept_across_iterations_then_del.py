"""Memory mistakes in segmentation inference: a torchvision FCN-ResNet50 (random weights, 21 classes,
no aux head) cast to pure fp16 and run under no_grad in eval mode. First the full-resolution logits
of each batch (8 images of 512x512) kept on the GPU in a list, then `torch.cat` of the 5 batches
and a float32 softmax taken while the list and the concatenation are still alive, the class
confidence and a confusion matrix by bincount; then the usual fix: `del` of all three and only the
uint8 argmax and the fp16 maximum probability kept per batch; then a loop over 4 batches of 768x768
that reassigns `out` without freeing it first, so the previous batch's logits live through the
next forward, followed by a bilinear x2 upsample of the last logits in float32 while the input and
the logits are still referenced; then the same loop with `del out` at the end of each iteration
and the input freed before the upsample; 4 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import fcn_resnet50

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13305)
NC = 21
B, S, S2, NB, NB2 = (2, 64, 96, 2, 2) if SMALL else (8, 512, 768, 5, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32

model = fcn_resnet50(weights=None, weights_backbone=None, num_classes=NC, aux_loss=False)
model = model.to(device, dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def report(tag):
    if device == "cuda":
        print(
            f"{tag} allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


labels = torch.randint(0, NC, (NB * B, S, S), device=device)

# the mistake: every batch's logits kept on the GPU, concatenated, softmaxed with nothing freed
with torch.no_grad():
    preds = []
    for _ in range(NB):
        x = torch.randn(B, 3, S, S, device=device, dtype=dtype)
        preds.append(model(x)["out"])
    logits = torch.cat(preds)
    probs = logits.float().softmax(1)
    conf, pred = probs.max(1)
    cm = torch.bincount(labels.flatten() * NC + pred.flatten(), minlength=NC * NC).view(NC, NC)
report(f"logits list mean conf {conf.mean().item():.4f} diag {cm.diag().sum().item()}")

# the fix
del preds, logits, probs, conf, pred, cm
with torch.no_grad():
    preds, confs = [], []
    for _ in range(NB):
        x = torch.randn(B, 3, S, S, device=device, dtype=dtype)
        out = model(x)["out"]
        c, p = out.softmax(1).max(1)
        preds.append(p.to(torch.uint8))
        confs.append(c)
    pred = torch.cat(preds).long()
    conf = torch.cat(confs)
    cm = torch.bincount(labels.flatten() * NC + pred.flatten(), minlength=NC * NC).view(NC, NC)
report(f"uint8 argmax mean conf {conf.float().mean().item():.4f} diag {cm.diag().sum().item()}")
del preds, confs, pred, conf, cm, out, c, p, x

# the mistake: the previous batch's output alive through the next forward
with torch.no_grad():
    for _ in range(NB2):
        x = torch.randn(B, 3, S2, S2, device=device, dtype=dtype)
        out = model(x)["out"]
    up = F.interpolate(out.float(), scale_factor=2, mode="bilinear", align_corners=False)
    area = up.argmax(1).flatten().bincount(minlength=NC)
report(f"loop keeps out area max {area.max().item()}")
del up, area, out, x

# the fix
with torch.no_grad():
    for i in range(NB2):
        x = torch.randn(B, 3, S2, S2, device=device, dtype=dtype)
        out = model(x)["out"]
        del x
        if i < NB2 - 1:
            del out
    up = F.interpolate(out.float(), scale_factor=2, mode="bilinear", align_corners=False)
    del out
    area = up.argmax(1).flatten().bincount(minlength=NC)
report(f"loop with del area max {area.max().item()}")
