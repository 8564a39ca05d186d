"""Multi-resolution ImageNet-style training of a torchvision ResNet-50 (1,000 classes, built from
its constructor): every 4 steps a seeded CPU generator picks the training resolution from 128, 160,
192, 224 and 256 and the batch size from a pixel budget (64 images at 224, so 196 at 128 down to 49
at 256), the random images made at that size; channels-last, fp16 autocast with GradScaler, SGD
with Nesterov momentum 0.9 and weight decay 5e-5 (no decay on norms and biases), label smoothing
0.1; 32 steps in two phases of 16, then a FixRes-style evaluation at 224 and 288 (batch 100, no_grad,
channels-last, top-1 of random labels); 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14302)
RES = [32, 48, 64] if SMALL else [128, 160, 192, 224, 256]
BASE = (64, 8) if SMALL else (224, 64)
STEPS, PER_PHASE, EVERY = (8, 4, 2) if SMALL else (32, 16, 4)
EVAL = ([48, 64], 4) if SMALL else ([224, 288], 100)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = torchvision.models.resnet50(num_classes=1000).to(device, memory_format=torch.channels_last)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim <= 1 else decay).append(p)
opt = torch.optim.SGD(
    [{"params": decay, "weight_decay": 5e-5}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.2, momentum=0.9, nesterov=True,
)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
gen = torch.Generator().manual_seed(7)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
res = BASE[0]
for step in range(STEPS):
    if step % EVERY == 0:
        res = RES[int(torch.randint(0, len(RES), (1,), generator=gen))]
        batch = BASE[1] * BASE[0] * BASE[0] // (res * res)
    x = torch.randn(batch, 3, res, res, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if (step + 1) % PER_PHASE == 0 and device == "cuda":
        print(
            f"steps to {step} res {res} batch {batch} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del x, y, loss

model.eval()
correct = {}
with torch.no_grad():
    for r in EVAL[0]:
        x = torch.randn(EVAL[1], 3, r, r, device=device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (EVAL[1],), device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
            logits = model(x)
        correct[r] = int((logits.argmax(1) == y).sum())
        del x, y, logits
if device == "cuda":
    print(f"eval {correct} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(f"done {sum(correct.values()) >= 0}")
