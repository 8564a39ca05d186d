"""Knowledge distillation between two timm CNNs built without pretrained weights: a frozen
SKResNet-18 teacher (selective-kernel blocks: a 3x3 branch and a dilation-2 3x3 branch fused by
attention) in eval mode under no_grad, and a Res2Net-50 26w x 4s student (hierarchical 3x3
convolutions over 26-, 52-, 104- and 208-channel splits) trained on cross entropy with label
smoothing 0.1 plus KL to the teacher at temperature 4; channels_last models and inputs, bf16
autocast, AdamW (foreach), batch 32 of 192 x 192, 3 steps; then the student evaluated on 16 images
with a five-crop test-time average under inference_mode; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10804)
B, R, STEPS, NCLS = (2, 64, 2, 10) if SMALL else (32, 192, 3, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
cl = torch.channels_last

teacher = timm.create_model("skresnet18", pretrained=False, num_classes=NCLS).to(device, memory_format=cl)
teacher.eval().requires_grad_(False)
student = timm.create_model("res2net50_26w_4s", pretrained=False, num_classes=NCLS, drop_rate=0.2)
student = student.to(device, memory_format=cl)
opt = torch.optim.AdamW(student.parameters(), lr=1e-3, weight_decay=0.05, foreach=True)
gen = torch.Generator(device=device).manual_seed(4)
TEMP = 4.0


def batch(n, r):
    x = torch.randn(n, 3, r, r, device=device, generator=gen).contiguous(memory_format=cl)
    return x, torch.randint(0, NCLS, (n,), device=device, generator=gen)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
student.train()
for step in range(STEPS):
    x, y = batch(B, R)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
    ce = F.cross_entropy(s_logits.float(), y, label_smoothing=0.1)
    kd = F.kl_div(
        F.log_softmax(s_logits.float() / TEMP, -1),
        F.log_softmax(t_logits.float() / TEMP, -1),
        log_target=True,
        reduction="batchmean",
    )
    loss = 0.5 * ce + 0.5 * TEMP * TEMP * kd
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, t_logits, s_logits, ce, kd, loss
student.eval()
with torch.inference_mode():
    full = R + R // 7
    x, y = batch(16, full)
    crops = [x[..., :R, :R], x[..., :R, -R:], x[..., -R:, :R], x[..., -R:, -R:]]
    o = (full - R) // 2
    crops.append(x[..., o : o + R, o : o + R])
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        prob = sum(student(c.contiguous(memory_format=cl)).float().softmax(-1) for c in crops) / 5
    acc = (prob.argmax(-1) == y).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
