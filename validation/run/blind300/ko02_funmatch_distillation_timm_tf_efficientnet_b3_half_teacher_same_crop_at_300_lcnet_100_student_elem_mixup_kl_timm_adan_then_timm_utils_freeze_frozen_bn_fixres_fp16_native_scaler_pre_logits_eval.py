"""Knowledge distillation in the "function matching" recipe (Beyer et al. 2022): a timm 1.0.29
`tf_efficientnet_b3` teacher (TF-ported "same" padding, 1000 classes) cast with `.half()`, channels-last,
in eval mode, distilled into an `lcnet_100` student (PP-LCNet, hard-swish depthwise blocks). Student and
teacher see the same augmented crop: the student at 224, the teacher the crop resized to its native 300 by
`F.interpolate` (bicubic, antialias). The batch is mixed by timm's `Mixup` in `mode="elem"` (a mixup or
cutmix draw per sample, mixup alpha 0.8, cutmix alpha 1.0) and the student matches the teacher's
temperature-4 softmax on the mixed images through a KL divergence (`log_target=True`), no labels.
Optimizer timm's `adan` (`create_optimizer_v2`, weight decay 0.02, no decay on biases and norms) with a
warmup cosine `CosineLRScheduler`, student under bf16 autocast, batch 128.

Phases: 0 teacher and student built; 1 first distillation step; 2 three more; 3 FixRes-style fine-tune at
256: `timm.utils.freeze` of the stem and the first two stages (their BatchNorms become
`FrozenBatchNorm2d`), two steps of fp16 autocast with timm's `NativeScaler` (gradient clipping at 1.0) and a
fresh AdamW over the trainable parameters; 4 eval at 288 under inference_mode: `forward_features`,
`forward_head(pre_logits=True)` embeddings and the student/teacher top-1 agreement over 3 batches of 192."""

import numpy as np
import timm
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from timm.utils import NativeScaler, freeze

torch.manual_seed(3002)
np.random.seed(3002)
dev = "cuda"
B, STEPS, TEMP = 128, 4, 4.0
MEAN = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


teacher = timm.create_model("tf_efficientnet_b3", pretrained=False).to(dev, memory_format=torch.channels_last)
teacher = teacher.half().eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = timm.create_model("lcnet_100", pretrained=False, drop_rate=0.1).to(
    dev, memory_format=torch.channels_last
)
optimizer = create_optimizer_v2(student, "adan", lr=2e-3, weight_decay=0.02)
scheduler = CosineLRScheduler(optimizer, t_initial=STEPS, warmup_t=1, warmup_lr_init=1e-5)
mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode="elem", label_smoothing=0.0, num_classes=1000)
report("teacher_b3_half_student_lcnet_build_adan")


def crops(n, size):
    x = torch.rand(n, 3, size, size, device=dev)
    return ((x - MEAN) / STD).contiguous(memory_format=torch.channels_last)


def distill_loss(student_logits, teacher_logits):
    return (
        F.kl_div(
            F.log_softmax(student_logits.float() / TEMP, dim=1),
            F.log_softmax(teacher_logits.float() / TEMP, dim=1),
            log_target=True,
            reduction="batchmean",
        )
        * TEMP
        * TEMP
    )


student.train()
for step in range(STEPS):
    x = crops(B, 224)
    x, _ = mixup(x, torch.zeros(B, dtype=torch.long, device=dev))
    with torch.no_grad():
        t_in = F.interpolate(x, size=(300, 300), mode="bicubic", antialias=True, align_corners=False)
        t_logits = teacher(t_in.half().contiguous(memory_format=torch.channels_last))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        s_logits = student(x.contiguous(memory_format=torch.channels_last))
    loss = distill_loss(s_logits, t_logits)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step(step + 1)
    if step == 0:
        print("first kd loss", round(loss.item(), 4))
        report("kd_first_step_elem_mixup")
print("kd loss", round(loss.item(), 4))
report("kd_three_more_steps")

del x, t_in, t_logits, s_logits, loss
optimizer = None
freeze(student, ["conv_stem", "bn1", "blocks.0", "blocks.1"])
ft_opt = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.05)
scaler = NativeScaler()
for _ in range(2):
    x = crops(B, 256)
    with torch.no_grad():
        t_in = F.interpolate(x, size=(300, 300), mode="bicubic", antialias=True, align_corners=False)
        t_logits = teacher(t_in.half().contiguous(memory_format=torch.channels_last))
    with torch.autocast("cuda", dtype=torch.float16):
        s_logits = student(x)
        loss = distill_loss(s_logits, t_logits)
    ft_opt.zero_grad(set_to_none=True)
    scaler(loss, ft_opt, clip_grad=1.0, parameters=[p for p in student.parameters() if p.requires_grad])
print("fixres loss", round(loss.item(), 4))
report("fixres_256_frozen_stem_native_scaler")

del x, t_in, t_logits, s_logits, loss
student.eval()
agree = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(3):
        x = crops(192, 288)
        feats = student.forward_features(x)
        emb = student.forward_head(feats, pre_logits=True)
        s_top = student.forward_head(feats).argmax(1)
        t_top = teacher(
            F.interpolate(x, size=(300, 300), mode="bicubic", antialias=True, align_corners=False)
            .half()
            .contiguous(memory_format=torch.channels_last)
        ).argmax(1)
        agree += int((s_top == t_top).sum())
print("agreement", agree, tuple(emb.shape))
report("eval_288_pre_logits_agreement")
