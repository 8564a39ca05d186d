"""Logit distillation (Hinton et al. 2015) of a torchvision ResNet-50 teacher into a ResNet-18 student
on ImageNet-shaped batches, then into a MobileNetV3-Large student.

Teacher: torchvision resnet50 (random init, nothing downloaded; 1,000 classes), channels_last, frozen
(requires_grad_(False), eval mode) and run under torch.no_grad inside bf16 autocast. Student: resnet18,
channels_last, trained under bf16 autocast with the loss
alpha * T^2 * KL(softmax(t / T) || softmax(s / T)) + (1 - alpha) * CE(s, y), T = 4, alpha = 0.9
(F.kl_div on log_softmax inputs, reduction "batchmean"), SGD momentum 0.9 nesterov, weight decay 1e-4
on conv and linear weights only, OneCycle-like lr by hand. Batch 192 x 3 x 224 x 224 made on the device
in fp32 and converted to channels_last.

Phases: the first distillation step; 3 more steps; evaluation of 4 batches of 256 under
torch.inference_mode and bf16 autocast measuring teacher/student top-1 agreement and the mean KL; then a
MobileNetV3-Large student (fp32 weights, channels_last) distilled from the same teacher for 3 steps at
batch 192 under fp16 autocast with torch.amp.GradScaler (teacher logits under no_grad in fp16 autocast)
and SGD momentum. 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19701)
if SMALL:
    B, EVAL_B, STEPS, EVAL_BATCHES, RES = 4, 4, 1, 1, 64
else:
    B, EVAL_B, STEPS, EVAL_BATCHES, RES = 192, 256, 3, 4, 224
T, ALPHA = 4.0, 0.9
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

teacher = torchvision.models.resnet50(num_classes=1000).to(device, memory_format=torch.channels_last)
teacher.eval().requires_grad_(False)
student = torchvision.models.resnet18(num_classes=1000).to(device, memory_format=torch.channels_last)


def param_groups(model, wd):
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.ndim > 1 else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


opt = torch.optim.SGD(param_groups(student, 1e-4), lr=0.1, momentum=0.9, nesterov=True)


def kd_loss(s_logits, t_logits, y):
    soft = F.kl_div(
        F.log_softmax(s_logits.float() / T, dim=-1),
        F.log_softmax(t_logits.float() / T, dim=-1),
        reduction="batchmean",
        log_target=True,
    ) * (T * T)
    hard = F.cross_entropy(s_logits.float(), y)
    return ALPHA * soft + (1 - ALPHA) * hard


def batch(n):
    x = torch.randn(n, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (n,), device=device)
    return x, y


def kd_step(step, total):
    lr = 0.1 * min(1.0, (step + 1) / total)
    for g in opt.param_groups:
        g["lr"] = lr
    x, y = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
    loss = kd_loss(s_logits, t_logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


student.train()
print(f"step 0 kd loss {kd_step(0, STEPS + 1):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for s in range(STEPS):
    loss = kd_step(s + 1, STEPS + 1)
print(f"step {STEPS} kd loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.eval()
agree, kl_sum, n = 0, 0.0, 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(EVAL_BATCHES):
        x, _ = batch(EVAL_B)
        t_logits, s_logits = teacher(x).float(), student(x).float()
        agree += (t_logits.argmax(-1) == s_logits.argmax(-1)).sum().item()
        kl_sum += F.kl_div(
            F.log_softmax(s_logits, -1), F.log_softmax(t_logits, -1), reduction="sum", log_target=True
        ).item()
        n += x.shape[0]
print(f"eval agreement {agree / n:.4f} mean kl {kl_sum / n:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

opt = None
mbv3 = torchvision.models.mobilenet_v3_large(num_classes=1000).to(device, memory_format=torch.channels_last)
mbv3.train()
m_opt = torch.optim.SGD(param_groups(mbv3, 4e-5), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for step in range(3):
    x, y = batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = mbv3(x)
        loss = kd_loss(s_logits, t_logits, y)
    m_opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(m_opt)
    scaler.update()
    print(f"mobilenetv3 step {step} kd loss {loss.item():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(
        f"mobilenetv3 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
