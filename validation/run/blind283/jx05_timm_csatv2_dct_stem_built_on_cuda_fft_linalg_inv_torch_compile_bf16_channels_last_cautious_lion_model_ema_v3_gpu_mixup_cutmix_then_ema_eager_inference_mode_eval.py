"""timm 1.0.29's CSATv2 (`timm/models/csatv2.py`: a learnable 8x8 DCT stem over YCbCr with frequency
selection, convolutional stages with spatial attention, then transformer stages) built directly on
the GPU with `timm.create_model("csatv2", pretrained=False, num_classes=1000, device="cuda")`, so its DCT
kernels are made on CUDA at construction (`torch.fft.fft` of an 8 x 16 matrix and `torch.linalg.inv` of
the 8 x 8 Type-II kernel). Training: `torch.compile(model)` (default mode) on channels-last input with
bf16 autocast, `timm.optim.create_optimizer_v2(model, opt="clion", lr=3e-4, weight_decay=0.05)`
(cautious Lion: one exp_avg per parameter, updates masked where sign disagrees with the gradient),
`timm.data.Mixup` (mixup 0.8, cutmix 1.0, label smoothing 0.1) on CUDA batches with
`SoftTargetCrossEntropy`, `timm.utils.ModelEmaV3(model, decay=0.999)` updated after each step.
Phase 1: 6 steps at batch 64 x 3 x 512 x 512. Phase 2: the EMA copy (eager, not compiled) evaluated in
channels-last under `torch.inference_mode()` with bf16 autocast at batch 128, twice. NumPy and torch
seeded (Mixup draws with NumPy). 2 phases."""

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.utils import ModelEmaV3

torch.manual_seed(2835)
np.random.seed(2835)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("csatv2", pretrained=False, num_classes=1000, device=dev)
model = model.to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="clion", lr=3e-4, weight_decay=0.05)
model_ema = ModelEmaV3(model, decay=0.999)
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=1000)
criterion = SoftTargetCrossEntropy()
compiled = torch.compile(model)

model.train()
for step in range(6):
    x = torch.rand(64, 3, 512, 512, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)
    x, y = mixup_fn(x, y)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(compiled(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    model_ema.update(model, step=step + 1)
print("train", round(loss.item(), 3))
report("csatv2_compiled_bf16_clion_mixup_ema")

del x, y, loss
model_ema.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(2):
        x = torch.rand(128, 3, 512, 512, device=dev).contiguous(memory_format=torch.channels_last)
        print("ema eval", model_ema(x).argmax(-1)[:4].tolist())
report("csatv2_ema_eager_inference_mode")
