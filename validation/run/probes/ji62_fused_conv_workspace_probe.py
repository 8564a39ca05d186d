"""The workspace of cuDNN's fused convolution plans (`aten::cudnn_convolution_relu`,
`aten::cudnn_convolution_add_relu`: what `torch.jit.optimize_for_inference` fuses a frozen CUDA
graph's conv + (add +) relu into, frozen_conv_add_relu_fusion_cuda.cpp) against the plain
convolution's, for every distinct convolution of a ResNet-50 at batch 16 x 224 (fp32, the
tv62_jit_trace_freeze probe's). One line a problem and call: input, weight, stride, padding, then
the bytes each op's call peaked above what was allocated before it, less its output's bytes
(512-rounded): the plan's workspace, plus any remainder of a block the allocator did not split (a
51,380,224-byte output in a fresh 50 MiB segment counts 52,428,800). Two calls each (the first
builds the plan). The twin's lines (f5ac1179, `vramscope run --gpu h100`) are in
fixtures/run/probes/ji62_fused_conv_workspace_twin_h100.txt: every fused column equals the plain one.
Session 62 (helper ji) wrote it: the twin takes the fused plan's workspace as the plain
convolution's (`_kernels/conv.py` `_cudnn_fused`), unmeasured; tv62_jit_trace_freeze's peak is at
a plain convolution, so it did not test that.
Run: python3 validation/run/probes/ji62_fused_conv_workspace_probe.py"""

import torch

# (in_channels, size, out_channels, kernel, stride, padding) of ResNet-50's convolutions
PROBLEMS = [
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 1, 1, 0),
    (64, 56, 64, 3, 1, 1),
    (64, 56, 256, 1, 1, 0),
    (256, 56, 64, 1, 1, 0),
    (256, 56, 128, 1, 1, 0),
    (128, 56, 128, 3, 2, 1),
    (128, 28, 512, 1, 1, 0),
    (256, 56, 512, 1, 2, 0),
    (512, 28, 128, 1, 1, 0),
    (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 1, 0),
    (256, 28, 256, 3, 2, 1),
    (256, 14, 1024, 1, 1, 0),
    (512, 28, 1024, 1, 2, 0),
    (1024, 14, 256, 1, 1, 0),
    (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 1, 0),
    (512, 14, 512, 3, 2, 1),
    (512, 7, 2048, 1, 1, 0),
    (1024, 14, 2048, 1, 2, 0),
    (2048, 7, 512, 1, 1, 0),
    (512, 7, 512, 3, 1, 1),
]


def above(op, args, out_bytes):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = op(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before - (out_bytes + 511) // 512 * 512
    del y
    return peak


aten = torch.ops.aten
with torch.no_grad():
    for cin, size, cout, k, s, p in PROBLEMS:
        x = torch.randn(16, cin, size, size, device="cuda")
        w = torch.randn(cout, cin, k, k, device="cuda")
        b = torch.randn(cout, device="cuda")
        o = (size + 2 * p - k) // s + 1
        z = torch.randn(16, cout, o, o, device="cuda")
        nbytes = z.numel() * 4
        st, pa, di = [s, s], [p, p], [1, 1]
        for call in range(2):
            plain = above(aten.convolution, (x, w, b, st, pa, di, False, [0, 0], 1), nbytes)
            relu = above(aten.cudnn_convolution_relu, (x, w, b, st, pa, di, 1), nbytes)
            add = above(aten.cudnn_convolution_add_relu, (x, w, z, 1.0, b, st, pa, di, 1), nbytes)
            print(
                tuple(x.shape),
                tuple(w.shape),
                s,
                p,
                "call",
                call,
                "plain",
                plain,
                "relu",
                relu,
                "add_relu",
                add,
            )
        del x, w, b, z
