"""A 2019-style training recipe still common in the wild: `nn.DataParallel` around a torchvision
ResNet-18 on a single GPU (cuDNN's default heuristics: benchmark mode, which the twin names
unmeasured, left off), the deprecated
`torch.cuda.amp.autocast()` / `torch.cuda.amp.GradScaler()` aliases (fp16), SGD with momentum and
weight decay, `interpolate(..., antialias=True)` resizing 160 -> 224 inside the step; then a
TorchScript (`torch.jit.script`) classifier head run under no_grad on the backbone's pooled features.

Phases: 4 training steps at batch 64; an eval of the DataParallel model under no_grad at batch 256; the
scripted head (2048 -> 1024 -> 1000 MLP on features of 512 repeated) at batch 4096. No value-dependent
sizes (GradScaler steps are taken on random-init fp16 gradients, which stay finite at scale 65536 here:
the first step's check is the GPU's to make). 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

torch.manual_seed(2351)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = nn.DataParallel(torchvision.models.resnet18(weights=None)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
scaler = torch.cuda.amp.GradScaler()
for step in range(4):
    x = torch.randn(64, 3, 160, 160, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    with torch.cuda.amp.autocast():
        x = F.interpolate(x, size=(224, 224), mode="bilinear", antialias=True, align_corners=False)
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print("step", step, loss.item(), scaler.get_scale())
del loss
report("dataparallel fp16 amp train")

model.eval()
with torch.no_grad():
    out = model(torch.randn(256, 3, 224, 224, device="cuda"))
    print("eval", tuple(out.shape))
del out
report("dataparallel eval")

head = torch.jit.script(nn.Sequential(nn.Linear(2048, 1024), nn.GELU(), nn.Linear(1024, 1000)).cuda().eval())
with torch.no_grad():
    feats = torch.randn(4096, 512, device="cuda").repeat(1, 4)
    logits = head(feats)
    print("scripted head", tuple(logits.shape))
del logits, feats
report("jit script head")
