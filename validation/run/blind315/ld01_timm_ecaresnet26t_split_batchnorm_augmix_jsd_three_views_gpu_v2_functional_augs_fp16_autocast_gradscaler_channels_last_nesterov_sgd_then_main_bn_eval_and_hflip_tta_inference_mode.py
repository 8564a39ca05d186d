"""AugMix-style robustness training of timm's ECA-ResNet-26t with split batch norm, as timm's train.py
does with ``--aug-splits 3 --jsd-loss --split-bn``: ``timm.layers.convert_splitbn_model`` replaces
every BatchNorm2d by a SplitBatchNorm2d (a main BN for the clean third of the batch, two auxiliary BNs
for the augmented thirds), the batch is [clean, view 1, view 2] concatenated along dim 0, and the loss
is ``timm.loss.JsdCrossEntropy(num_splits=3)`` (label-smoothed cross-entropy on the clean third plus the
Jensen-Shannon divergence between the three softmaxes). The two augmented views are made on the GPU
from uint8 images with torchvision.transforms.v2.functional (brightness, contrast, solarize,
posterize, affine shear) and mixed AugMix-style with Dirichlet weights. Channels-last, fp16 autocast
with GradScaler, SGD with Nesterov momentum.

Phases: 0 model (split-BN conversion, channels-last) and optimizer; 1 three training steps of batch
3 x 32 at 224; 2 eval mode (only the main BN), batch 96 under no_grad; 3 hflip test-time
augmentation at 256 under inference_mode, batch 64."""

import timm
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from timm.layers import convert_splitbn_model
from timm.loss import JsdCrossEntropy

torch.manual_seed(3151)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 200
B, R = 32, 224
MEAN = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def normalize(img_u8):
    x = (img_u8.float() - MEAN) / STD
    return x.contiguous(memory_format=torch.channels_last)


OPS = [
    lambda im: TF.adjust_brightness(im, 1.4),
    lambda im: TF.adjust_contrast(im, 0.6),
    lambda im: TF.solarize(im, 128),
    lambda im: TF.posterize(im, 4),
    lambda im: TF.affine(im, angle=0.0, translate=[0, 0], scale=1.0, shear=[12.0, 0.0]),
]


def augmix(img_u8, width=3, depth=2):
    ws = torch.distributions.Dirichlet(torch.ones(width, device=device)).sample()
    m = torch.distributions.Beta(torch.tensor(1.0, device=device), torch.tensor(1.0, device=device)).sample()
    mix = torch.zeros(img_u8.shape, device=device)
    for i in range(width):
        im = img_u8
        for _ in range(depth):
            op = OPS[int(torch.randint(len(OPS), (1,)))]
            im = op(im)
        mix = mix + ws[i] * im.float()
    out = (1 - m) * img_u8.float() + m * mix
    return out.clamp(0, 255).to(torch.uint8)


model = timm.create_model("ecaresnet26t", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.05)
model = convert_splitbn_model(model, num_splits=3)
model = model.to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
criterion = JsdCrossEntropy(num_splits=3, alpha=12, smoothing=0.1)
report("model")

model.train()
for step in range(3):
    imgs = torch.randint(0, 256, (B, 3, R, R), dtype=torch.uint8, device=device)
    target = torch.randint(0, NUM_CLASSES, (B,), device=device)
    views = [imgs, augmix(imgs), augmix(imgs)]
    x = torch.cat([normalize(v) for v in views], dim=0)
    with torch.autocast(device, dtype=torch.float16):
        logits = model(x)
    loss = criterion(logits.float(), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
    del imgs, views, x, logits, loss
report("train")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    imgs = torch.randint(0, 256, (96, 3, R, R), dtype=torch.uint8, device=device)
    probs = model(normalize(imgs)).float().softmax(-1)
    conf, pred = probs.max(-1)
if device == "cuda":
    print(f"eval mean conf {conf.mean().item():.4f} classes {pred.unique().numel()}")
del imgs, probs, conf, pred
report("eval")

with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    imgs = torch.randint(0, 256, (64, 3, 256, 256), dtype=torch.uint8, device=device)
    x = normalize(imgs)
    logits = model(x) + model(TF.horizontal_flip(x))
    top5 = F.softmax(logits.float() / 2, dim=-1).topk(5, dim=-1).indices
if device == "cuda":
    print(f"tta top5 {tuple(top5.shape)}")
report("tta")
