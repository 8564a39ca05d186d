"""Session 73 probe (helper lx) for blind335/lx01 (pytorch/examples imagenet with `--seed`, which sets
`torch.backends.cudnn.deterministic = True`): does deterministic mode change the workspace cuDNN's heuristics
plan takes? cudnn/Conv_v8.cpp's `filterEngineConfigs` drops the engine configs with
CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC when deterministic, so the first config left may be another engine; the
twin's tables were measured with deterministic False. For torchvision resnet18's convolutions at lx01's batch
256 (NCHW float32, TF32 allowed, benchmark off; the problems read from the model's own Conv2d layers), under
deterministic False then True: the forward (`F.conv2d`), the data gradient and the weight gradient
(`aten.convolution_backward` with output_mask (1,0,0) and (0,1,0)), each on fresh operands after an
empty_cache: the bytes allocated beyond the outputs at the call's peak and the allocations made. One line a
case. Plain python3, under 60 s, under 6 GB. The twin's lines: `vramscope run --gpu h100` of this file (they
equal across `det 0` and `det 1` by construction: its question is the GPU's)."""

import torch
import torch.nn.functional as F
import torchvision

dev = "cuda"
torch.manual_seed(0)
N = 256

problems = []


def hook(m, inp, out):
    key = (m.in_channels, inp[0].shape[-1], m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0])
    if key not in problems:
        problems.append(key)


model = torchvision.models.resnet18()
for mod in model.modules():
    if isinstance(mod, torch.nn.Conv2d):
        mod.register_forward_hook(hook)
with torch.no_grad():
    model(torch.zeros(1, 3, 224, 224))
del model


def measure(tag, fn, *args):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    n0 = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    n1 = torch.cuda.memory_stats()["allocation.all.allocated"]
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ob = sum(o.untyped_storage().nbytes() for o in outs if o is not None)
    print(f"{tag}: workspace {peak - before - ob} allocs {n1 - n0} out {ob}", flush=True)
    del out, outs


bw = torch.ops.aten.convolution_backward.default
for det in (False, True):
    torch.backends.cudnn.deterministic = det
    for cin, h, cout, k, s, p in problems:
        x = torch.randn(N, cin, h, h, device=dev)
        w = torch.randn(cout, cin, k, k, device=dev)
        ho = (h + 2 * p - k) // s + 1
        g = torch.randn(N, cout, ho, ho, device=dev)
        tag = f"det {int(det)} n {N} x {cin}x{h}x{h} w {cout}x{cin}x{k}x{k} s {s} p {p}"
        measure("forward " + tag, F.conv2d, x, w, None, s, p)
        conv = (None, [s, s], [p, p], [1, 1], False, [0, 0], 1)
        measure("dgrad " + tag, bw, g, x, w, *conv, [True, False, False])
        measure("wgrad " + tag, bw, g, x, w, *conv, [False, True, False])
        del x, w, g
print("done", len(problems))
