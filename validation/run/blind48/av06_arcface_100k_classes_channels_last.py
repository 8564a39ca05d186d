"""Face-recognition training with an ArcFace margin head: a torchvision resnet50 trunk in
channels_last under bf16 autocast to a 512-d embedding, L2-normalised features and class centres
for 100,000 identities, the additive angular margin through acos/cos on the target logits only,
fp32 weights, SGD momentum with weight decay, batch 128 of 112 x 112 faces, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4806)
B, IMG, NCLS = (4, 32, 100) if SMALL else (128, 112, 100000)
device = "cuda" if torch.cuda.is_available() else "cpu"
trunk = torchvision.models.resnet50(num_classes=512).to(device, memory_format=torch.channels_last)
centres = nn.Parameter(torch.randn(NCLS, 512, device=device) * 0.01)
optimizer = torch.optim.SGD([*trunk.parameters(), centres], lr=0.1, momentum=0.9, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    faces = torch.randn(B, 3, IMG, IMG, device=device).to(memory_format=torch.channels_last)
    ids = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        feats = trunk(faces)
    cos = F.linear(F.normalize(feats.float()), F.normalize(centres)).clamp(-1 + 1e-7, 1 - 1e-7)
    target = cos.gather(1, ids[:, None])
    margin = torch.cos(torch.acos(target) + 0.5)
    logits = cos.scatter(1, ids[:, None], margin) * 64.0
    loss = F.cross_entropy(logits, ids)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del faces, ids, feats, cos, target, margin, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
