"""timm DLA-34 (deep layer aggregation: tree-structured residual blocks with aggregation nodes)
fine-tuned at 352 x 352 in fp32 (TF32 off, the default), NCHW, batch 10, hand-written mixup
(Beta(0.2, 0.2) weight, batch reversed) with soft-target cross-entropy, SGD momentum 0.9, 3 steps,
then an evaluation of 6 images at 448 x 448 and 6 at 352 x 352 under no_grad; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10206)
B, R, R_BIG, STEPS, NCLS = (2, 64, 96, 2, 10) if SMALL else (10, 352, 448, 3, 37)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model("dla34", num_classes=NCLS).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
beta = torch.distributions.Beta(torch.tensor(0.2), torch.tensor(0.2))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, R, R, device=device)
    y = F.one_hot(torch.randint(0, NCLS, (B,), device=device), NCLS).float()
    lam = float(beta.sample())
    x = lam * x + (1 - lam) * x.flip(0)
    y = lam * y + (1 - lam) * y.flip(0)
    loss = torch.sum(-y * F.log_softmax(model(x), dim=-1), dim=-1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.no_grad():
    big = model(torch.randn(6, 3, R_BIG, R_BIG, device=device))
    small = model(torch.randn(6, 3, R, R, device=device))
    agree = (big.argmax(-1) == small.argmax(-1)).float().mean()
if device == "cuda":
    print(
        f"eval {agree.item():.2f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
