"""Session 68, helper pc: blind297/kl02's InfoGAN Q head and DCGAN convolutions on the H100.

Each line is printed by the twin too (`vramscope run --gpu h100` of this file). Lines:
- `qhead strides`: the strides of the Q head's BN output and LeakyReLU output, (128, 128, 1, 1),
  channels-last convolution first (TensorIterator's fast setup: the LeakyReLU's contiguous).
- `qhead grad`: the strides of the gradient reaching `self.cat(h)` through `flatten(1)`.
- `qhead backward peak`: peak allocated above the start of the Q head's 1x1 convolutions'
  backward (no `_to_copy` of the gradient if h and it suggest the same format; their wgrad
  workspaces, NCHW: 8,208 and 4,112 bytes read off kl02's H100 history).
- `wgrad K layout peak`: one `convolution_backward` (weight's gradient only) of a (128, 128, 1, 1)
  bf16 input by a (K, 128, 1, 1) channels-last weight, input and gradient made NCHW or NHWC:
  peak allocated above the start (the result, 256 K bytes, plus cuDNN's workspace).
- `dcgan forward peak` / `dcgan tdgrad peak`: bf16 channels-last (128, 256, 8, 8) by (512, 256, 4, 4),
  stride 2, padding 1, forward; and the transposed convolution's input gradient of the same graph:
  peak allocated above the start (output 2,097,152 both, plus workspace: 0 on the H100
  in kl02's history, 524,479 on the H200).
"""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
dev = "cuda"
cl = torch.channels_last
aten = torch.ops.aten


def peak_above(fn, *args):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - base


conv = nn.Sequential(nn.Conv2d(512, 128, 4, 1, 0, bias=False), nn.BatchNorm2d(128), nn.LeakyReLU(0.1))
conv = conv.to(dev, memory_format=cl)
cat = nn.Conv2d(128, 10, 1).to(dev, memory_format=cl)
mu = nn.Conv2d(128, 2, 1).to(dev, memory_format=cl)
x = torch.randn(128, 512, 4, 4, device=dev).contiguous(memory_format=cl)
with torch.autocast("cuda", dtype=torch.bfloat16):
    h0 = conv[0](x)
    h1 = conv[1](h0)
    h = conv[2](h1)
    print("qhead strides", tuple(h1.stride()), tuple(h.stride()))
    c_out = cat(h)
    c_out.register_hook(lambda g: print("qhead grad", tuple(g.stride())))
    logits = c_out.flatten(1)
    m = mu(h).flatten(1)
    loss = (
        F.cross_entropy(logits.float(), torch.randint(0, 10, (128,), device=dev)) + m.float().square().mean()
    )
grads, peak = peak_above(torch.autograd.grad, loss, [h, cat.weight, mu.weight])
print("qhead backward peak", peak)
del grads, loss, logits, m, c_out, h, h1, h0

for k in (10, 2):
    for layout in ("nchw", "nhwc"):
        fmt = cl if layout == "nhwc" else torch.contiguous_format
        xi = torch.empty(128, 128, 1, 1, device=dev, dtype=torch.bfloat16, memory_format=fmt)
        w = torch.empty(k, 128, 1, 1, device=dev, dtype=torch.bfloat16, memory_format=cl)
        g = torch.empty(128, k, 1, 1, device=dev, dtype=torch.bfloat16, memory_format=fmt)
        args = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, False])
        res, peak = peak_above(aten.convolution_backward, g, xi, w, None, *args)
        print("wgrad", k, layout, "peak", peak, "result", res[1].numel() * 2)
        del res, xi, w, g

xd = torch.empty(128, 256, 8, 8, device=dev, dtype=torch.bfloat16, memory_format=cl)
wd = torch.empty(512, 256, 4, 4, device=dev, dtype=torch.bfloat16, memory_format=cl)
out, peak = peak_above(aten.convolution, xd, wd, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
print("dcgan forward peak", peak, "output", out.numel() * 2)
del out
# ConvTranspose2d(512, 256, 4, 2, 1): input (128, 512, 4, 4), its input's gradient a forward of the
# (128, 256, 8, 8) gradient by the same weight
xt = torch.empty(128, 512, 4, 4, device=dev, dtype=torch.bfloat16, memory_format=cl)
gt = torch.empty(128, 256, 8, 8, device=dev, dtype=torch.bfloat16, memory_format=cl)
targs = ([2, 2], [1, 1], [1, 1], True, [0, 0], 1, [True, False, False])
res, peak = peak_above(aten.convolution_backward, gt, xt, wd, None, *targs)
print("dcgan tdgrad peak", peak, "result", res[0].numel() * 2)
