"""Knowledge distillation with its work spread over three CUDA streams, as throughput-minded
training code writes it: a timm ViT-B/16 teacher in fp16 (.half(), eval, no_grad) runs on a
high-priority side stream while a torchvision ResNet-34 student trains under bf16 autocast on the
default stream; a torch.cuda.Event recorded on the teacher stream is waited on (wait_event) before
the KD loss (KL at temperature 4 plus cross-entropy), the teacher's logits and the shared input
record_stream'ed across; an EMA of the student updated with _foreach_mul_/_foreach_add_ on a third
stream that the next optimizer step waits on. Inputs are decoded-like uint8 NHWC batches from a
ring of two pinned host buffers, copied non_blocking and converted to normalized float on the GPU.
SGD with momentum, batch 128, 6 steps; then the teacher and the EMA student evaluated side by side
on two streams over 2 batches of 256 with event timing; 5 phases."""

import contextlib
import copy
import os

import timm
import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15203)
B, IMG, STEPS, NCLS, T = (4, 64, 4, 10, 4.0) if SMALL else (128, 224, 6, 1000, 4.0)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"


def on(stream):
    return torch.cuda.stream(stream) if cuda else contextlib.nullcontext()


teacher = timm.create_model(
    "vit_tiny_patch16_224" if SMALL else "vit_base_patch16_224", num_classes=NCLS, img_size=IMG
)
teacher = teacher.to(device).eval().requires_grad_(False)
if cuda:
    teacher = teacher.half()
student = (
    torchvision.models.resnet18(num_classes=NCLS) if SMALL else torchvision.models.resnet34(num_classes=NCLS)
)
student = student.to(device)
ema = copy.deepcopy(student).eval().requires_grad_(False)
opt = torch.optim.SGD(student.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
teacher_stream = torch.cuda.Stream(priority=-1) if cuda else None
ema_stream = torch.cuda.Stream() if cuda else None
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
ring = [torch.empty((B, IMG, IMG, 3), dtype=torch.uint8) for _ in range(2)]
if cuda:
    ring = [r.pin_memory() for r in ring]
ema_params = [p for p in ema.parameters()]
student_params = [p for p in student.parameters()]
if cuda:
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def load(step, n):
    buf = ring[step % 2][:n]
    buf.copy_(torch.randint(0, 256, buf.shape, dtype=torch.uint8))
    x = buf.to(device, non_blocking=True).permute(0, 3, 1, 2).float()
    return x.sub_(mean).div_(std).contiguous(), torch.randint(0, NCLS, (n,), device=device)


student.train()
for step in range(STEPS):
    x, y = load(step, B)
    if cuda:
        teacher_stream.wait_stream(torch.cuda.current_stream())
    with on(teacher_stream), torch.no_grad():
        t_logits = teacher(x.half() if cuda else x).float()
        done = torch.cuda.Event() if cuda else None
        if cuda:
            done.record()
            x.record_stream(teacher_stream)
    with torch.autocast(device, dtype=torch.bfloat16):
        s_logits = student(x)
    if cuda:
        torch.cuda.current_stream().wait_event(done)
        t_logits.record_stream(torch.cuda.current_stream())
    kd = F.kl_div(
        F.log_softmax(s_logits.float() / T, dim=1),
        F.log_softmax(t_logits / T, dim=1),
        reduction="batchmean",
        log_target=True,
    )
    loss = 0.9 * kd * T * T + 0.1 * F.cross_entropy(s_logits.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cuda:
        torch.cuda.current_stream().wait_stream(ema_stream)
    opt.step()
    if cuda:
        ema_stream.wait_stream(torch.cuda.current_stream())
    with on(ema_stream), torch.no_grad():
        torch._foreach_mul_(ema_params, 0.999)
        torch._foreach_add_(ema_params, student_params, alpha=0.001)
    del x, y, t_logits, s_logits, kd
    if cuda and step % 2 == 1:
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

if cuda:
    torch.cuda.current_stream().wait_stream(ema_stream)
agree = 0
elapsed = []
with torch.no_grad():
    for i in range(2):
        x, _ = load(i, B)
        x = torch.cat([x, x.flip(3)])
        if cuda:
            teacher_stream.wait_stream(torch.cuda.current_stream())
            ema_stream.wait_stream(torch.cuda.current_stream())
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
        with on(teacher_stream):
            t_pred = teacher(x.half() if cuda else x).argmax(1)
        with on(ema_stream), torch.autocast(device, dtype=torch.bfloat16):
            s_pred = ema(x).argmax(1)
        if cuda:
            x.record_stream(teacher_stream)
            x.record_stream(ema_stream)
            torch.cuda.current_stream().wait_stream(teacher_stream)
            torch.cuda.current_stream().wait_stream(ema_stream)
            t1.record()
            t1.synchronize()
            elapsed.append(t0.elapsed_time(t1))
        agree += int((t_pred == s_pred).sum())
        del x, t_pred, s_pred
if cuda:
    print(
        f"eval agree {agree} batches {len(elapsed)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
