"""TransUNet (Chen et al. 2021) written by hand for 9-class abdominal CT slices (Synapse style): a torchvision
resnet50 (weights=None) cut after layer3 as the CNN encoder (skips at 1/2, 1/4 and 1/8), a 1x1 Conv2d patch
embedding of its 1/16 map (14 x 14 = 196 tokens of 768) with a learned position embedding, a 12-layer
nn.TransformerEncoder (12 heads, MLP 3072, GELU, pre-norm, batch_first), and the cascaded upsampler (CUP):
3x3 conv to 512, then four bilinear x2 upsamplings with skip concatenation and Conv-BN-ReLU x 2 (256-128-64-16)
into a 1x1 head. The grey CT slice is repeated to three channels. Loss: 0.5 CE + 0.5 soft Dice, the Dice a
custom torch.autograd.Function (softmax inside; the backward written out from the saved probabilities,
one-hot targets and per-class sums).

Phases: 4 fp32 steps (TF32 allowed) at batch 24 on 224 x 224 with SGD (momentum 0.9, weight decay 1e-4)
and a poly LR; slice-wise inference under inference_mode over a 1 x 96 x 512 x 512 volume kept on the GPU:
batches of 32 slices bilinearly resized to 224, the model in eval (nn.TransformerEncoder's fast path), logits
resized back to 512 and argmax written into a uint8 label volume; then torch.cuda.empty_cache(), a fused AdamW
and 3 steps under bf16 autocast at batch 48 with every transformer layer run through torch.utils.checkpoint
(non-reentrant). 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2276)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device = "cuda"
NC, D = 9, 768


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class SoftDice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, onehot):
        p = logits.softmax(1)
        dims = (0, 2, 3)
        inter = (p * onehot).sum(dims)
        den = p.sum(dims) + onehot.sum(dims) + 1e-5
        ctx.save_for_backward(p, onehot, inter, den)
        return 1 - ((2 * inter + 1e-5) / den).mean()

    @staticmethod
    def backward(ctx, g):
        p, onehot, inter, den = ctx.saved_tensors
        C = p.shape[1]
        v = lambda t: t.view(1, C, 1, 1)  # noqa: E731
        gp = -(2 * onehot * v(den) - v(2 * inter + 1e-5)) / v(den ** 2) / C * g
        gl = p * (gp - (gp * p).sum(1, keepdim=True))
        return gl, None


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Decoder(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.c1, self.c2 = conv_bn(cin + cskip, cout), conv_bn(cout, cout)

    def forward(self, x, skip=None):
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        if skip is not None:
            x = torch.cat([x, skip], 1)
        return self.c2(self.c1(x))


class TransUNet(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet50(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu)
        self.pool, self.l1, self.l2, self.l3 = r.maxpool, r.layer1, r.layer2, r.layer3
        self.embed = nn.Conv2d(1024, D, 1)
        self.pos = nn.Parameter(torch.zeros(1, 196, D))
        layer = nn.TransformerEncoderLayer(D, 12, 3072, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.tf = nn.TransformerEncoder(layer, 12, norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.conv_more = conv_bn(D, 512)
        self.decs = nn.ModuleList([Decoder(512, 512, 256), Decoder(256, 256, 128), Decoder(128, 64, 64),
                                   Decoder(64, 0, 16)])
        self.head = nn.Conv2d(16, NC, 3, padding=1)
        self.ckpt = False

    def forward(self, x):
        x = x.repeat(1, 3, 1, 1)
        s1 = self.stem(x)
        s2 = self.l1(self.pool(s1))
        s3 = self.l2(s2)
        f = self.l3(s3)
        B, _, h, w = f.shape
        t = self.embed(f).flatten(2).transpose(1, 2) + self.pos
        if self.ckpt:
            for lyr in self.tf.layers:
                t = checkpoint(lyr, t, use_reentrant=False)
            t = self.tf.norm(t)
        else:
            t = self.tf(t)
        y = self.conv_more(t.transpose(1, 2).reshape(B, D, h, w))
        for dec, skip in zip(self.decs, (s3, s2, s1, None)):
            y = dec(y, skip)
        return self.head(y)


def loss_fn(logits, y):
    logits = logits.float()
    oh = F.one_hot(y, NC).permute(0, 3, 1, 2).float()
    return 0.5 * F.cross_entropy(logits, y) + 0.5 * SoftDice.apply(logits, oh)


def batch(b):
    return torch.randn(b, 1, 224, 224, device=device), torch.randint(0, NC, (b, 224, 224), device=device)


model = TransUNet().to(device)
print("params", sum(p.numel() for p in model.parameters()))
ITERS, BASE_LR = 4, 0.01
opt = torch.optim.SGD(model.parameters(), lr=BASE_LR, momentum=0.9, weight_decay=1e-4)
for it in range(ITERS):
    x, y = batch(24)
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    for g in opt.param_groups:
        g["lr"] = BASE_LR * (1 - (it + 1) / ITERS) ** 0.9
    print(f"iter {it} loss {loss.item():.4f}")
del loss, x, y
print("fp32 train max allocated", torch.cuda.max_memory_allocated())
report("fp32 sgd train 224")

model.eval()
vol = torch.randn(1, 96, 512, 512, device=device)
labels = torch.empty(96, 512, 512, dtype=torch.uint8, device=device)
with torch.inference_mode():
    for s in range(0, 96, 32):
        sl = vol[0, s:s + 32, None]
        xi = F.interpolate(sl, size=(224, 224), mode="bilinear", align_corners=False)
        out = model(xi)
        out = F.interpolate(out, size=(512, 512), mode="bilinear", align_corners=False)
        labels[s:s + 32] = out.argmax(1).to(torch.uint8)
print("volume labels", tuple(labels.shape), "max alloc", torch.cuda.max_memory_allocated())
del vol, labels, sl, xi, out
report("slice-wise volume inference")

opt.zero_grad(set_to_none=True)
del opt
torch.cuda.empty_cache()
model.train()
model.ckpt = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-2, fused=True)
for it in range(3):
    x, y = batch(48)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    print(f"bf16 ckpt iter {it} loss {loss.item():.4f}")
del loss
report("bf16 fused adamw checkpointed layers 224")
