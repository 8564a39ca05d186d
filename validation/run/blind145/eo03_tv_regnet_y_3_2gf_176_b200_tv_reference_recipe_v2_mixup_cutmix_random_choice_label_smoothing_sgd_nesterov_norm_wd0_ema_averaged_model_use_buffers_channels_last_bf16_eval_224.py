"""torchvision's classification reference (references/classification/train.py) with the "new
recipe" of its RegNet weights: regnet_y_3_2gf from its constructor, `--train-crop-size 176
--val-crop-size 224 --label-smoothing 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0 --model-ema
--model-ema-steps 2 --norm-weight-decay 0.0`: mixup or cutmix chosen per batch by
transforms.v2.RandomChoice over v2.MixUp and v2.CutMix on the device batch (their parameters drawn
on the CPU generator), CrossEntropyLoss(label_smoothing=0.1) on the soft targets, SGD with Nesterov
momentum and no weight decay on norm parameters (torchvision.ops._utils.split_normalization_params),
the reference's ExponentialMovingAverage (an AveragedModel with use_buffers=True and a per-tensor
avg_fn) updated every 2 steps; channels-last, bf16 autocast, batch 200, 4 steps; then the EMA
model evaluated at 224 in batches of 160 under inference_mode, softmax confidence; 6 phases."""

import os

import torch
import torch.nn as nn
import torchvision
import torchvision.transforms.v2 as v2
from torchvision.ops._utils import split_normalization_params

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14503)
B, RES, EB, ERES, NCLS = (4, 64, 4, 64, 10) if SMALL else (200, 176, 160, 224, 1000)
STEPS = 4
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """As torchvision's references/classification/utils.py has it."""

    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg, use_buffers=True)


model = torchvision.models.regnet_y_3_2gf(num_classes=NCLS).to(device, memory_format=CL)
norm_params, other_params = split_normalization_params(model)
opt = torch.optim.SGD(
    [{"params": other_params, "weight_decay": 5e-5}, {"params": norm_params, "weight_decay": 0.0}],
    lr=0.8 * B / 1024,
    momentum=0.9,
    nesterov=True,
)
ema_steps, epochs = 2, 100
alpha = 1.0 - min(1.0, B * ema_steps / (1281167 * 1.0 / epochs) * (1.0 - 0.99998))
model_ema = ExponentialMovingAverage(model, device=device, decay=1.0 - alpha)
mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=NCLS), v2.CutMix(alpha=1.0, num_classes=NCLS)])
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model+ema {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    x, y = mix(x, y)
    x = x.contiguous(memory_format=CL)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(x)
        loss = criterion(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % ema_steps == 0:
        model_ema.update_parameters(model)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, loss, x, y
model_ema.eval()
conf = 0.0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device).contiguous(memory_format=CL)
        conf += model_ema(x).float().softmax(-1).amax(-1).mean().item()
if device == "cuda":
    print(
        f"ema eval conf {conf / 2:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
