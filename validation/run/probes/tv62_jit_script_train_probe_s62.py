"""Training a CUDA ResNet-18 (timm, scriptable layers) three ways, 16 x 224 fp32 SGD, one line a step
(peak allocated since the last line, allocated): `torch.jit.script` (TorchScript's profiling executor
and autodiff: its differentiable graphs save what TorchScript's autodiff saves, not eager autograd's),
`torch.jit.trace` (no zero_grad: gradients accumulate) and eager (the same). On the twin the scripted
and traced graphs run PyTorch's composites on meta tensors, so only the dispatch-level rules see their
ops (the function-level ones never see a scripted call), and the GPU fuser's fusion groups, which
TorchScript forms for CUDA tensors after its profiling runs, are not formed. Session 62 (helper
tv); the twin's lines at 1f7e6100 (`vramscope run --gpu h100`):
    script 0 510739456 122572800
    script 1 511395840 122572800
    script 2 511395840 122572800
    script 3 511395840 122572800
    trace 0 523716608 170710528
    trace 1 556362240 170710528
    trace 2 556362240 170710528
    eager 0 556362240 170710528
    eager 1 556362240 170710528
Run: python3 validation/run/probes/tv62_jit_script_train_probe_s62.py"""

import timm
import torch

torch.manual_seed(0)
with timm.layers.set_layer_config(scriptable=True):
    m = timm.create_model("resnet18", num_classes=10).cuda()
sm = torch.jit.script(m)
opt = torch.optim.SGD(sm.parameters(), lr=0.1)
for i in range(4):
    x = torch.randn(16, 3, 224, 224, device="cuda")
    loss = sm(x).logsumexp(-1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print("script", i, torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
    torch.cuda.reset_peak_memory_stats()
tr = torch.jit.trace(m, torch.randn(4, 3, 224, 224, device="cuda"))
for i in range(3):
    loss = tr(torch.randn(16, 3, 224, 224, device="cuda")).logsumexp(-1).mean()
    loss.backward()
    print("trace", i, torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
    torch.cuda.reset_peak_memory_stats()
for i in range(2):
    loss = m(torch.randn(16, 3, 224, 224, device="cuda")).logsumexp(-1).mean()
    loss.backward()
    print("eager", i, torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
    torch.cuda.reset_peak_memory_stats()
