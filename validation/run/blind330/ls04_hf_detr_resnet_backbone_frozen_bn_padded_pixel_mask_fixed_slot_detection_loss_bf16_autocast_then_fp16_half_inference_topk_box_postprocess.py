"""Object detection with Hugging Face DETR (DetrForObjectDetection) built from configs with a Hugging Face
ResNet-34-style backbone (basic blocks, frozen batch norm), a 4+4-layer transformer and 100 queries:
images of two sizes are padded into one batch with a pixel_mask, and the model is trained under bf16
autocast with AdamW (backbone at a 10x lower learning rate, a parameter group each) and gradient
clipping, using a fixed-slot set loss written by hand (the first K queries take the K ground-truth boxes,
the rest "no object": class cross-entropy with a down-weighted empty class, L1 and generalized-IoU box
losses from torchvision.ops) so every step has the same shapes; then the model is cast to `.half()` and
a validation set is scored in batches under inference_mode with a top-k over query x class scores and
cxcywh -> xyxy box conversion scaled to each image's size.

Phases: 0 model and data; 1 bf16 training; 2 half inference and post-processing; 3 larger-batch inference."""

import os

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou_loss
from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3304)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    SIZES, BS, STEPS, N_VAL, VAL_BS, BIG_BS = ((96, 128), (128, 96)), 2, 2, 4, 2, 4
else:
    SIZES, BS, STEPS, N_VAL, VAL_BS, BIG_BS = ((480, 640), (640, 480)), 8, 6, 64, 16, 48
N_CLASSES, K, QUERIES = 20, 6, 100


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


backbone = ResNetConfig(
    layer_type="basic",
    depths=[3, 4, 6, 3],
    hidden_sizes=[64, 128, 256, 512],
    embedding_size=64,
    out_features=["stage4"],
)
config = DetrConfig(
    backbone_config=backbone,
    num_queries=QUERIES,
    encoder_layers=4,
    decoder_layers=4,
    d_model=256,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    num_labels=N_CLASSES,
)
model = DetrForObjectDetection(config).to(device)
H = max(s[0] for s in SIZES)
Wd = max(s[1] for s in SIZES)


def padded_batch(n):
    px = torch.zeros(n, 3, H, Wd)
    mask = torch.zeros(n, H, Wd, dtype=torch.long)
    sizes = []
    for i in range(n):
        h, w = SIZES[i % 2]
        px[i, :, :h, :w] = torch.randn(3, h, w)
        mask[i, :h, :w] = 1
        sizes.append((h, w))
    return px, mask, torch.tensor(sizes, dtype=torch.float)


def targets(n):
    cls = torch.randint(0, N_CLASSES, (n, K))
    cxcy = torch.rand(n, K, 2) * 0.6 + 0.2
    wh = torch.rand(n, K, 2) * 0.25 + 0.05
    return cls, torch.cat([cxcy, wh], dim=-1)


data = [padded_batch(BS) + targets(BS) for _ in range(STEPS)]
report("model and data")

backbone_params = [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad]
other_params = [p for n, p in model.named_parameters() if "backbone" not in n and p.requires_grad]
opt = torch.optim.AdamW(
    [{"params": backbone_params, "lr": 1e-5}, {"params": other_params, "lr": 1e-4}], weight_decay=1e-4
)
class_weight = torch.ones(N_CLASSES + 1, device=device)
class_weight[-1] = 0.1
model.train()
for px, mask, _, cls, boxes in data:
    px, mask, cls, boxes = px.to(device), mask.to(device), cls.to(device), boxes.to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(pixel_values=px, pixel_mask=mask)
    target_cls = torch.full((BS, QUERIES), N_CLASSES, device=device, dtype=torch.long)
    target_cls[:, :K] = cls
    loss_cls = F.cross_entropy(out.logits.float().transpose(1, 2), target_cls, weight=class_weight)
    pred = out.pred_boxes[:, :K].float()
    loss_l1 = F.l1_loss(pred, boxes)
    loss_giou = generalized_box_iou_loss(
        box_convert(pred, "cxcywh", "xyxy").flatten(0, 1),
        box_convert(boxes, "cxcywh", "xyxy").flatten(0, 1),
        reduction="mean",
    )
    loss = loss_cls + 5 * loss_l1 + 2 * loss_giou
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("detr loss", round(loss.item(), 3))
del out, loss, pred, opt
report("bf16 training")


def detect(px, mask, sizes, k=50):
    out = model(pixel_values=px.to(device, torch.float16), pixel_mask=mask.to(device))
    prob = out.logits.float().softmax(-1)[..., :-1]
    scores, idx = prob.flatten(1).topk(k, dim=1)
    labels = idx % N_CLASSES
    q = idx // N_CLASSES
    boxes = box_convert(out.pred_boxes.float(), "cxcywh", "xyxy").gather(1, q[..., None].expand(-1, -1, 4))
    hw = sizes.to(device)
    scale = torch.stack([hw[:, 1], hw[:, 0], hw[:, 1], hw[:, 0]], dim=1)
    return scores, labels, boxes * scale[:, None, :]


model.eval().half()
results = []
with torch.inference_mode():
    for _i in range(0, N_VAL, VAL_BS):
        px, mask, sizes = padded_batch(VAL_BS)
        results.append(detect(px, mask, sizes))
print("val detections", tuple(results[0][2].shape), len(results))
report("half inference and post-processing")

with torch.inference_mode():
    px, mask, sizes = padded_batch(BIG_BS)
    scores, labels, boxes = detect(px, mask, sizes, k=100)
print("big batch", tuple(boxes.shape), round(scores.max().item(), 4))
report("larger-batch inference")
