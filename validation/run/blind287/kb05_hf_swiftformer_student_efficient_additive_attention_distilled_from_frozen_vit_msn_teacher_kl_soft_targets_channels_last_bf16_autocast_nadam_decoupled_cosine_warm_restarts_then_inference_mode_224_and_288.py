"""Knowledge distillation between two Hugging Face vision families built from configs: a SwiftFormer student
(transformers 5.17's `SwiftFormerForImageClassification`, SwiftFormer-S sized: depths 3/3/9/6, widths
48/64/168/224, conv encoders and an efficient additive attention in each stage's last block, a classifier and
a distillation head whose logits it averages) learns 1,000 classes from a frozen ViT-MSN teacher
(`ViTMSNForImageClassification`, ViT-S/16: d 384, 12 layers, 6 heads, at 224) run under `no_grad` in bf16
autocast. Student in channels_last, fp32 weights under bf16 autocast; loss 0.5 * cross-entropy on the labels +
0.5 * T^2 * KL(student/T || teacher/T) (T = 2, `F.kl_div(log_target=True)`); NAdam with decoupled weight decay
under CosineAnnealingWarmRestarts (T_0 3), 6 steps at batch 128 (phase 1). Phase 2: `inference_mode`
evaluation of student and teacher at 224, 4 batches of 256 (agreement of their argmaxes). Phase 3: the student
alone at 288 x 288, 2 batches of 128 (SwiftFormer has no position embeddings). Seeded; no value-dependent
sizes. 3 phases."""

import torch
import torch.nn.functional as F
from transformers import (
    SwiftFormerConfig,
    SwiftFormerForImageClassification,
    ViTMSNConfig,
    ViTMSNForImageClassification,
)

torch.manual_seed(2875)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


student = SwiftFormerForImageClassification(
    SwiftFormerConfig(depths=[3, 3, 9, 6], embed_dims=[48, 64, 168, 224], num_labels=1000)
).cuda()
student = student.to(memory_format=torch.channels_last)
teacher = ViTMSNForImageClassification(
    ViTMSNConfig(
        hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, num_labels=1000
    )
).cuda()
teacher.eval().requires_grad_(False)
print(
    "student",
    sum(p.numel() for p in student.parameters()),
    "teacher",
    sum(p.numel() for p in teacher.parameters()),
)

opt = torch.optim.NAdam(student.parameters(), lr=2e-3, weight_decay=0.05, decoupled_weight_decay=True)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3)
T = 2.0

student.train()
for step in range(6):
    images = torch.randn(128, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (128,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with torch.no_grad():
            soft = teacher(pixel_values=images).logits.float()
        logits = student(pixel_values=images.contiguous(memory_format=torch.channels_last)).logits.float()
    ce = F.cross_entropy(logits, labels)
    kd = F.kl_div(
        F.log_softmax(logits / T, dim=-1),
        F.log_softmax(soft / T, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    loss = 0.5 * ce + 0.5 * T * T * kd
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(ce.item(), 3), round(kd.item(), 4))
del loss, logits, soft
report("distillation")

student.eval()
agree = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(4):
        images = torch.randn(256, 3, 224, 224, device="cuda")
        s = student(pixel_values=images.contiguous(memory_format=torch.channels_last)).logits
        t = teacher(pixel_values=images).logits
        agree += (s.argmax(-1) == t.argmax(-1)).sum().item()
print("agreement", agree / 1024)
report("eval_224_student_and_teacher")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        images = torch.randn(128, 3, 288, 288, device="cuda").contiguous(memory_format=torch.channels_last)
        print("288", tuple(student(pixel_values=images).logits.shape))
report("student_288")
