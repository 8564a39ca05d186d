"""timm's HRNet-W18-Small-V2 classifier (four parallel resolution branches with repeated
multi-scale fusion, upsampling by nearest interpolation) built without pretrained weights, in
channels-last memory format, trained under bf16 autocast with per-sample mixup (mixing weights drawn
on the GPU from torch.distributions.Beta(0.4, 0.4), partners by a GPU randperm) and soft-target
cross-entropy, AdamW, batch 64 at 224 x 224, 3 steps, then an eval batch of 128 under no_grad;
5 phases."""

import os

import timm
import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9303)
B, EB, R, C = (2, 2, 64, 10) if SMALL else (64, 128, 224, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("hrnet_w18_small_v2", pretrained=False, num_classes=C)
model = model.to(device, memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
beta = torch.distributions.Beta(torch.tensor(0.4, device=device), torch.tensor(0.4, device=device))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.nn.functional.one_hot(torch.randint(0, C, (B,), device=device), C).float()
    lam = beta.sample((B,))
    perm = torch.randperm(B, device=device)
    x = lam.view(B, 1, 1, 1) * x + (1 - lam.view(B, 1, 1, 1)) * x[perm]
    y = lam.view(B, 1) * y + (1 - lam.view(B, 1)) * y[perm]
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = torch.sum(-y * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, lam, perm, logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(EB, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    pred = model(x).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
