"""blind315/ld02's first two training steps (timm botnet26t_256, bf16 autocast, BCE with
target_threshold, timm SGDP) with the allocator's figures printed at every block's forward and at
the gradient of every block's output (backward), after the loss, after backward and after the
optimizer step. The twin answered ld02's phase 1 +2,195,456 allocated and +90,177,536 reserved over
the H100 (same requests: a placement difference). Each line:
`s STEP STAGE alloc A peak P reserved R large_seg N small_seg M` (plain python3; < 20 s, < 4 GB).
With HIST=FILE set, the allocator's memory history of both steps is written to FILE (a pickle)."""

import os
import pickle

import timm
import torch
import torch.nn.functional as F
from timm.loss import BinaryCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler

torch.manual_seed(3152)
device = "cuda"
NUM_CLASSES = 500
B, R = 48, 256
HIST = os.environ.get("HIST")
if HIST:
    torch.cuda.memory._record_memory_history(max_entries=1000000)


def line(step, stage):
    st = torch.cuda.memory_stats()
    print(
        f"s {step} {stage} alloc {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()} large_seg {st.get('segment.large_pool.current', 0)}"
        f" small_seg {st.get('segment.small_pool.current', 0)}"
    )


def cutmix_pair(x, y_onehot, lam):
    h, w = x.shape[-2:]
    cut = (1 - lam) ** 0.5
    ch, cw = int(h * cut), int(w * cut)
    cy, cx = int(torch.randint(h, (1,))), int(torch.randint(w, (1,)))
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
    x = x.clone()
    x[..., y0:y1, x0:x1] = x.flip(0)[..., y0:y1, x0:x1]
    lam = 1 - (y1 - y0) * (x1 - x0) / (h * w)
    return x, lam * y_onehot + (1 - lam) * y_onehot.flip(0)


model = timm.create_model("botnet26t_256", pretrained=False, num_classes=NUM_CLASSES).to(device)
opt = create_optimizer_v2(model, "sgdp", lr=0.4, weight_decay=5e-5, momentum=0.9, nesterov=True)
sched = CosineLRScheduler(opt, t_initial=100, warmup_t=3, warmup_lr_init=1e-4, t_in_epochs=False)
criterion = BinaryCrossEntropy(smoothing=0.1, target_threshold=0.2)
STEP = [0]
named = [("stem", model.stem)]
named += [(f"stage{i}.{j}", blk) for i, st in enumerate(model.stages) for j, blk in enumerate(st)]
named += [("final_conv", model.final_conv), ("head", model.head)]


def fwd_hook(name):
    def hook(mod, inp, out):
        line(STEP[0], f"fwd {name}")
        if out.requires_grad:
            out.register_hook(lambda g: line(STEP[0], f"bwd {name}"))

    return hook


for name, mod in named:
    mod.register_forward_hook(fwd_hook(name))
line(-1, "model")
model.train()
num_updates = 0
for step in range(2):
    STEP[0] = step
    x = torch.randn(B, 3, R, R, device=device)
    y = F.one_hot(torch.randint(0, NUM_CLASSES, (B,), device=device), NUM_CLASSES).float()
    x, y = cutmix_pair(x, y, lam=0.7)
    line(step, "data")
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = criterion(logits, y)
    line(step, "loss")
    loss.backward()
    line(step, "backward")
    opt.step()
    line(step, "step")
    opt.zero_grad(set_to_none=True)
    num_updates += 1
    sched.step_update(num_updates=num_updates)
    del x, y, logits, loss
    line(step, "end")
if HIST:
    with open(HIST, "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
