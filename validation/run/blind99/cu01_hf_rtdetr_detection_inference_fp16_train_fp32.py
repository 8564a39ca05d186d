"""Object detection with HF RT-DETR (its ResNet-50-vd backbone, hybrid encoder and 6-layer
deformable decoder with 300 queries), built from a config with 80 classes: fp16 inference of 8
images at 640x640 under torch.inference_mode with a top-100 decode of the queries' scores, the fp32
model under bf16 autocast on 4 images at 800x800, then two fp32 training steps of the encoder and
decoder at 512x512 (batch 4, frozen backbone, a fixed query-to-box assignment with sigmoid focal and
L1 box losses) with AdamW and gradient clipping; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import RTDetrConfig, RTDetrForObjectDetection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9901)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    cfg = RTDetrConfig(num_labels=80, num_queries=20, decoder_layers=2)
    INFER, INFER_B, BIG, BIG_B, TRAIN, TRAIN_B = 128, 2, 160, 1, 128, 2
else:
    cfg = RTDetrConfig(num_labels=80)
    INFER, INFER_B, BIG, BIG_B, TRAIN, TRAIN_B = 640, 8, 800, 4, 512, 4
model = RTDetrForObjectDetection(cfg).to(device).eval()


def decode(outputs, k=100):
    scores = outputs.logits.sigmoid().flatten(1)
    top, idx = scores.topk(k, dim=1)
    query = idx // cfg.num_labels
    boxes = outputs.pred_boxes.gather(1, query.unsqueeze(-1).expand(-1, -1, 4))
    return top, idx % cfg.num_labels, boxes


def report(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


if device == "cuda":
    model.half()
    print(f"model fp16 {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    images = torch.rand(INFER_B, 3, INFER, INFER, device=device)
    if device == "cuda":
        images = images.half()
    outputs = model(pixel_values=images)
    scores, labels, boxes = decode(outputs)
    print(f"infer mean top score {scores.float().mean().item():.3f}")
    del images, outputs, scores, labels, boxes
report("infer fp16")

model.float()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    images = torch.rand(BIG_B, 3, BIG, BIG, device=device)
    outputs = model(pixel_values=images)
    scores, labels, boxes = decode(outputs)
    del images, outputs, scores, labels, boxes
report("infer bf16 autocast")

model.train()
for p in model.model.backbone.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
for step in range(2):
    images = torch.rand(TRAIN_B, 3, TRAIN, TRAIN, device=device)
    target_cls = torch.zeros(TRAIN_B, cfg.num_queries, cfg.num_labels, device=device)
    target_box = torch.rand(TRAIN_B, cfg.num_queries, 4, device=device) * 0.5 + 0.25
    n = 10
    target_cls[:, :n, :].scatter_(2, torch.randint(0, 80, (TRAIN_B, n, 1), device=device), 1.0)
    out = model(pixel_values=images)
    cls_loss = F.binary_cross_entropy_with_logits(out.logits, target_cls, reduction="none")
    p = out.logits.sigmoid()
    p_t = p * target_cls + (1 - p) * (1 - target_cls)
    focal = (cls_loss * (1 - p_t) ** 2).mean(1).sum() / TRAIN_B
    box_loss = F.l1_loss(out.pred_boxes[:, :n], target_box[:, :n])
    loss = focal + 5 * box_loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}")
    del out, images, loss, cls_loss, p, p_t, focal, box_loss
    report(f"train step {step}")
