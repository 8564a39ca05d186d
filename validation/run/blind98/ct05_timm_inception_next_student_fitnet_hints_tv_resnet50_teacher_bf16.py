"""Feature distillation (FitNets hints plus soft-label KD): a frozen torchvision ResNet-50 teacher
(eval, no_grad, its layer2..layer4 outputs caught by forward hooks) and a timm InceptionNeXt-Tiny
student (its stage outputs from forward_intermediates) with 1x1-convolution regressors mapping each
student stage onto the teacher's channels; loss = MSE over the three hints + KL at temperature 4 +
cross entropy, under bf16 autocast with AdamW over the student and regressors; batch 64 of
224 x 224 made on the GPU, 3 steps, then the student alone on 256 images under inference_mode;
5 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet50

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9805)
B, BE, R, NCLS = (4, 8, 64, 10) if SMALL else (64, 256, 224, 1000)
TEMP = 4.0
device = "cuda" if torch.cuda.is_available() else "cpu"
teacher = resnet50(num_classes=NCLS).to(device).eval().requires_grad_(False)
feats = {}
for name in ("layer2", "layer3", "layer4"):
    getattr(teacher, name).register_forward_hook(lambda m, i, o, name=name: feats.__setitem__(name, o))
student = timm.create_model("inception_next_tiny", num_classes=NCLS).to(device)
regressors = nn.ModuleList(
    nn.Conv2d(c, t, 1) for c, t in zip((192, 384, 768), (512, 1024, 2048), strict=True)
).to(device)
optimizer = torch.optim.AdamW(
    list(student.parameters()) + list(regressors.parameters()), lr=1e-3, weight_decay=0.05
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
student.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits, stages = student.forward_intermediates(x)
        s_logits = student.forward_head(s_logits)
        hint = sum(
            F.mse_loss(reg(s).float(), feats[name].float())
            for reg, s, name in zip(regressors, stages[1:], ("layer2", "layer3", "layer4"), strict=True)
        )
        kd = F.kl_div(
            F.log_softmax(s_logits.float() / TEMP, -1),
            F.log_softmax(t_logits.float() / TEMP, -1),
            log_target=True,
            reduction="batchmean",
        )
        loss = hint + kd * TEMP * TEMP + F.cross_entropy(s_logits.float(), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    feats.clear()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, t_logits, s_logits, stages, hint, kd, loss
student.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    pred = student(torch.randn(BE, 3, R, R, device=device)).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
