"""Session 65 (helper kd): the scratch of CUDA kernels whose rules the twin took from PyTorch's sources
after blind289 (strided operands' copies, per-pair buffers, half-precision cuFFT plans, a loss that
keeps its input-sized storage). One line per case: "<name> count <allocations> bytes <requested bytes>
peak <peak allocated above the start>" from `torch.cuda.memory_stats()` around the call (the call's
inputs made before it), or "<name> RAISED <message head>". Plain python3, < 10 s, < 1 GB; the twin's
own lines come from `vramscope run --gpu h100` of this file (the request file lists them).
Each line decides one rule: upsample_nearest1d / its backward and upsample_linear1d's backward copy a
strided operand (UpSampleNearest1d.cu, UpSampleLinear1d.cu); cummax / logcumsumexp copy a strided input
(ScanUtils.cuh); searchsorted copies strided boundaries / input (BucketizationUtils.h); adaptive avg /
max pool copy a strided 4-D input (AdaptiveAveragePooling.cu, AdaptiveMaxPooling2d.cu); _cdist_backward
fills a (batch, r2, r1, m) buffer (DistanceKernel.cu); nll_loss copies a strided input (Loss.cu);
soft_margin_loss's 0-dim result keeps the input's storage (Loss.cpp); a half FFT of 100 points raises
and a half FFT along a strided dim clones its input (CuFFTPlanCache.h)."""

import torch
import torch.nn.functional as F

dev = "cuda"
torch.manual_seed(0)
torch.zeros(1, device=dev)  # the context

from _op_case import case  # noqa: E402  (beside this file in probes/)


def strided3(b, c, w):
    return torch.randn(b, w, c, device=dev).transpose(1, 2)  # (b, c, w), strided


case("upsample_nearest1d_strided", lambda: (strided3(16, 100, 400),), lambda x: F.interpolate(x, size=64000))
case(
    "upsample_nearest1d_dense",
    lambda: (strided3(16, 100, 400).contiguous(),),
    lambda x: F.interpolate(x, size=64000),
)
case(
    "upsample_nearest1d_backward_strided",
    lambda: (torch.randn(16, 64000, 100, device=dev).transpose(1, 2),),
    lambda g: torch.ops.aten.upsample_nearest1d_backward(g, [64000], [16, 100, 400]),
)
case(
    "upsample_linear1d_backward_strided",
    lambda: (torch.randn(16, 64000, 100, device=dev).transpose(1, 2),),
    lambda g: torch.ops.aten.upsample_linear1d_backward(g, [64000], [16, 100, 400], False),
)
case("cummax_strided", lambda: (strided3(64, 128, 256),), lambda x: torch.cummax(x, -1))
case("cummax_dense", lambda: (strided3(64, 128, 256).contiguous(),), lambda x: torch.cummax(x, -1))
case("logcumsumexp_strided", lambda: (strided3(64, 128, 256),), lambda x: torch.logcumsumexp(x, 1))
case("logcumsumexp_1d", lambda: (torch.randn(1 << 20, device=dev),), lambda x: torch.logcumsumexp(x, 0))
case("cumsum_1d", lambda: (torch.randn(1 << 20, device=dev),), lambda x: torch.cumsum(x, 0))
case(
    "searchsorted_strided_boundaries",
    lambda: (torch.randn(4096, 64, device=dev).sort(0).values.t(), torch.randn(64, 1000, device=dev)),
    lambda b, q: torch.searchsorted(b, q),
)
case(
    "searchsorted_strided_input",
    lambda: (torch.randn(64, 4096, device=dev).sort(1).values, torch.randn(1000, 64, device=dev).t()),
    lambda b, q: torch.searchsorted(b, q),
)
case(
    "searchsorted_long_input",
    lambda: (torch.randn(64, 4096, device=dev).sort(1).values, torch.randint(0, 9, (64, 1000), device=dev)),
    lambda b, q: torch.searchsorted(b, q),
)
case(
    "adaptive_avg_pool2d_strided",
    lambda: (torch.randn(8, 64, 56, 56, device=dev)[:, ::2],),
    lambda x: F.adaptive_avg_pool2d(x, 7),
)
case(
    "adaptive_max_pool2d_strided",
    lambda: (torch.randn(8, 64, 56, 56, device=dev)[:, ::2],),
    lambda x: F.adaptive_max_pool2d(x, 7, return_indices=True),
)
case(
    "adaptive_max_pool2d_channels_last",
    lambda: (torch.randn(8, 32, 56, 56, device=dev).contiguous(memory_format=torch.channels_last),),
    lambda x: F.adaptive_max_pool2d(x, 7, return_indices=True),
)
case(
    "cdist_backward_p1",
    lambda: (
        torch.randn(4, 512, 256, device=dev),
        torch.randn(4, 512, 64, device=dev),
        torch.randn(4, 256, 64, device=dev),
        torch.randn(4, 512, 256, device=dev),
    ),
    lambda g, a, b, d: torch.ops.aten._cdist_backward(g, a, b, 1.0, d),
)
case(
    "nll_loss_strided_input",
    lambda: (
        torch.randn(8, 16, 1000, device=dev).log_softmax(-1)[:, -1],
        torch.zeros(8, dtype=torch.long, device=dev),
    ),
    lambda lp, t: F.nll_loss(lp, t),
)
case(
    "soft_margin_loss",
    lambda: (torch.randn(1000, 512, device=dev), torch.randn(1000, 512, device=dev).sign()),
    lambda x, y: F.soft_margin_loss(x, y),
)
case("fft_half_100", lambda: (torch.randn(8, 100, device=dev).half(),), lambda x: torch.fft.rfft(x))
case(
    "fft_half_128_dim0", lambda: (torch.randn(128, 8, device=dev).half(),), lambda x: torch.fft.rfft(x, dim=0)
)
case("fft_float_128_dim0", lambda: (torch.randn(128, 8, device=dev),), lambda x: torch.fft.rfft(x, dim=0))
