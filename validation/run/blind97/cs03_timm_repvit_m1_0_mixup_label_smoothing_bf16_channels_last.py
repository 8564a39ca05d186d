"""timm RepViT-M1.0 (re-parameterisable mobile CNN with SE blocks and a distillation head) trained from
scratch on 1,000 classes under bf16 autocast in channels_last: batch 96 of 224 x 224 images made on
the GPU, mixup with one Beta(0.8, 0.8) draw per batch read back with .item(), soft-target cross
entropy with label smoothing 0.1 over the averaged two heads, SGD with Nesterov momentum and a
cosine schedule, 3 steps; then the model fused for deployment (timm's reparameterize_model) and
evaluated on 256 images under inference_mode; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.utils.model import reparameterize_model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9703)
B, BE, R, NCLS = (4, 8, 64, 10) if SMALL else (96, 256, 224, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("repvit_m1_0", num_classes=NCLS).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=3)
beta = torch.distributions.Beta(torch.tensor(0.8, device=device), torch.tensor(0.8, device=device))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    lam = float(beta.sample().item())
    perm = torch.randperm(B, device=device)
    x = lam * x + (1 - lam) * x[perm]
    target = F.one_hot(y, NCLS).float() * 0.9 + 0.1 / NCLS
    target = lam * target + (1 - lam) * target[perm]
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(x)
        logits = (out[0] + out[1]) / 2 if isinstance(out, tuple) else out
        loss = torch.sum(-target * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} lam {lam:.3f} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, out, logits, loss, target
model.eval()
model = reparameterize_model(model)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    xe = torch.randn(BE, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    pred = model(xe).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
