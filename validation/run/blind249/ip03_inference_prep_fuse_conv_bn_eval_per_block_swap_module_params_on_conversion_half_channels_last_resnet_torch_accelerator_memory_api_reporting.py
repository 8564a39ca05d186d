"""Preparing a trained CNN for inference with PyTorch's own utilities, reported through the device-generic
`torch.accelerator` memory API (PyTorch 2.8+: `torch.accelerator.memory_allocated`,
`max_memory_allocated`, `memory_reserved`, `reset_peak_memory_stats`): a torchvision ResNet-50 built on
the GPU in fp32 and trained one SGD step at batch 32 x 224; then every Conv2d + BatchNorm2d pair folded
by `torch.nn.utils.fusion.fuse_conv_bn_eval` (a new conv per pair, the old modules dropped); then with
`torch.__future__.set_swap_module_params_on_conversion(True)` the model converted by `.half()` and
`.to(memory_format=torch.channels_last)` (parameters swapped in place by `torch.utils.swap_tensors`);
then inference under inference_mode at batch 64.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torchvision
from torch.nn.utils.fusion import fuse_conv_bn_eval

torch.manual_seed(2493)
acc = torch.accelerator.current_accelerator()


def report(tag):
    m = torch.accelerator
    print(f"{tag}: peak {m.max_memory_allocated()} alloc {m.memory_allocated()} reserved {m.memory_reserved()}")
    m.reset_peak_memory_stats()


model = torchvision.models.resnet50().to(acc)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(32, 3, 224, 224, device=acc)
y = torch.randint(0, 1000, (32,), device=acc)
nn.functional.cross_entropy(model(x), y).backward()
opt.step()
opt.zero_grad(set_to_none=True)
del opt, x, y
report("train_one_sgd_step")


def fold(module):
    names = list(module._modules)
    for i, name in enumerate(names):
        child = module._modules[name]
        nxt = module._modules[names[i + 1]] if i + 1 < len(names) else None
        if isinstance(child, nn.Conv2d) and isinstance(nxt, nn.BatchNorm2d):
            module._modules[name] = fuse_conv_bn_eval(child, nxt)
            module._modules[names[i + 1]] = nn.Identity()
        elif child is not None:
            fold(child)
    for blk in [m for m in module.modules() if isinstance(m, torchvision.models.resnet.Bottleneck)]:
        for c, b in (("conv1", "bn1"), ("conv2", "bn2"), ("conv3", "bn3")):
            conv, bn = getattr(blk, c), getattr(blk, b)
            if isinstance(bn, nn.BatchNorm2d):
                setattr(blk, c, fuse_conv_bn_eval(conv, bn))
                setattr(blk, b, nn.Identity())


model.eval()
with torch.no_grad():
    fold(model)
report("fuse_conv_bn_eval")

torch.__future__.set_swap_module_params_on_conversion(True)
model = model.half().to(memory_format=torch.channels_last)
torch.__future__.set_swap_module_params_on_conversion(False)
report("swap_half_channels_last")

with torch.inference_mode():
    xb = torch.randn(64, 3, 224, 224, device=acc, dtype=torch.half).to(memory_format=torch.channels_last)
    for _ in range(2):
        out = model(xb)
        top = out.float().softmax(-1).topk(5).indices
        del out, top
    del xb
report("inference_mode_fp16_channels_last")
