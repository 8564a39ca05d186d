"""A D-FINE real-time detector (transformers 5.17's `DFineForObjectDetection`) built from config in its
D-FINE-L layout: an HGNetV2-B4 backbone (frozen batch norms, stages 2-4 out), the hybrid encoder (one
transformer layer on the stride-32 map, CCFF-style fusion), 300 queries selected top-k from the encoder's
anchors, a 6-layer decoder with multi-scale deformable attention (4 points) and the fine-grained
distribution refinement of box edges (32 bins, the LQE head), 80 classes. No ground-truth boxes and no
scipy: the detector is fine-tuned by self-distillation from an EMA copy of itself (pseudo-labels), the
student's class logits against the teacher's sigmoid scores (binary cross-entropy) and its boxes against the
teacher's (L1), on 640 x 640 images of batch 16: fp32 weights under bf16 autocast, AdamW with a lower
backbone learning rate, the teacher's forward under no_grad and its EMA update in place. 5 steps; then the
student under inference_mode and autocast at batch 32, its top-100 detections per image. No
value-dependent sizes (the queries are a fixed top-k). 3 phases."""

import copy

import torch
import torch.nn.functional as F
from transformers import DFineConfig, DFineForObjectDetection

torch.manual_seed(2823)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = DFineConfig(
    id2label={i: f"class_{i}" for i in range(80)},
    label2id={f"class_{i}": i for i in range(80)},
    num_queries=300,
    decoder_layers=6,
    decoder_n_points=4,
    max_num_bins=32,
    num_denoising=100,
)
student = DFineForObjectDetection(cfg).cuda()
teacher = copy.deepcopy(student).eval().requires_grad_(False)
backbone = [p for n, p in student.named_parameters() if "backbone" in n and p.requires_grad]
rest = [p for n, p in student.named_parameters() if "backbone" not in n and p.requires_grad]
opt = torch.optim.AdamW(
    [{"params": backbone, "lr": 1.25e-5}, {"params": rest, "lr": 2.5e-4}], weight_decay=1.25e-4
)
print("params", sum(p.numel() for p in student.parameters()))
report("d_fine_built_fp32")

student.train()
for step in range(5):
    images = torch.randn(16, 3, 640, 640, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        t = teacher(pixel_values=images)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        s = student(pixel_values=images)
        cls_loss = F.binary_cross_entropy_with_logits(s.logits.float(), t.logits.float().sigmoid())
        box_loss = F.l1_loss(s.pred_boxes.float(), t.pred_boxes.float())
        loss = cls_loss + 5.0 * box_loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for pt, ps in zip(teacher.parameters(), student.parameters(), strict=True):
            pt.lerp_(ps, 1 - 0.9999)
    print(step, round(loss.item(), 4))
del s, t, loss, cls_loss, box_loss
report("self_distillation")

student.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    images = torch.randn(32, 3, 640, 640, device="cuda")
    out = student(pixel_values=images)
    scores = out.logits.float().sigmoid().flatten(1)
    top, idx = scores.topk(100, dim=1)
    boxes = out.pred_boxes.gather(1, (idx // 80).unsqueeze(-1).expand(-1, -1, 4))
print("detections", tuple(boxes.shape), round(top.mean().item(), 4))
report("inference_mode_eval")
