"""Eager-mode quantization-aware training with torch.ao.quantization on a hand-written CNN, then FX-graph
QAT of a torchvision resnet18.

Part 1: a VGG/ResNet-like CNN for 128x128 images and 100 classes (QuantStub; four stages of
Conv-BN-ReLU pairs with 48, 96, 192, 384 channels, stride-2 first conv per stage; adaptive average pool;
Linear; DeQuantStub). Conv-BN-ReLU triples are fused with torch.ao.quantization.fuse_modules_qat; a
custom 4-bit QConfig: activations FakeQuantize with MovingAverageMinMaxObserver (quint8 restricted to
0..15), weights FakeQuantize with MovingAveragePerChannelMinMaxObserver (qint8 restricted to -8..7,
per-channel symmetric); the Linear keeps the default 8-bit fused fake-quant QConfig of "x86".
prepare_qat on the device, fp32, Adam (lr 1e-3), batch 128.

Part 2: torchvision resnet18 (random init, 1000 classes) prepared with
quantize_fx.prepare_qat_fx(get_default_qat_qconfig_mapping("x86")), batch 32 at 224x224, SGD momentum
0.9, fp32.

Phases: prepare and the first step; 4 more steps; 2 steps after disable_observer and freeze_bn_stats;
evaluation under no_grad at batch 256; FX prepare and 2 resnet18 steps. 5 phases."""

import os

import torch
import torch.ao.quantization as tq
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.ao.quantization import quantize_fx

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2043)
BATCH, EVAL_BATCH, RES, FX_BATCH, FX_RES = (4, 8, 32, 2, 64) if SMALL else (128, 256, 128, 32, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class ConvBNReLU(nn.Sequential):
    def __init__(self, cin, cout, stride):
        super().__init__(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=False),
        )


class Net(nn.Module):
    def __init__(self, widths=(48, 96, 192, 384), classes=100):
        super().__init__()
        self.quant = tq.QuantStub()
        layers = [ConvBNReLU(3, widths[0], 1)]
        cin = widths[0]
        for w in widths:
            layers += [ConvBNReLU(cin, w, 2), ConvBNReLU(w, w, 1)]
            cin = w
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        x = self.pool(self.features(x)).flatten(1)
        return self.dequant(self.fc(x))

    def fuse(self):
        for m in self.features:
            tq.fuse_modules_qat(m, [["0", "1", "2"]], inplace=True)


act_fq = tq.FakeQuantize.with_args(
    observer=tq.MovingAverageMinMaxObserver,
    quant_min=0,
    quant_max=15,
    dtype=torch.quint8,
    averaging_constant=0.01,
)
w_fq = tq.FakeQuantize.with_args(
    observer=tq.MovingAveragePerChannelMinMaxObserver,
    quant_min=-8,
    quant_max=7,
    dtype=torch.qint8,
    qscheme=torch.per_channel_symmetric,
    ch_axis=0,
)

model = Net()
model.train()
model.fuse()
model.qconfig = tq.QConfig(activation=act_fq, weight=w_fq)
model.fc.qconfig = tq.get_default_qat_qconfig("x86")
tq.prepare_qat(model, inplace=True)
model = model.to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(m, o, n, res, classes):
    x = torch.randn(n, 3, res, res, device=device)
    y = torch.randint(0, classes, (n,), device=device)
    loss = F.cross_entropy(m(x), y)
    o.zero_grad()
    loss.backward()
    o.step()
    return loss.item()


print(f"step 0 loss {step(model, opt, BATCH, RES, 100):.4f}")
report("prepare + first step")
for _ in range(4):
    loss = step(model, opt, BATCH, RES, 100)
print(f"step 4 loss {loss:.4f}")
report("qat train")

model.apply(tq.disable_observer)
model.apply(torch.ao.nn.intrinsic.qat.freeze_bn_stats)
for _ in range(2):
    loss = step(model, opt, BATCH, RES, 100)
print(f"frozen loss {loss:.4f}")
report("observers off")

model.eval()
with torch.no_grad():
    x = torch.randn(EVAL_BATCH, 3, RES, RES, device=device)
    pred = model(x).argmax(1)
    print(f"eval class histogram max {torch.bincount(pred, minlength=100).max().item()}")
report("eval")

del model, opt, x, pred
fx_model = torchvision.models.resnet18(num_classes=1000).to(device).train()
example = (torch.randn(1, 3, FX_RES, FX_RES, device=device),)
fx_model = quantize_fx.prepare_qat_fx(fx_model, tq.get_default_qat_qconfig_mapping("x86"), example)
fx_opt = torch.optim.SGD(fx_model.parameters(), lr=0.01, momentum=0.9)
for _ in range(2):
    loss = step(fx_model, fx_opt, FX_BATCH, FX_RES, 1000)
print(f"fx qat loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
