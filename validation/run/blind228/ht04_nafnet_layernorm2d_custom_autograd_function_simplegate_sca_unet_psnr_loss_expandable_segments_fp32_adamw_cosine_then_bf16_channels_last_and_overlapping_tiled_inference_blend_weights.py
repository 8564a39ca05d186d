"""NAFNet for denoising, by hand (width 32, encoder blocks [1, 1, 2, 4], middle 4, decoder [1, 1, 1, 1]):
LayerNorm2d as NAFNet writes it, a torch.autograd.Function with a hand-written backward (mean/var over
channels, saved y, var and weight); SimpleGate (chunk 2 and multiply), simplified channel attention
(AdaptiveAvgPool2d(1) + 1x1 conv, multiplied in), depthwise 3x3 convs, learned beta/gamma residual scales;
down by a 2x2 stride-2 conv, up by 1x1 conv + PixelShuffle(2), additive skips. PSNR loss
(-10 log10 mse, the NAFNet PSNRLoss with toY False). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
set before torch is imported.

AdamW lr 1e-3, betas (0.9, 0.9), weight decay 0, CosineAnnealingLR. Phases: 4 fp32 steps at batch 16 on
128 x 128; 3 steps in channels_last under bf16 autocast at batch 32 on 128 x 128; no_grad fp32 tiled
inference over a 1 x 3 x 1024 x 1024 image in 256 x 256 tiles with stride 192, accumulated by
index_put-free slicing into an output and a weight map and divided; empty_cache() then inference_mode bf16
of the whole 1024 x 1024 image at once. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(2284)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        ctx.eps = eps
        n, c, h, w = x.size()
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        y = (x - mu) / (var + eps).sqrt()
        ctx.save_for_backward(y, var, weight)
        y = weight.view(1, c, 1, 1) * y + bias.view(1, c, 1, 1)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        eps = ctx.eps
        n, c, h, w = grad_output.size()
        y, var, weight = ctx.saved_tensors
        g = grad_output * weight.view(1, c, 1, 1)
        mean_g = g.mean(dim=1, keepdim=True)
        mean_gy = (g * y).mean(dim=1, keepdim=True)
        gx = 1.0 / torch.sqrt(var + eps) * (g - y * mean_gy - mean_g)
        return gx, (grad_output * y).sum(dim=3).sum(dim=2).sum(dim=0), grad_output.sum(dim=3).sum(dim=2).sum(dim=0), None


class LayerNorm2d(nn.Module):
    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))
        self.eps = eps

    def forward(self, x):
        return LayerNormFunction.apply(x, self.weight, self.bias, self.eps)


class SimpleGate(nn.Module):
    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        return x1 * x2


class NAFBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        dw = c * 2
        self.conv1 = nn.Conv2d(c, dw, 1)
        self.conv2 = nn.Conv2d(dw, dw, 3, 1, 1, groups=dw)
        self.conv3 = nn.Conv2d(dw // 2, c, 1)
        self.sca = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(dw // 2, dw // 2, 1))
        self.sg = SimpleGate()
        self.conv4 = nn.Conv2d(c, c * 2, 1)
        self.conv5 = nn.Conv2d(c, c, 1)
        self.norm1 = LayerNorm2d(c)
        self.norm2 = LayerNorm2d(c)
        self.beta = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.gamma = nn.Parameter(torch.zeros(1, c, 1, 1))

    def forward(self, inp):
        x = self.sg(self.conv2(self.conv1(self.norm1(inp))))
        x = x * self.sca(x)
        y = inp + self.conv3(x) * self.beta
        x = self.conv5(self.sg(self.conv4(self.norm2(y))))
        return y + x * self.gamma


class NAFNet(nn.Module):
    def __init__(self, width=32, enc=(1, 1, 2, 4), mid=4, dec=(1, 1, 1, 1)):
        super().__init__()
        self.intro = nn.Conv2d(3, width, 3, 1, 1)
        self.ending = nn.Conv2d(width, 3, 3, 1, 1)
        self.encoders, self.downs, self.ups, self.decoders = (nn.ModuleList() for _ in range(4))
        c = width
        for n in enc:
            self.encoders.append(nn.Sequential(*[NAFBlock(c) for _ in range(n)]))
            self.downs.append(nn.Conv2d(c, 2 * c, 2, 2))
            c *= 2
        self.middle = nn.Sequential(*[NAFBlock(c) for _ in range(mid)])
        for n in dec:
            self.ups.append(nn.Sequential(nn.Conv2d(c, c * 2, 1, bias=False), nn.PixelShuffle(2)))
            c //= 2
            self.decoders.append(nn.Sequential(*[NAFBlock(c) for _ in range(n)]))

    def forward(self, inp):
        x = self.intro(inp)
        skips = []
        for e, d in zip(self.encoders, self.downs):
            x = e(x)
            skips.append(x)
            x = d(x)
        x = self.middle(x)
        for dcd, up, s in zip(self.decoders, self.ups, skips[::-1]):
            x = dcd(up(x) + s)
        return self.ending(x) + inp


model = NAFNet().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.9), weight_decay=0.0)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=7, eta_min=1e-7)


def psnr_loss(pred, target):
    return -10.0 * torch.log10(((pred - target) ** 2).mean(dim=(1, 2, 3)) + 1e-8).mean()


def train(steps, bsz, size, channels_last=False, dtype=None):
    model.train()
    for _ in range(steps):
        clean = torch.rand(bsz, 3, size, size, device=device)
        noisy = clean + (25 / 255) * torch.randn_like(clean)
        if channels_last:
            clean = clean.contiguous(memory_format=torch.channels_last)
            noisy = noisy.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            pred = model(noisy)
        loss = psnr_loss(pred.float(), clean)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        print(f"psnr loss {loss.item():.3f}")


train(4, 16, 128)
report("fp32 adamw")

model = model.to(memory_format=torch.channels_last)
train(3, 32, 128, channels_last=True, dtype=torch.bfloat16)
report("bf16 channels_last")

model.eval()
img = torch.rand(1, 3, 1024, 1024, device=device)
tile, stride = 256, 192
out = torch.zeros_like(img)
weight = torch.zeros(1, 1, 1024, 1024, device=device)
starts = list(range(0, 1024 - tile, stride)) + [1024 - tile]
with torch.no_grad():
    for y in starts:
        for x in starts:
            patch = img[:, :, y:y + tile, x:x + tile].contiguous(memory_format=torch.channels_last)
            out[:, :, y:y + tile, x:x + tile] += model(patch)
            weight[:, :, y:y + tile, x:x + tile] += 1
    out = out / weight
print("tiled", out.shape, len(starts) ** 2, "tiles")
del out, weight, patch
report("no_grad tiled")

opt.zero_grad(set_to_none=True)
torch.cuda.empty_cache()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    full = model(img.contiguous(memory_format=torch.channels_last))
print("full", full.shape)
report("inference full 1024")
