"""Decoupled Knowledge Distillation (DKD, Zhao et al. CVPR 2022) as mdistiller implements it, on an
ImageNet-21k-P-sized label space (11,221 classes) so that the loss's per-class tensors matter: a timm
ResNet-50 teacher (random weights, converted to fp16 with `.half()` and channels_last, eval mode,
`requires_grad_(False)`, run under `torch.no_grad()`) and a timm ResNet-18 student (channels_last,
bf16 autocast, SGD momentum 0.9, weight decay 5e-4, nesterov). The loss: cross-entropy plus DKD with
alpha 1, beta 8, temperature 4 and a linear warm-up factor: the ground-truth mask built by
`zeros_like(logits).scatter_(1, target, 1).bool()` and the other-class mask by `ones_like(...).scatter_(
1, target, 0).bool()`; target/non-target probabilities summed under each mask and concatenated (the
binary TCKD term), and the NCKD term a KL between softmaxes of logits / T - 1000 * gt_mask, both KLs
through `F.kl_div(..., size_average=False)` (the legacy argument mdistiller passes; PyTorch warns).
Phase 1: 6 steps at batch 256, 224 x 224 crops. Phase 2: the student evaluated under inference_mode at
batch 512, 224 x 224, top-1/top-5 against random labels. 2 phases."""

import timm
import torch
import torch.nn.functional as F

torch.manual_seed(2815)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


NUM_CLASSES = 11221


def _get_gt_mask(logits, target):
    target = target.reshape(-1)
    return torch.zeros_like(logits).scatter_(1, target.unsqueeze(1), 1).bool()


def _get_other_mask(logits, target):
    target = target.reshape(-1)
    return torch.ones_like(logits).scatter_(1, target.unsqueeze(1), 0).bool()


def cat_mask(t, mask1, mask2):
    t1 = (t * mask1).sum(dim=1, keepdims=True)
    t2 = (t * mask2).sum(1, keepdims=True)
    return torch.cat([t1, t2], dim=1)


def dkd_loss(logits_student, logits_teacher, target, alpha, beta, temperature):
    gt_mask = _get_gt_mask(logits_student, target)
    other_mask = _get_other_mask(logits_student, target)
    pred_student = F.softmax(logits_student / temperature, dim=1)
    pred_teacher = F.softmax(logits_teacher / temperature, dim=1)
    pred_student = cat_mask(pred_student, gt_mask, other_mask)
    pred_teacher = cat_mask(pred_teacher, gt_mask, other_mask)
    log_pred_student = torch.log(pred_student)
    tckd_loss = (
        F.kl_div(log_pred_student, pred_teacher, size_average=False) * (temperature**2) / target.shape[0]
    )
    pred_teacher_part2 = F.softmax(logits_teacher / temperature - 1000.0 * gt_mask, dim=1)
    log_pred_student_part2 = F.log_softmax(logits_student / temperature - 1000.0 * gt_mask, dim=1)
    nckd_loss = (
        F.kl_div(log_pred_student_part2, pred_teacher_part2, size_average=False)
        * (temperature**2)
        / target.shape[0]
    )
    return alpha * tckd_loss + beta * nckd_loss


teacher = timm.create_model("resnet50", pretrained=False, num_classes=NUM_CLASSES)
teacher = teacher.half().to(dev, memory_format=torch.channels_last).eval().requires_grad_(False)
student = timm.create_model("resnet18", pretrained=False, num_classes=NUM_CLASSES)
student = student.to(dev, memory_format=torch.channels_last)
opt = torch.optim.SGD(student.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
WARMUP = 20
student.train()
for epoch in range(6):
    image = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, NUM_CLASSES, (256,), device=dev)
    with torch.no_grad():
        logits_teacher = teacher(image.half()).float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits_student = student(image)
    logits_student = logits_student.float()
    loss_ce = F.cross_entropy(logits_student, target)
    loss_dkd = min((epoch + 1) / WARMUP, 1.0) * dkd_loss(
        logits_student, logits_teacher, target, 1.0, 8.0, 4.0
    )
    loss = loss_ce + loss_dkd
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("train", round(loss_ce.item(), 3), round(loss_dkd.item(), 3))
report("train_dkd_frozen_fp16_teacher_bf16_student")

del loss, loss_ce, loss_dkd, logits_student, logits_teacher
student.eval()
correct1 = correct5 = 0
with torch.inference_mode():
    for _b in range(4):
        image = torch.randn(512, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, NUM_CLASSES, (512,), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = student(image)
        top5 = out.float().topk(5, dim=1).indices
        correct1 += (top5[:, 0] == target).sum().item()
        correct5 += (top5 == target.unsqueeze(1)).any(dim=1).sum().item()
print("top1", correct1, "top5", correct5)
report("inference_mode_student_eval")
