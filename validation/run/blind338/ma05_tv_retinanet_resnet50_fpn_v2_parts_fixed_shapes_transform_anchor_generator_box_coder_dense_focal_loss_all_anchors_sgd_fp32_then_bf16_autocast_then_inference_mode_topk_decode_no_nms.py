"""Dense detection training and decoding with torchvision's retinanet_resnet50_fpn_v2 (no weights), fixed
shapes.

The detector's own pieces are called one by one, the way a custom training loop does it, so that no shape
depends on values: model.transform (GeneralizedRCNNTransform, min_size = max_size = 640: every 600 x 800 image
is resized to 480 x 640 and the batch padded to a multiple of 32), model.backbone (ResNet-50 with BatchNorm2d,
as built without weights, + FPN P3-P7), model.head (GroupNorm classification and regression towers),
model.anchor_generator (9 anchors per location) and model.box_coder. The loss is computed over every anchor
with dense targets: sigmoid_focal_loss on one-hot labels times a foreground mask, an L1 loss on
box_coder.encode_single's regression targets times the same mask (multiplied, never indexed), normalised by
the foreground count. No matcher, no NMS: the output sizes are fixed.

1. Set-up: the model, SGD (momentum 0.9, wd 1e-4), cudnn.benchmark False (the default).
2. First training step in fp32 at batch 4 (images of 3 x 600 x 800 as a list, resized by the transform).
3. Two steps under bf16 autocast (the loss computed in fp32).
4. eval() under torch.inference_mode, fp32: batch 8 through transform, backbone, head; per image the 1000 best
   of the sigmoid scores over anchors x classes (topk), their anchors' boxes decoded with decode_single and
   clipped with ops.clip_boxes_to_image, then mapped back to the original size.
5. The same evaluation under bf16 autocast at batch 16.

Phases: set-up; fp32 step; bf16 steps; fp32 top-k decode; bf16 top-k decode. 5 phases."""

import os

import torch
from torchvision.models.detection import retinanet_resnet50_fpn_v2
from torchvision.ops import clip_boxes_to_image, sigmoid_focal_loss

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(33805)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    B, HW, SIZE, EVAL_B, EVAL_B2, TOPK = 1, (150, 200), 160, 2, 2, 100
else:
    B, HW, SIZE, EVAL_B, EVAL_B2, TOPK = 4, (600, 800), 640, 8, 16, 1000
N_CLASSES = 91


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


model = retinanet_resnet50_fpn_v2(
    weights=None, weights_backbone=None, num_classes=N_CLASSES, min_size=SIZE, max_size=SIZE
).to(device)
opt = torch.optim.SGD(
    [p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9, weight_decay=1e-4
)
report("setup")


def forward_dense(images):
    image_list, _ = model.transform(images)
    features = list(model.backbone(image_list.tensors).values())
    head = model.head(features)
    anchors = model.anchor_generator(image_list, features)
    return image_list, head, anchors


def train_step(bf16):
    model.train()
    images = [torch.rand(3, *HW, device=device) for _ in range(B)]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16 and amp):
        _, head, anchors = forward_dense(images)
    anchors = torch.stack(anchors)
    fg = (torch.rand(anchors.shape[:2], device=device) < 0.01).float()
    labels = torch.randint(0, N_CLASSES, anchors.shape[:2], device=device)
    cls_target = torch.nn.functional.one_hot(labels, N_CLASSES).float() * fg[..., None]
    gt_boxes = anchors + torch.randn_like(anchors) * 4
    reg_target = torch.stack(
        [model.box_coder.encode_single(g, a) for g, a in zip(gt_boxes, anchors, strict=True)]
    )
    num_fg = fg.sum().clamp(min=1)
    cls_loss = sigmoid_focal_loss(head["cls_logits"].float(), cls_target, reduction="sum") / num_fg
    reg_loss = ((head["bbox_regression"].float() - reg_target).abs().sum(-1) * fg).sum() / num_fg
    loss = cls_loss + reg_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


loss = train_step(bf16=False)
print(f"fp32 step loss {loss.item():.4f}")
report("fp32 step")
for _ in range(2):
    loss = train_step(bf16=True)
print(f"bf16 step loss {loss.item():.4f}")
report("bf16 steps")


def detect(n, bf16):
    images = [torch.rand(3, *HW, device=device) for _ in range(n)]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16 and amp):
        image_list, head, anchors = forward_dense(images)
    results = []
    for i in range(n):
        scores = head["cls_logits"][i].float().sigmoid().flatten()
        top, idx = scores.topk(TOPK)
        anchor_idx = idx // N_CLASSES
        boxes = model.box_coder.decode_single(
            head["bbox_regression"][i][anchor_idx].float(), anchors[i][anchor_idx]
        )
        boxes = clip_boxes_to_image(boxes, image_list.image_sizes[i])
        rh, rw = HW[0] / image_list.image_sizes[i][0], HW[1] / image_list.image_sizes[i][1]
        boxes = boxes * torch.tensor([rw, rh, rw, rh], device=device)
        results.append({"boxes": boxes, "scores": top, "labels": idx % N_CLASSES})
    return results


model.eval()
with torch.inference_mode():
    dets = detect(EVAL_B, bf16=False)
print(f"fp32 detections per image {[d['boxes'].shape[0] for d in dets]}")
report("fp32 top-k decode")
with torch.inference_mode():
    dets = detect(EVAL_B2, bf16=True)
print(f"bf16 detections per image {dets[0]['boxes'].shape[0]}, best score {dets[0]['scores'][0].item():.4f}")
if device == "cuda":
    print(f"bf16 decode peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
