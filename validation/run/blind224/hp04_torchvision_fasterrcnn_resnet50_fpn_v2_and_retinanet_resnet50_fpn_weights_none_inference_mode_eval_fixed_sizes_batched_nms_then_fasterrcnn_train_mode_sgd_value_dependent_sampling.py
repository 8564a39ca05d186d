"""torchvision's detection models as a practitioner runs them with no weights at hand:
fasterrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None) and retinanet_resnet50_fpn(weights=None,
weights_backbone=None), 91 classes, images of a fixed size (min_size=max_size=800, so the transform
resizes nothing; 800 x 800 inputs).

Eval postprocessing is value-dependent by nature: the RPN keeps the top pre_nms_top_n anchors per level,
runs batched_nms and keeps at most 1000 proposals; the ROI heads and RetinaNet filter scores > 0.05, run
batched_nms and keep 100 detections. With random weights the counts follow the values.
A last phase runs an explicit torchvision.ops.batched_nms over dense random boxes (fixed count in, value-
dependent count out) and box_iou between the kept boxes and a fixed set.

Phases: Faster R-CNN v2 under inference_mode at batch 8; RetinaNet under inference_mode at batch 8 (Faster
R-CNN deleted, empty_cache()); Faster R-CNN v2 in train mode, 3 steps of SGD momentum 0.9 at batch 4 with
4 random boxes per image (the RPN's and ROI heads' fg/bg samplers draw random subsets: value-dependent,
fixed sizes 256 and 512 per image); the explicit NMS phase. 4 phases."""

import torch
import torchvision
from torchvision.models.detection import fasterrcnn_resnet50_fpn_v2, retinanet_resnet50_fpn
from torchvision.ops import batched_nms, box_iou

torch.manual_seed(2244)
device = "cuda"
RES = 800


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def images(b):
    return [torch.rand(3, RES, RES, device=device) for _ in range(b)]


frcnn = fasterrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, min_size=RES, max_size=RES).to(device)
frcnn.eval()
with torch.inference_mode():
    out = frcnn(images(8))
print("faster rcnn detections", [o["boxes"].shape[0] for o in out])
del out
report("faster rcnn v2 inference")

cpu_state = {k: v.cpu() for k, v in frcnn.state_dict().items()}
del frcnn
torch.cuda.empty_cache()
retina = retinanet_resnet50_fpn(weights=None, weights_backbone=None, min_size=RES, max_size=RES).to(device)
retina.eval()
with torch.inference_mode():
    out = retina(images(8))
print("retinanet detections", [o["boxes"].shape[0] for o in out])
del out, retina
report("retinanet inference")

torch.cuda.empty_cache()
frcnn = fasterrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, min_size=RES, max_size=RES)
frcnn.load_state_dict(cpu_state)
frcnn.to(device).train()
params = [p for p in frcnn.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
for step in range(3):
    imgs = images(4)
    targets = []
    for _ in imgs:
        xy = torch.rand(4, 2, device=device) * RES * 0.6
        wh = torch.rand(4, 2, device=device) * RES * 0.3 + 32
        targets.append({"boxes": torch.cat([xy, xy + wh], 1), "labels": torch.randint(1, 91, (4,), device=device)})
    losses = frcnn(imgs, targets)
    loss = sum(losses.values())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", {k: round(v.item(), 4) for k, v in losses.items()})
report("faster rcnn v2 train")

del frcnn, opt, params
torch.cuda.empty_cache()
xy = torch.rand(200000, 2, device=device) * 1000
boxes = torch.cat([xy, xy + torch.rand(200000, 2, device=device) * 100 + 1], 1)
scores = torch.rand(200000, device=device)
idxs = torch.randint(0, 80, (200000,), device=device)
keep = batched_nms(boxes, scores, idxs, 0.5)
iou = box_iou(boxes[keep], boxes[:1000])
print("kept", keep.numel(), "iou", tuple(iou.shape))
report("batched_nms")
