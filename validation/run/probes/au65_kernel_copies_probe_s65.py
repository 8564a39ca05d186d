"""Session 65 (helper au): hidden copies of CUDA kernels read from PyTorch's sources (after kd's
rules). One line per case: "<name> count <allocations> bytes <requested bytes> peak <peak allocated
above the start>" from `torch.cuda.memory_stats()` around the call (the call's inputs made before
it), or "<name> RAISED <message head>". Plain python3, < 10 s, < 1 GB; the twin's own lines come from
`vramscope run --gpu h100` of this file. Each strided/dense pair decides one rule:
max_pool3d's forward copies a strided input, `contiguous(ChannelsLast3d)` for a channels-last one
(DilatedMaxPool3d.cu); adaptive_avg_pool3d / adaptive_max_pool3d copy a strided 5-D input and their
backwards a strided gradient (AdaptiveAveragePooling3d.cu, AdaptiveMaxPooling3d.cu);
upsample_bilinear2d's NHWC kernel copies a strided channels-last input of >= 16 channels
(UpSampleBilinear2d.cu); kthvalue copies a strided input before its outputs (cuda/Sorting.cpp); mode
copies its input transposed along the dim unless that view is contiguous (TensorModeKernel.cpp);
weight norm's norms are float32 for half, bfloat16 for bfloat16 (WeightNorm.cu); embedding_renorm_
sorts and selects unique indices (Embedding.cu); nansum takes sum's reduction scratch. The rfft_* and
index_select_* lines have no rule: they measure two unexplained H200 allocations (blind140/ej05's
strided rfft, blind232/hx06's 4-byte index_select)."""

import torch
import torch.nn.functional as F

dev = "cuda"
torch.manual_seed(0)
torch.zeros(1, device=dev)  # the context

from _op_case import case  # noqa: E402  (beside this file in probes/)


def sliced5():
    return torch.randn(4, 64, 8, 32, 32, device=dev)[:, ::2]  # (4, 32, 8, 32, 32), strided


def cl3d(*shape):
    return torch.randn(*shape, device=dev).contiguous(memory_format=torch.channels_last_3d)


case("max_pool3d_strided", lambda: (sliced5(),), lambda x: F.max_pool3d(x, 2, return_indices=True))
case("max_pool3d_dense", lambda: (sliced5().contiguous(),), lambda x: F.max_pool3d(x, 2, return_indices=True))
case(
    "max_pool3d_channels_last_3d_sliced",
    lambda: (cl3d(4, 64, 8, 32, 32)[:, ::2],),
    lambda x: F.max_pool3d(x, 2, return_indices=True),
)
case("adaptive_avg_pool3d_strided", lambda: (sliced5(),), lambda x: F.adaptive_avg_pool3d(x, (2, 4, 4)))
case(
    "adaptive_avg_pool3d_dense",
    lambda: (sliced5().contiguous(),),
    lambda x: F.adaptive_avg_pool3d(x, (2, 4, 4)),
)
case(
    "adaptive_avg_pool3d_backward_strided",
    lambda: (torch.randn(4, 64, 2, 4, 4, device=dev)[:, ::2], sliced5().contiguous()),
    lambda g, x: torch.ops.aten._adaptive_avg_pool3d_backward(g, x),
)
case(
    "adaptive_max_pool3d_strided",
    lambda: (sliced5(),),
    lambda x: F.adaptive_max_pool3d(x, (2, 4, 4), return_indices=True),
)
case(
    "adaptive_max_pool3d_backward_strided",
    lambda: (
        torch.randn(4, 64, 2, 4, 4, device=dev)[:, ::2],
        sliced5().contiguous(),
        torch.zeros(4, 32, 2, 4, 4, dtype=torch.long, device=dev),
    ),
    lambda g, x, i: torch.ops.aten.adaptive_max_pool3d_backward(g, x, i),
)
case(
    "upsample_bilinear2d_channels_last_sliced",
    lambda: (torch.randn(8, 64, 64, 64, device=dev).permute(0, 3, 1, 2)[:, :, :, ::2],),
    lambda x: F.interpolate(x, size=(128, 64), mode="bilinear"),
)
case(
    "upsample_bilinear2d_channels_last_dense",
    lambda: (torch.randn(8, 64, 32, 64, device=dev).permute(0, 3, 1, 2),),
    lambda x: F.interpolate(x, size=(128, 64), mode="bilinear"),
)
case(
    "kthvalue_strided",
    lambda: (torch.randn(64, 100000, device=dev).t(),),
    lambda x: torch.kthvalue(x, 3, dim=0),
)
case("kthvalue_dense", lambda: (torch.randn(100000, 64, device=dev),), lambda x: torch.kthvalue(x, 3, dim=0))
case("mode_dim0", lambda: (torch.randint(0, 50, (1000, 4096), device=dev),), lambda x: torch.mode(x, 0))
case("mode_last_dim", lambda: (torch.randint(0, 50, (4096, 1000), device=dev),), lambda x: torch.mode(x, 1))
case(
    "weight_norm_half",
    lambda: (torch.randn(1024, 128, 7, device=dev).half(), torch.ones(1024, 1, 1, device=dev).half()),
    lambda v, g: torch._weight_norm(v, g, 0),
)
case(
    "weight_norm_bfloat16",
    lambda: (torch.randn(1024, 128, 7, device=dev).bfloat16(), torch.ones(1024, 1, 1, device=dev).bfloat16()),
    lambda v, g: torch._weight_norm(v, g, 0),
)
case(
    "embedding_renorm",
    lambda: (torch.randn(100000, 128, device=dev), torch.randint(0, 100000, (8192,), device=dev)),
    lambda w, i: torch.embedding_renorm_(w, i, 1.0, 2.0),
)
case(
    "nansum_rows", lambda: (torch.randn(12, 155136, device=dev),), lambda x: torch.nansum(x, -1, keepdim=True)
)
# left open (no rule): a strided real FFT's extra allocation and index_select's 4 bytes, at two sizes each
case("rfft_strided_6272", lambda: (torch.randn(8192, 6272, device=dev).t(),), lambda x: torch.fft.rfft(x))
case("rfft_strided_1024", lambda: (torch.randn(8192, 1024, device=dev).t(),), lambda x: torch.fft.rfft(x))
case("rfft_dense_1024", lambda: (torch.randn(1024, 8192, device=dev),), lambda x: torch.fft.rfft(x))
case(
    "index_select_16",
    lambda: (torch.randn(64, 128, 768, device=dev), torch.arange(16, device=dev)),
    lambda x, i: torch.index_select(x, 1, i),
)
case(
    "index_select_64",
    lambda: (torch.randn(64, 128, 768, device=dev), torch.arange(64, device=dev)),
    lambda x, i: torch.index_select(x, 1, i),
)
