"""Kinetics-style video classification with torchvision's S3D and Swin3D-S (constructors, no weights).

torch.backends.cudnn.benchmark is False (set explicitly) for the whole script.

1. Set-up: s3d(weights=None, num_classes=400) (separable 3-D inception blocks: a (1, k, k) spatial convolution
   then a (k, 1, 1) temporal one, BatchNorm3d, the 2 x 7 x 7 average pool and a 1 x 1 x 1 convolution head) in
   torch.channels_last_3d, SGD (momentum 0.9, nesterov, wd 1e-5) with CosineAnnealingLR.
2. First training step, fp32: batch 8 of 16-frame 224 x 224 clips (B, 3, T, H, W) in channels_last_3d,
   cross-entropy with label smoothing 0.1, clip_grad_norm_ 1.0.
3. Two more steps.
4. s3d deleted with its optimizer, empty_cache(); swin3d_s(weights=None, num_classes=400) in eval() under
   torch.inference_mode and bf16 autocast on 2 videos x 3 spatial views of 16 x 224 x 224 (batch 6), the
   softmax averaged over the views.
5. swin3d_s on 32-frame clips, batch 2, the same mode.

Phases: s3d set-up; first step; steps 2-3; swin3d_s 16-frame views; swin3d_s 32-frame clips. 5 phases."""

import gc
import os

import torch
import torch.nn.functional as F
from torchvision.models.video import s3d, swin3d_s

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(33802)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
torch.backends.cudnn.benchmark = False
if SMALL:
    B, T, S, VIDEOS, VIEWS, T_LONG, B_LONG = 1, 16, 224, 1, 1, 16, 1
else:
    B, T, S, VIDEOS, VIEWS, T_LONG, B_LONG = 8, 16, 224, 2, 3, 32, 2
N_CLASSES = 400


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


model = s3d(weights=None, num_classes=N_CLASSES).to(device, memory_format=torch.channels_last_3d)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-5)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
report("s3d setup")


def train_step(model, opt, sched):
    model.train()
    clips = torch.randn(B, 3, T, S, S, device=device).contiguous(memory_format=torch.channels_last_3d)
    labels = torch.randint(0, N_CLASSES, (B,), device=device)
    loss = F.cross_entropy(model(clips), labels, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.detach(), norm


loss, norm = train_step(model, opt, sched)
print(f"s3d step 0 loss {loss.item():.4f} grad norm {norm.item():.3f}")
report("s3d first step")
for _ in range(2):
    loss, norm = train_step(model, opt, sched)
print(f"s3d step 2 loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.5f}")
report("s3d steps 2-3")

del model, opt, sched, loss, norm
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()

model = swin3d_s(weights=None, num_classes=N_CLASSES).to(device).eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    views = torch.randn(VIDEOS * VIEWS, 3, T, S, S, device=device)
    probs = model(views).float().softmax(-1).view(VIDEOS, VIEWS, N_CLASSES).mean(1)
    top5 = probs.topk(5, dim=-1).indices.cpu()
print(f"swin3d_s 16-frame views: top-5 of video 0 {top5[0].tolist()}")
report("swin3d_s 16-frame views")

with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    clips = torch.randn(B_LONG, 3, T_LONG, S, S, device=device)
    preds = model(clips).argmax(-1).cpu()
print(f"swin3d_s 32-frame predictions {preds.tolist()}")
if device == "cuda":
    print(f"swin3d_s 32-frame peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
