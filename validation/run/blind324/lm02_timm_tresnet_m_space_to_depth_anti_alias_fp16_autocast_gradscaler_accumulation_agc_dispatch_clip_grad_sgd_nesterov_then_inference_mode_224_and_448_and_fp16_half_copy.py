"""timm's TResNet-M (SpaceToDepth stem, anti-aliased blur-pool downsampling, squeeze-excitation,
in-place activated batch norms with leaky ReLU) trained with fp16 autocast and
``torch.amp.GradScaler`` over two accumulated micro-batches per update; before each step the
scaler unscales the gradients and ``timm.utils.dispatch_clip_grad(..., mode='agc')`` applies adaptive
gradient clipping (unit-wise norm ratios); SGD with nesterov momentum and a one-cycle LR.

Phases: 0 model and optimizer; 1 three updates of 2 x 24 images at 224 (six micro-batches); 2
``torch.inference_mode`` evaluation under fp16 autocast at 224 (batch 64) and then at 448 (batch 16,
TResNet is fully convolutional); 3 a ``copy.deepcopy(model).half()`` serving copy in channels_last
answering batch 96 at 224 in pure fp16, the fp32 model kept alongside; 4 the copy dropped,
``empty_cache`` and the fp32 model's softmax on a final batch."""

import copy

import timm
import torch
import torch.nn.functional as F
from timm.utils import dispatch_clip_grad

torch.manual_seed(3242)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 300
MB, ACCUM = 24, 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = timm.create_model("tresnet_m", pretrained=False, num_classes=NUM_CLASSES).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=10, pct_start=0.3)
scaler = torch.amp.GradScaler(device)
report("model")

model.train()
for update in range(3):
    for _micro in range(ACCUM):
        x = torch.randn(MB, 3, 224, 224, device=device)
        y = torch.randint(0, NUM_CLASSES, (MB,), device=device)
        with torch.autocast(device, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y) / ACCUM
        scaler.scale(loss).backward()
    scaler.unscale_(opt)
    dispatch_clip_grad(model.parameters(), value=0.02, mode="agc")
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    sched.step()
    if device == "cuda":
        print(f"update {update} loss {loss.item() * ACCUM:.4f} scale {scaler.get_scale():.0f}")
del x, y, loss
report("train")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    p224 = model(torch.randn(64, 3, 224, 224, device=device)).argmax(-1)
    p448 = model(torch.randn(16, 3, 448, 448, device=device)).argmax(-1)
if device == "cuda":
    print(f"eval preds {p224.shape[0]} + {p448.shape[0]}")
report("eval_multires")

server = copy.deepcopy(model).half().to(memory_format=torch.channels_last)
with torch.inference_mode():
    x = torch.randn(96, 3, 224, 224, device=device, dtype=torch.float16).contiguous(
        memory_format=torch.channels_last
    )
    served = server(x).float().softmax(-1).max(-1)
if device == "cuda":
    print(f"served mean confidence {served.values.mean().item():.4f}")
del x
report("serve_fp16")

del server, served
torch.cuda.empty_cache()
with torch.no_grad():
    probs = model(torch.randn(32, 3, 224, 224, device=device)).softmax(-1)
if device == "cuda":
    print(f"final max prob {probs.max().item():.4f}")
report("final")
