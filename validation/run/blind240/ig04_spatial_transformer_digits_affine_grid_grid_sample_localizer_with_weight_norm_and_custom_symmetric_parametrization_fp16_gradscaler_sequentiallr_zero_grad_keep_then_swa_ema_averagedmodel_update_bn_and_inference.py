"""A spatial transformer classifier (Jaderberg et al. 2015) on 128 x 128 cluttered images, with the
parametrization and weight-averaging utilities of torch.nn.utils and torch.optim.swa_utils.

Localizer: conv 3->32->64->128 (stride 2, BatchNorm, ReLU), global average pool, a 128 -> 256
Linear under `torch.nn.utils.parametrizations.weight_norm` (the new-style parametrization, g and v), and
a final 256 -> 6 Linear initialised to the identity transform; `F.affine_grid` + `F.grid_sample`
(bilinear, zeros padding) resample each image to 96 x 96. Classifier: a ResNet-like stack (64, 128,
256 channels, two blocks each, BatchNorm) whose head is a 256 x 256 Linear with a custom
parametrization registered with `torch.nn.utils.parametrize.register_parametrization` (a symmetric
matrix from its upper triangle, with `right_inverse`), then 256 -> 100 classes.
Training: fp16 autocast with GradScaler, SGD (momentum 0.9, nesterov), a SequentialLR (LinearLR warm-up
2 steps then CosineAnnealingLR), `optimizer.zero_grad(set_to_none=False)` so the gradients stay
allocated, batch 128, 5 steps; an EMA `AveragedModel` (get_ema_multi_avg_fn(0.999)) and an SWA
`AveragedModel` updated each step, then an SWALR phase of 3 steps, and `update_bn` over 4 batches for
the SWA model's BatchNorm statistics. Then inference_mode evaluation of the SWA model in fp16 autocast
at batch 256, and of the EMA model with cached parametrizations (`parametrize.cached()`).
Phases: model, train fp16 SequentialLR, SWA + update_bn, SWA eval, EMA eval cached. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils.parametrizations import weight_norm
from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn

torch.manual_seed(2404)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

    def right_inverse(self, A):
        return A.triu()


def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, stride)
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.b(self.a(x)) + self.skip(x))


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(conv_bn(3, 32, 2), conv_bn(32, 64, 2), conv_bn(64, 128, 2),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.loc_fc = weight_norm(nn.Linear(128, 256))
        self.theta = nn.Linear(256, 6)
        nn.init.zeros_(self.theta.weight)
        with torch.no_grad():
            self.theta.bias.copy_(torch.tensor([1.0, 0, 0, 0, 1.0, 0]))
        self.body = nn.Sequential(conv_bn(3, 64, 1), Block(64, 64, 1), Block(64, 128, 2), Block(128, 128, 1),
                                  Block(128, 256, 2), Block(256, 256, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.sym = nn.Linear(256, 256)
        parametrize.register_parametrization(self.sym, "weight", Symmetric())
        self.cls = nn.Linear(256, 100)

    def forward(self, img):
        theta = self.theta(F.relu(self.loc_fc(self.loc(img)))).view(-1, 2, 3)
        grid = F.affine_grid(theta, (img.shape[0], 3, 96, 96), align_corners=False)
        warped = F.grid_sample(img, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return self.cls(F.relu(self.sym(self.body(warped))))


def batch(n):
    return torch.randn(n, 3, 128, 128, device=device), torch.randint(0, 100, (n,), device=device)


with torch.device(device):  # built on the GPU, not on the host first
    model = STN()
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
swa = AveragedModel(model)
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
scaler = torch.amp.GradScaler("cuda")
for step in range(5):
    x, y = batch(128)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=False)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    ema.update_parameters(model)
    print(f"step {step} loss {loss.item():.3f} lr {sched.get_last_lr()[0]:.4f}")
del x, y, loss
report("train fp16 gradscaler sequentiallr keep grads")

swa_sched = SWALR(opt, swa_lr=0.01, anneal_epochs=2)
for step in range(3):
    x, y = batch(128)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=False)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    swa_sched.step()
    swa.update_parameters(model)
    ema.update_parameters(model)
del x, y, loss
loader = [batch(128)[0] for _ in range(4)]
update_bn(loader, swa)
del loader
report("swa phase and update_bn")

swa.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    x, y = batch(256)
    acc = (swa(x).argmax(-1) == y).float().mean()
    print(f"swa acc {acc.item():.3f}")
del x, y, acc
report("swa eval fp16 batch 256")

ema.eval()
with torch.inference_mode(), parametrize.cached():
    x, y = batch(256)
    logits = ema(x)
    print("ema", tuple(logits.shape), logits.float().softmax(-1).max(-1)[0].mean().item())
report("ema eval cached parametrizations")
