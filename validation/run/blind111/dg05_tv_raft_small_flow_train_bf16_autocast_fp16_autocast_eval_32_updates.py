"""torchvision RAFT-small optical flow from random weights, trained under bf16 autocast (the
correlation pyramid and the convolutional GRU in bf16 where autocast casts them) with AdamW and
a one-cycle schedule, batch 6 of 320x448 frame pairs, a sequence loss over 12 refinements weighted
0.8^k plus an end-point-error metric; then run under inference_mode and fp16 autocast on a 436x1024
pair (Sintel's size) padded to a multiple of 8 with 32 refinements, the last flow kept; 4 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.optical_flow import raft_small

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11105)
B, H, W, UPD, EH, EW, EUPD, STEPS = (
    (1, 128, 128, 2, 130, 150, 3, 1) if SMALL else (6, 320, 448, 12, 436, 1024, 32, 2)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = raft_small(weights=None).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-4, eps=1e-8)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-4, total_steps=STEPS + 1, pct_start=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    img1 = torch.rand(B, 3, H, W, device=device) * 2 - 1
    img2 = torch.rand(B, 3, H, W, device=device) * 2 - 1
    flow_gt = torch.randn(B, 2, H, W, device=device) * 4
    valid = (flow_gt.abs().sum(1) < 1000).float()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        preds = model(img1, img2, num_flow_updates=UPD)
    loss = 0.0
    for k, pred in enumerate(preds):
        err = (pred.float() - flow_gt).abs().sum(1)
        loss = loss + 0.8 ** (len(preds) - 1 - k) * (valid * err).mean()
    epe = ((preds[-1].float() - flow_gt) ** 2).sum(1).sqrt().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} epe {epe.item():.3f} "
            f"peak {torch.cuda.max_memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del img1, img2, flow_gt, valid, preds, loss, err, epe
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    a = torch.rand(1, 3, EH, EW, device=device) * 2 - 1
    b = torch.rand(1, 3, EH, EW, device=device) * 2 - 1
    ph, pw = (-EH) % 8, (-EW) % 8
    pad = (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2)
    a, b = F.pad(a, pad, mode="replicate"), F.pad(b, pad, mode="replicate")
    flow = model(a, b, num_flow_updates=EUPD)[-1]
    flow = flow[..., pad[2] : pad[2] + EH, pad[0] : pad[0] + EW]
if device == "cuda":
    print(
        f"eval {tuple(flow.shape)} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
