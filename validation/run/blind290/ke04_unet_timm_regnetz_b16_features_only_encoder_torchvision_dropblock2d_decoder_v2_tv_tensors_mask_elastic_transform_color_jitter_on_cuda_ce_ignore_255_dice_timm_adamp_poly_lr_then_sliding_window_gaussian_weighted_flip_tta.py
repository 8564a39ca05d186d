"""Street-scene semantic segmentation (Cityscapes-like, 19 classes, 255 ignored) with a U-Net decoder on a
timm encoder, as segmentation codebases of that style build it. Encoder: timm 1.0.29's `regnetz_b16` with
`features_only=True` (five maps, strides 2 to 32, 32/48/96/192/1536 channels). Decoder: four stages of
nearest 2x upsampling, concatenation with the skip, two 3x3 conv + BatchNorm + ReLU and a
`torchvision.ops.DropBlock2d(p=0.1, block_size=5)`, then a final 2x upsampling and a 1x1 classifier.
Data: uint8 `tv_tensors.Image` of 3 x 512 x 1024 and `tv_tensors.Mask` labels made on the GPU, augmented
there per sample by `torchvision.transforms.v2`: `RandomResizedCrop(512, scale=(0.3, 1.0))` (nearest for
the mask), `RandomHorizontalFlip()`, `ElasticTransform(alpha=50.0, sigma=5.0)` (one displacement field
for image and mask), `ColorJitter(0.3, 0.3, 0.3)` (image only), `ToDtype` (image only, scaled) and
`Normalize`. Loss: cross-entropy with `ignore_index=255` plus a soft Dice over the valid pixels. fp32
with TF32, channels-last. Phase 1: building the model and timm's `AdamP` (`create_optimizer_v2(model,
"adamp", lr=1e-3, weight_decay=1e-4)`) with `PolyLRScheduler(power=0.9)` stepped per update
(`step_update`, warmup 2). Phase 2: 6 steps at 8 crops. Phase 3: `model.eval()` under
`torch.inference_mode()` and bf16 autocast: sliding-window inference of 2 full images of 1024 x 2048 (512
windows, stride 341, 18 windows run 6 at a time), each window's logits weighted by a Gaussian importance
map into an fp32 canvas, plus the horizontally flipped pass.
3 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import PolyLRScheduler
from torch import nn
from torchvision import tv_tensors
from torchvision.ops import DropBlock2d
from torchvision.transforms import v2

torch.manual_seed(2904)
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
NUM_CLASSES, B, CROP = 19, 8, 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def conv_bn_relu(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class DecoderBlock(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.conv1 = conv_bn_relu(cin + cskip, cout)
        self.conv2 = conv_bn_relu(cout, cout)
        self.drop = DropBlock2d(p=0.1, block_size=5)

    def forward(self, x, skip):
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = torch.cat([x, skip], 1)
        return self.drop(self.conv2(self.conv1(x)))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = timm.create_model("regnetz_b16", pretrained=False, features_only=True)
        chs = self.encoder.feature_info.channels()
        dec = [256, 128, 64, 32]
        self.blocks = nn.ModuleList(
            [
                DecoderBlock(cin, cskip, cout)
                for cin, cskip, cout in zip([chs[-1], *dec[:-1]], chs[-2::-1], dec, strict=True)
            ]
        )
        self.head = nn.Sequential(conv_bn_relu(32, 16), nn.Conv2d(16, NUM_CLASSES, 1))

    def forward(self, x):
        feats = self.encoder(x)
        y = feats[-1]
        for block, skip in zip(self.blocks, feats[-2::-1], strict=True):
            y = block(y, skip)
        return self.head(F.interpolate(y, scale_factor=2, mode="nearest"))


def dice_loss(logits, target):
    valid = (target != 255).unsqueeze(1)
    prob = logits.softmax(1) * valid
    onehot = F.one_hot(target.clamp(max=NUM_CLASSES - 1), NUM_CLASSES).permute(0, 3, 1, 2) * valid
    inter = (prob * onehot).sum((0, 2, 3))
    denom = prob.sum((0, 2, 3)) + onehot.sum((0, 2, 3))
    return 1 - ((2 * inter + 1) / (denom + 1)).mean()


model = UNet().to(dev, memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, "adamp", lr=1e-3, weight_decay=1e-4)
scheduler = PolyLRScheduler(
    optimizer, t_initial=6, power=0.9, warmup_t=2, warmup_lr_init=1e-5, t_in_epochs=False
)
print("params", sum(p.numel() for p in model.parameters()))
report("unet_regnetz_b16_build_adamp_poly")

augment = v2.Compose(
    [
        v2.RandomResizedCrop(CROP, scale=(0.3, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ElasticTransform(alpha=50.0, sigma=5.0),
        v2.ColorJitter(0.3, 0.3, 0.3),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ]
)


def sample():
    img = tv_tensors.Image(torch.randint(0, 256, (3, 512, 1024), dtype=torch.uint8, device=dev))
    lab = torch.randint(0, NUM_CLASSES, (1, 32, 64), device=dev).to(torch.uint8)
    lab = F.interpolate(lab[None].float(), size=(512, 1024), mode="nearest")[0].to(torch.uint8)
    lab[:, :40] = 255
    return augment(img, tv_tensors.Mask(lab))


model.train()
for step in range(6):
    pairs = [sample() for _ in range(B)]
    x = torch.stack([p[0] for p in pairs]).contiguous(memory_format=torch.channels_last)
    y = torch.stack([p[1][0] for p in pairs]).long()
    logits = model(x)
    loss = F.cross_entropy(logits, y, ignore_index=255) + dice_loss(logits, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step_update(step + 1)
print("train loss", round(loss.item(), 3))
report("unet_train_fp32_tf32_adamp_dropblock")

del pairs, x, y, logits, loss
model.eval()
H, W, WIN, STRIDE = 1024, 2048, 512, 341
g = torch.exp(-((torch.arange(WIN, device=dev) - (WIN - 1) / 2) ** 2) / (2 * (WIN / 8) ** 2))
weight_map = (g[:, None] * g[None, :]).clamp(min=1e-3)
ys = sorted({min(r, H - WIN) for r in range(0, H, STRIDE)})
xs = sorted({min(c, W - WIN) for c in range(0, W, STRIDE)})
coords = [(r, c) for r in ys for c in xs]
norm = v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _img in range(2):
        image = norm(torch.rand(1, 3, H, W, device=dev))
        canvas = torch.zeros(NUM_CLASSES, H, W, device=dev)
        counts = torch.zeros(1, H, W, device=dev)
        for flip in (False, True):
            src = image.flip(-1) if flip else image
            for i in range(0, len(coords), 6):
                chunk = coords[i : i + 6]
                wins = torch.cat([src[:, :, r : r + WIN, c : c + WIN] for r, c in chunk])
                out = model(wins.contiguous(memory_format=torch.channels_last)).float()
                if flip:
                    out = out.flip(-1)
                for k, (r, c) in enumerate(chunk):
                    c0 = W - WIN - c if flip else c
                    canvas[:, r : r + WIN, c0 : c0 + WIN] += out[k] * weight_map
                    counts[:, r : r + WIN, c0 : c0 + WIN] += weight_map
        pred = (canvas / counts).argmax(0)
        print("pred classes", int(pred.unique().numel()))
report("unet_sliding_window_gaussian_flip_tta")
