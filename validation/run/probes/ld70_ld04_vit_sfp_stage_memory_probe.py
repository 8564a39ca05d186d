"""blind315/ld04's first two training steps and its 256 eval (timm vit_medium_patch16_reg4_gap_256 with
forward_intermediates, a by-hand simple feature pyramid and segmentation head, layer-decay AdamW, ViT gradient
checkpointing, bf16) with the allocator's figures printed at every ViT block's forward (recomputations too),
the neck, the head, after the loss, backward and the optimizer step. With main's measured convolutions the
twin answers ld04 +131,072 allocated from phase 1 and +1,048,576 / +1,179,648 peak allocated in phases 1 and 2
over the H100, reserved exact. Each line: `s STEP STAGE alloc A peak P reserved R large_seg N small_seg M`
(plain python3; < 20 s, < 8 GB). With HIST=FILE set, the memory history is written to FILE (a pickle)."""

import os
import pickle

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(3154)
HIST = os.environ.get("HIST")
if HIST:
    torch.cuda.memory._record_memory_history(max_entries=1000000)
STEP = [0]


def line(step, stage):
    st = torch.cuda.memory_stats()
    print(
        f"s {step} {stage} alloc {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()} large_seg {st.get('segment.large_pool.current', 0)}"
        f" small_seg {st.get('segment.small_pool.current', 0)}"
    )


device = "cuda"
NUM_CLASSES = 150
B, R = 16, 256


class SimpleFeaturePyramid(nn.Module):
    def __init__(self, dim, out=256):
        super().__init__()
        self.up4 = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 2, 2, stride=2),
            nn.GroupNorm(32, dim // 2),
            nn.GELU(),
            nn.ConvTranspose2d(dim // 2, dim // 4, 2, stride=2),
        )
        self.up2 = nn.ConvTranspose2d(dim, dim // 2, 2, stride=2)
        self.down2 = nn.MaxPool2d(2)
        chans = [dim // 4, dim // 2, dim, dim]
        self.lateral = nn.ModuleList(nn.Conv2d(c, out, 1) for c in chans)
        self.smooth = nn.ModuleList(
            nn.Sequential(nn.Conv2d(out, out, 3, padding=1, bias=False), nn.GroupNorm(32, out), nn.ReLU())
            for _ in chans
        )

    def forward(self, feats):
        f1, f2, f3, f4 = feats
        levels = [self.up4(f1), self.up2(f2), f3, self.down2(f4)]
        return [smooth(lat(x)) for x, lat, smooth in zip(levels, self.lateral, self.smooth, strict=True)]


class SegHead(nn.Module):
    def __init__(self, ch=256, num_classes=NUM_CLASSES):
        super().__init__()
        self.fuse = nn.Sequential(
            nn.Conv2d(4 * ch, ch, 3, padding=1, bias=False), nn.GroupNorm(32, ch), nn.ReLU()
        )
        self.cls = nn.Conv2d(ch, num_classes, 1)

    def forward(self, pyramid):
        size = pyramid[0].shape[-2:]
        up = [pyramid[0]] + [
            F.interpolate(p, size=size, mode="bilinear", align_corners=False) for p in pyramid[1:]
        ]
        return self.cls(self.fuse(torch.cat(up, dim=1)))


class ViTSeg(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model(
            "vit_medium_patch16_reg4_gap_256",
            pretrained=False,
            num_classes=0,
            dynamic_img_size=True,
            drop_path_rate=0.1,
        )
        self.neck = SimpleFeaturePyramid(self.backbone.embed_dim)
        self.head = SegHead()

    def forward(self, x):
        feats = self.backbone.forward_intermediates(x, indices=[2, 5, 8, 11], intermediates_only=True)
        logits = self.head(self.neck(feats))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


model = ViTSeg().to(device)
model.backbone.set_grad_checkpointing(True)
backbone_groups = create_optimizer_v2(
    model.backbone, "adamw", lr=2e-4, weight_decay=0.05, layer_decay=0.75
).param_groups
head_params = list(model.neck.parameters()) + list(model.head.parameters())
opt = torch.optim.AdamW([*backbone_groups, {"params": head_params, "lr": 1e-3}], lr=2e-4, weight_decay=0.05)


def fwd_hook(name):
    def hook(mod, inp, out):
        line(STEP[0], f"fwd {name}")

    return hook


for i, blk in enumerate(model.backbone.blocks):
    blk.register_forward_hook(fwd_hook(f"block{i}"))
model.neck.register_forward_hook(fwd_hook("neck"))
model.head.register_forward_hook(fwd_hook("head"))
line(-1, "model")

model.train()
for step in range(2):
    STEP[0] = step
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, NUM_CLASSES, (B, R, R), device=device)
    y[:, :16] = 255
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float(), y, ignore_index=255)
    line(step, "loss")
    loss.backward()
    line(step, "backward")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    line(step, "step")
    opt.zero_grad(set_to_none=True)
    del x, y, logits, loss
    line(step, "end")
STEP[0] = "eval"
torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(24, 3, R, R, device=device)
    y = torch.randint(0, NUM_CLASSES, (24, R, R), device=device)
    pred = model(x).argmax(1)
    line("eval", "pred")
    inter = torch.bincount(pred[pred == y], minlength=NUM_CLASSES)
    union = (
        torch.bincount(pred.flatten(), minlength=NUM_CLASSES)
        + torch.bincount(y.flatten(), minlength=NUM_CLASSES)
        - inter
    )
line("eval", "end")
if HIST:
    with open(HIST, "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
