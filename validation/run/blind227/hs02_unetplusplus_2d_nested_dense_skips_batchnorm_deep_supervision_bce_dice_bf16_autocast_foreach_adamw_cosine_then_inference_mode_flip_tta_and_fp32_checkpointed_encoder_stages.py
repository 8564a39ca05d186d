"""UNet++ (Zhou et al. 2018) written by hand for binary 2-D segmentation (polyp / nuclei style): a 5-level
encoder (32-64-128-256-512, two Conv3x3-BatchNorm-ReLU per node, max-pool downsampling) and the nested dense
skip pathways X(i, j) = conv(cat(X(i, 0..j-1), up(X(i+1, j-1)))) with bilinear upsampling, four 1x1 heads on
X(0, 1..4) for deep supervision (mean of BCE-with-logits + soft Dice over the four heads).

Phases: 4 steps under bf16 autocast at batch 16 on 384 x 384 (3 channels) with foreach AdamW and a cosine LR;
test-time augmentation under inference_mode: 4 flips (none, horizontal, vertical, both) of a batch of 16 at
512 x 512 through the full-depth head, sigmoid probabilities un-flipped and averaged, thresholded at 0.5 into a
bool mask; then the four encoder stages below the first wrapped in torch.utils.checkpoint (non-reentrant) and
3 fp32 steps (TF32 matmul/conv allowed) at batch 8 on 512 x 512 with the same optimizer. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2272)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device = "cuda"
NB = (32, 64, 128, 256, 512)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class VGGBlock(nn.Sequential):
    def __init__(self, cin, cmid, cout):
        super().__init__(nn.Conv2d(cin, cmid, 3, padding=1), nn.BatchNorm2d(cmid), nn.ReLU(inplace=True),
                         nn.Conv2d(cmid, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class NestedUNet(nn.Module):
    def __init__(self, cin=3):
        super().__init__()
        self.pool = nn.MaxPool2d(2)
        self.nodes = nn.ModuleDict()
        for i in range(5):
            self.nodes[f"{i}_0"] = VGGBlock(cin if i == 0 else NB[i - 1], NB[i], NB[i])
        for j in range(1, 5):
            for i in range(5 - j):
                self.nodes[f"{i}_{j}"] = VGGBlock(NB[i] * j + NB[i + 1], NB[i], NB[i])
        self.heads = nn.ModuleList(nn.Conv2d(NB[0], 1, 1) for _ in range(4))
        self.ckpt = False

    def up(self, x):
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)

    def enc(self, i, x):
        blk = self.nodes[f"{i}_0"]
        if self.ckpt and i > 0:
            return checkpoint(lambda t: blk(self.pool(t)), x, use_reentrant=False)
        return blk(x if i == 0 else self.pool(x))

    def forward(self, x, heads=(0, 1, 2, 3)):
        X = {}
        prev = x
        for i in range(5):
            X[(i, 0)] = prev = self.enc(i, prev)
        for j in range(1, 5):
            for i in range(5 - j):
                cat = torch.cat([X[(i, k)] for k in range(j)] + [self.up(X[(i + 1, j - 1)])], 1)
                X[(i, j)] = self.nodes[f"{i}_{j}"](cat)
        return [self.heads[h](X[(0, h + 1)]) for h in heads]


def bce_dice(logit, target):
    bce = F.binary_cross_entropy_with_logits(logit, target)
    p = torch.sigmoid(logit).flatten(1)
    t = target.flatten(1)
    dice = (2 * (p * t).sum(1) + 1) / (p.sum(1) + t.sum(1) + 1)
    return bce + (1 - dice).mean()


def batch(b, s):
    x = torch.randn(b, 3, s, s, device=device)
    y = (torch.rand(b, 1, s, s, device=device) > 0.7).float()
    return x, y


model = NestedUNet().to(device)
print("params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4, foreach=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
for step in range(4):
    x, y = batch(16, 384)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outs = model(x)
        loss = sum(bce_dice(o.float(), y) for o in outs) / len(outs)
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step} loss {loss.item():.4f}")
del outs, loss, x, y
print("bf16 train max allocated", torch.cuda.max_memory_allocated())
report("bf16 train 384")

model.eval()
with torch.inference_mode():
    x = torch.randn(16, 3, 512, 512, device=device)
    prob = torch.zeros(16, 1, 512, 512, device=device)
    for dims in ((), (3,), (2,), (2, 3)):
        xi = x.flip(dims) if dims else x
        out = model(xi, heads=(3,))[0]
        p = torch.sigmoid(out)
        prob += p.flip(dims) if dims else p
    prob /= 4
    mask = prob > 0.5
print("tta mask", tuple(mask.shape), "max alloc", torch.cuda.max_memory_allocated())
del x, prob, mask, out, p, xi
report("inference_mode flip tta 512")

model.train()
model.ckpt = True
for step in range(3):
    x, y = batch(8, 512)
    opt.zero_grad(set_to_none=True)
    outs = model(x)
    loss = sum(bce_dice(o, y) for o in outs) / len(outs)
    loss.backward()
    opt.step()
    sched.step()
    print(f"fp32 ckpt step {step} loss {loss.item():.4f}")
del outs, loss
report("fp32 checkpointed encoder 512")
