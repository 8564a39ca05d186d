"""TorchScript deployment of a CUDA ResNet-50 (eval, batch 16 x 224, fp32): `torch.jit.trace`
(check_trace on: it runs the model and the trace again and compares them), 3 calls of the traced
module (TorchScript's profiling executor: its first calls profile, later ones may run the GPU fuser's
fusion groups), `torch.jit.freeze(torch.jit.script(m))` (conv-BN folding makes new weights; constant
pooling compares tensors with `at::equal`, whose values the twin does not carry: it takes them as
equal and pools them, the GPU keeps distinct weights apart) and `torch.jit.optimize_for_inference`,
each followed by 3 calls. One line per step: allocated, peak allocated since the last line, reserved.
Session 62 (helper tv) wrote it after making `torch.jit.trace` run under the twin (0512898b); the
twin's lines (`vramscope run --gpu h100`, 0512898b) are in this docstring's tail, for the H100 to
confirm or correct:
    model 112109056 112109056 144703488
    traced 146712064 335126528 419430400
    traced call 0 146776064 303998464 419430400
    traced call 1 146776064 304062464 419430400
    traced call 2 146776064 304062464 419430400
    frozen 245424128 245465088 436207616
    frozen call 0 245488128 402186752 438304768
    frozen call 1 245488128 402250752 438304768
    frozen call 2 245488128 402250752 438304768
    frozen deleted 245424128 245488128 438304768
    optimized 347544064 347544064 455081984
    optimized call 0 347608064 502733312 570425344
    optimized call 1 347608064 502273536 570425344
    optimized call 2 347608064 502273536 570425344
    kinds ['aten::_convolution', 'aten::adaptive_avg_pool2d', 'aten::add_', 'aten::batch_norm',
           'aten::flatten', 'aten::linear', 'aten::max_pool2d', 'aten::relu_']
Open questions it settles: whether the GPU's profiling executor fuses anything here (traced call 1
and 2 against 0), the frozen module's bytes (the twin pools BN-folded constants it reads as equal),
and `optimize_for_inference`'s CUDA rewrites (frozen conv-add-relu fusion into
`cudnn_convolution_add_relu`, which the twin's meta constants do not take: its figures are
eager ResNet's).
Run: python3 validation/run/probes/tv62_jit_trace_freeze_probe_s62.py"""

import torch
import torchvision

torch.manual_seed(0)


def line(tag):
    print(
        tag,
        torch.cuda.memory_allocated(),
        torch.cuda.max_memory_allocated(),
        torch.cuda.memory_reserved(),
        flush=True,
    )
    torch.cuda.reset_peak_memory_stats()


m = torchvision.models.resnet50().cuda().eval()
x = torch.randn(16, 3, 224, 224, device="cuda")
line("model")
with torch.no_grad():
    tr = torch.jit.trace(m, x)
    line("traced")
    for i in range(3):
        y = tr(x)
        line(f"traced call {i}")
    del y
    fr = torch.jit.freeze(torch.jit.script(m))
    line("frozen")
    for i in range(3):
        y = fr(x)
        line(f"frozen call {i}")
    del y, fr
    line("frozen deleted")
    opt = torch.jit.optimize_for_inference(torch.jit.script(m))
    line("optimized")
    for i in range(3):
        y = opt(x)
        line(f"optimized call {i}")
    print(
        "kinds",
        sorted(
            {n.kind() for n in tr.inlined_graph.nodes()}
            - {"prim::Constant", "prim::ListConstruct", "prim::GetAttr"}
        ),
    )
