"""Deformable ConvNets v2 (modulated deformable convolution) grafted into a torchvision ResNet-50 the way
mmdetection's `dcn=dict(type="DCNv2")` does for stages 3 and 4 (`stage_with_dcn=(False, False, True, True)`):
every bottleneck's 3 x 3 `conv2` of layer3 and layer4 replaced by a module that predicts 18 offsets and 9
modulation scalars per position with a zero-initialized 3 x 3 convolution (so it starts as the plain
convolution), squashes the mask with a sigmoid and calls `torchvision.ops.deform_conv2d(x, offset, weight,
stride=..., padding=1, mask=mask)`, keeping the original convolution's weight and stride. torchvision
`resnet50(weights=None)`, 1,000 classes, SGD (momentum 0.9, weight decay 1e-4), cross-entropy.

Under bf16 autocast torchvision's autocast rule runs `deform_conv2d` in fp32 (its inputs cast up, the
result cast back), while the rest of the network runs in bf16.

Phases: 0 model and SGD; 1 three fp32 steps at 32 x 224; 2 three steps at 64 x 224 under bf16 autocast;
3 evaluation of two batches of 128 under `no_grad` and bf16 autocast. Seeded; no sizes depend on values."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import deform_conv2d

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3502)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
RES, B1, B2, B3 = (64, 2, 2, 4) if SMALL else (224, 32, 64, 128)


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class ModulatedDeformConv(nn.Module):
    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.stride, self.padding = conv.stride, conv.padding
        self.weight = conv.weight
        kh, kw = conv.kernel_size
        self.conv_offset = nn.Conv2d(
            conv.in_channels, 3 * kh * kw, conv.kernel_size, conv.stride, conv.padding
        )
        nn.init.zeros_(self.conv_offset.weight)
        nn.init.zeros_(self.conv_offset.bias)

    def forward(self, x):
        out = self.conv_offset(x)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        mask = torch.sigmoid(mask)
        return deform_conv2d(x, offset, self.weight, stride=self.stride, padding=self.padding, mask=mask)


model = torchvision.models.resnet50(weights=None)
for layer in (model.layer3, model.layer4):
    for block in layer:
        block.conv2 = ModulatedDeformConv(block.conv2)
model = model.to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 resnet50 with dcnv2 in layer3/layer4 + sgd")


def step(bs, amp):
    x = torch.randn(bs, 3, RES, RES, device=device)
    y = torch.randint(0, 1000, (bs,), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp and cuda):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
for i in range(3):
    print(f"fp32 step {i} loss {step(B1, False):.3f}")
report(f"phase1 three fp32 steps at {B1}")

for i in range(3):
    print(f"bf16 autocast step {i} loss {step(B2, True):.3f}")
report(f"phase2 three bf16 autocast steps at {B2}")

model.eval()
correct = 0
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
    for _ in range(2):
        x = torch.randn(B3, 3, RES, RES, device=device)
        y = torch.randint(0, 1000, (B3,), device=device)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"eval accuracy {correct / (2 * B3):.4f}")
report(f"phase3 no_grad bf16 eval at {B3}")
