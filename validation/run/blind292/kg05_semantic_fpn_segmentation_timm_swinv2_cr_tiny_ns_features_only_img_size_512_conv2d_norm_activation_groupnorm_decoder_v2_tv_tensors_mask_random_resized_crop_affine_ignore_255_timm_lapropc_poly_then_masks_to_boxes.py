"""Semantic segmentation with a Semantic FPN decoder (Kirillov et al., Panoptic FPN's semantic branch) on
timm 1.0.29's `swinv2_cr_tiny_ns_224` created with `features_only=True, img_size=(512, 512)` (the
"cr" Swin V2: scaled cosine attention, log-spaced continuous position bias, norms after every stage;
strides 4..32, 96..768 channels). Decoder: 1x1 lateral convs to 256 and a top-down pathway, then per level
`torchvision.ops.Conv2dNormActivation` stacks (3x3 conv, GroupNorm 32, ReLU, bilinear x2 upsampling) to
stride 4 at 128 channels, summed, a 1x1 classifier to 19 classes and x4 bilinear upsampling. Data
(synthetic, seeded): batches of 8 images of 3 x 576 x 576 with integer masks of 19 classes, augmented
on the GPU as one batch by torchvision.transforms.v2 on tv_tensors (`Image`, `Mask`):
`RandomResizedCrop(512, scale=(0.3, 1.0))`, `RandomAffine(degrees=10, translate=(0.05, 0.05),
fill={Mask: 255})`, `RandomHorizontalFlip`; cross-entropy ignores the 255 fill. Phase 1: building it and
timm's `lapropc` (LaProp with cautious updates) by `create_optimizer_v2(model, "lapropc", lr=3e-4,
weight_decay=0.01)` and `PolyLRScheduler(power=0.9)`, stepped per step. Phase 2: 6 training steps in bf16
autocast. Phase 3: eval under `torch.inference_mode()` and bf16 autocast on 2 batches of 8 images of
512 x 512: `argmax` maps, then for each image the one-hot masks of the classes present and
`torchvision.ops.masks_to_boxes` of them (class-level boxes).
3 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import PolyLRScheduler
from torch import nn
from torchvision import tv_tensors
from torchvision.ops import Conv2dNormActivation, masks_to_boxes
from torchvision.transforms import v2

torch.manual_seed(2925)
dev = "cuda"
B, SIZE, NUM_CLASSES = 8, 512, 19


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def gn_relu(cin, cout):
    return Conv2dNormActivation(
        cin, cout, 3, norm_layer=lambda c: nn.GroupNorm(32, c), activation_layer=nn.ReLU
    )


class SemanticFPN(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model(
            "swinv2_cr_tiny_ns_224", pretrained=False, features_only=True, img_size=(SIZE, SIZE)
        )
        chans = self.backbone.feature_info.channels()
        self.laterals = nn.ModuleList(nn.Conv2d(c, 256, 1) for c in chans)
        heads = []
        for level in range(4):
            layers = [gn_relu(256, 128)]
            for _ in range(max(level - 1, 0)):
                layers += [nn.Upsample(scale_factor=2, mode="bilinear"), gn_relu(128, 128)]
            if level > 0:
                layers.append(nn.Upsample(scale_factor=2, mode="bilinear"))
            heads.append(nn.Sequential(*layers))
        self.heads = nn.ModuleList(heads)
        self.classifier = nn.Conv2d(128, NUM_CLASSES, 1)

    def forward(self, x):
        feats = [lat(f) for lat, f in zip(self.laterals, self.backbone(x), strict=True)]
        for i in range(3, 0, -1):
            feats[i - 1] = feats[i - 1] + F.interpolate(
                feats[i], size=feats[i - 1].shape[-2:], mode="nearest"
            )
        fused = sum(head(f) for head, f in zip(self.heads, feats, strict=True))
        return F.interpolate(self.classifier(fused), scale_factor=4, mode="bilinear")


model = SemanticFPN().to(dev)
optimizer = create_optimizer_v2(model, "lapropc", lr=3e-4, weight_decay=0.01)
scheduler = PolyLRScheduler(optimizer, t_initial=6, power=0.9, lr_min=1e-6, t_in_epochs=False)
augment = v2.Compose(
    [
        v2.RandomResizedCrop(SIZE, scale=(0.3, 1.0)),
        v2.RandomAffine(degrees=10, translate=(0.05, 0.05), fill={tv_tensors.Mask: 255, "others": 0}),
        v2.RandomHorizontalFlip(),
    ]
)
print("params", sum(p.numel() for p in model.parameters()))
report("semantic_fpn_swinv2_cr_build_lapropc_poly")

model.train()
for step in range(6):
    images = tv_tensors.Image(torch.randn(B, 3, 576, 576, device=dev))
    masks = tv_tensors.Mask(torch.randint(0, NUM_CLASSES, (B, 576, 576), device=dev))
    images, masks = augment(images, masks)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(images)
    loss = F.cross_entropy(logits.float(), masks.long(), ignore_index=255)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step_update(step + 1)
print("train loss", round(loss.item(), 4))
report("semantic_fpn_train_bf16_v2_mask_augment")

del images, masks, logits, loss
model.eval()
boxes_per_image = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _rep in range(2):
        images = torch.randn(B, 3, SIZE, SIZE, device=dev)
        pred = model(images).argmax(1)
        for i in range(B):
            onehot = F.one_hot(pred[i], NUM_CLASSES).permute(2, 0, 1).bool()
            present = onehot.flatten(1).any(1)
            boxes = masks_to_boxes(onehot[present])
            boxes_per_image.append(int(boxes.shape[0]))
print("eval classes present", boxes_per_image)
report("semantic_fpn_eval_masks_to_boxes")
