"""`torch.export.save` / `torch.export.load` round trip: a ResNet-style CNN (4 stages of two basic blocks,
widths 64-512, BatchNorm with running statistics as buffers, 1,000 classes, fp32) exported in eval mode at
batch 32 x 3 x 224 x 224 with `strict=False`, saved to a .pt2 archive, the model, the program and its
example deleted (`gc.collect()`), then the archive loaded back (its weights restored to the GPU), the
loaded program's module run under inference_mode at batch 32, then fine-tuned for two steps with SGD
(momentum 0.9, nesterov) under bf16 autocast — its BatchNorm layers frozen, as the eval-mode export
recorded them.

No value read back from the GPU decides a size. 4 phases."""

import gc
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2584)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


model = Net().cuda().eval()
example = torch.randn(32, 3, 224, 224, device="cuda")
ep = torch.export.export(model, (example,), strict=False)
archive = os.path.join(tempfile.mkdtemp(), "resnet_style.pt2")
torch.export.save(ep, archive)
del model, ep, example
gc.collect()
report("export_save_delete")

loaded = torch.export.load(archive)
net = loaded.module()
report("export_load")

with torch.inference_mode():
    for _ in range(2):
        logits = net(torch.randn(32, 3, 224, 224, device="cuda"))
del logits
report("loaded_module_inference_mode")

opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True)
for _ in range(2):
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
del loss
report("frozen_bn_sgd_finetune_autocast")
