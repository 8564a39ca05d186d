"""timm's MixNet-S (mixed depthwise kernels 3/5/7/9 split over channel groups, squeeze-excitation,
swish) built without pretrained weights at 224 x 224, trained under bf16 autocast with fused SGD
(Nesterov momentum 0.9, weight decay 4e-5) and label-smoothed cross-entropy (0.1) on batches of 96,
3 steps, then a channels-first eval batch of 192 under no_grad; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9202)
B, EB, R = (2, 2, 64) if SMALL else (96, 192, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("mixnet_s", pretrained=False, num_classes=1000).to(device)
fused = device == "cuda"
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=4e-5, fused=fused)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    top5 = model(torch.randn(EB, 3, R, R, device=device)).topk(5, dim=-1).indices
if device == "cuda":
    print(
        f"eval {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
