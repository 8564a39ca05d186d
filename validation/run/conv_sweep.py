"""Measure cuDNN's convolution workspaces over the convolution layers of common models, on a GPU.

    python conv_sweep.py problems OUT.json [2|3]           (CPU: the models' convolutions, meta tensors;
                                                           2: MODELS2's problems that MODELS lacks;
                                                           3: the vision zoo's that both lack)
    python conv_sweep.py run PROBLEMS.json OUTDIR SECONDS [WORKER WORKERS [DONE_DIR,...]]   (GPU)
    python conv_sweep.py run-benchmark PROBLEMS.json OUTDIR SECONDS [WORKER WORKERS [DONE_DIR,...]]  (GPU)
    python conv_sweep.py smoke                             (CPU: the runs' code paths on a few problems)
    python conv_sweep.py merge [--correct] TABLE LINES...  (the table with conv_table.py's new lines:
                                                           a TABLE.xz rewritten in place, else to stdout)
    python conv_sweep.py normalize TABLE                   (`merge` without lines: one-value parameters
                                                           expanded, as `merge` always does)
    python conv_sweep.py affine TABLE [H100_JSONL]        (is the workspace affine in the batch?)

`problems` builds torchvision's and timm's common models (and plain UNets, Conv1d audio stacks, 3-D
video networks) on the meta device and records every `aten.convolution` their forward calls, as a
dispatch mode sees it: the input's sizes without the batch, the weight's, stride, padding, dilation,
transposed, output_padding and groups. Each is swept at the batch sizes users run, in float32, bfloat16
and float16, in the contiguous and the channels-last layout (2-D and 3-D), ordered so that what users
hit most comes first (the sweep stops at its deadline, so a partial sweep is the most useful part).

`run` takes every WORKERS-th item of that order from WORKER on (leaving out the items that earlier
runs into the DONE_DIRs reached, as their summary lines in w*.err say), makes the operands on the
GPU (the dtype and layout a model in that dtype and layout hands the op; autocast hands it the same
cast copies), and calls `aten.convolution` and `aten.convolution_backward` with the output masks
[True, False, False] (dgrad) and [False, True, False] (wgrad) under ops_truth.py's dispatch mode with
OPS_TRUTH_ALL=1: the mode reads the caching allocator's counters around each op and writes the same
records ops_truth.py writes for a script, to OUTDIR/wWORKER.jsonl. `conv_table.py OUTDIR OUTDIR` then
reads the workspaces from them exactly as it reads the validation scripts' records (what the op
requested beyond its new outputs and the layout copies). An item during which the allocator ran out
of memory (cuDNN would then have taken another plan) is left out and noted in OUTDIR/wWORKER.err,
whose last line sums the worker up (`reached`: the indices in the sweep's order of the items it
reached). A few items go through `F.conv*` under `torch.autocast` with float32 operands and a real backward
instead (`"via": "autocast"`, OUTDIR/autocast/), to check that they give the same lines.

`run-benchmark` is `run` under `torch.backends.cudnn.benchmark = True` (to OUTDIR/wWORKER.jsonl and
.err, the same summaries): each item's forward, dgrad and wgrad (the masks above) are each called
twice, on fresh operands, in a thread of the item's own. `run_single_conv` (cudnn/Conv_v8.cpp) keys
its `benchmark_cache` by the operation (forward, backward data, backward filter), the
`ConvolutionParams` of its x (the input, or the data gradient) and weight (sizes, dtype,
`cudnn_conv_suggest_memory_format`, padding, stride, dilation, groups, deterministic, allow_tf32)
and the three pointers' alignments; the cache is `thread_local`, so a fresh thread starts empty and
no item finds a plan another item timed (a transposed convolution's forward is the backward-data
operation of the plain convolution whose input is its output: the same key). A first call allocates
its outputs, then `generate_and_filter_plans`' one workspace as large as the largest plan's (of the
plans whose workspace is at most `get_available_workspace()`: the device's free memory or the
largest cached block, whichever is larger; halved while it does not fit), frees it after timing,
empties the cache and runs the fastest plan with that plan's workspace; the second call finds the
plan and allocates only its workspace. So the search workspace is the first call's requested bytes
beyond its outputs less the second's, one allocation more (`conv_benchmark_table.py --sweep` reads
it so). The cache is emptied before each item (the free memory `get_available_workspace` reads is
then the device's, written to the line as `free`); a line per item: {"index", "item", "free",
"ops": {"forward" | "dgrad" | "wgrad": [first call's record, second's]}}, the records ops_truth.py's
without `kwargs`. A later call passes the earlier calls' folders as DONE_DIRs (session 52's first
call: `fixtures/run/cudnn_benchmark_sweep_h200.tar.xz`'s `b1/`). A PROBLEMS file whose problems name
their batch, dtype and layout (`"n"`, `"dtype"`, `"layout"`: `wild/benchmark_problems.py`'s, the wild
programs' own calls) is swept item by item as written, not crossed with BATCHES and DTYPE_LAYOUTS.

`merge` adds conv_table.py's lines (one a problem) to the table, which holds one line for each problem
without its batch, the batches' bytes after a `|`: a problem the table already holds must have the
same bytes (a disagreement is printed on stderr and the table's bytes kept; with `--correct` the
lines' bytes replace the table's, for lines the table took from records since found misread).
Both the table's keys and the lines' are first `expand_key`ed: one stride, padding, dilation or
output_padding value written for every spatial dimension, as the twin looks problems up (lines read
before conv_table.py expanded them, 724b8ac, were keyed `0` and never found).
`affine` asks whether the workspace of one problem is an affine function of the batch between
measured batches (leave one out).
"""

import json
import lzma
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# the batch sizes, in the order they are swept (the blind sets' unmeasured problems had batches
# 8, 64, 128, 4, 32, 96, 16, 192, 256, 160, 48 most often)
BATCHES = [8, 32, 64, 16, 128, 4, 96, 256, 2, 1, 48, 192, 24, 12]
# (dtype, layout), in the order they are swept
DTYPE_LAYOUTS = [
    ("float32", "nchw"),
    ("bfloat16", "nchw"),
    ("bfloat16", "nhwc"),
    ("float16", "nchw"),
    ("float16", "nhwc"),
    ("float32", "nhwc"),
]
# the largest operand (input, weight, output) an item may have: twelve workers share the GPU's memory
MAX_OPERAND_BYTES = 3 << 29
# the share of the GPU's memory the workers' caches may hold together between items
CACHE_SHARE = 0.8


def _tv(name, **kw):
    import torchvision

    return lambda: torchvision.models.get_model(name, **kw)


def _tvseg(name):
    import torchvision

    return lambda: torchvision.models.get_model(name, weights=None, weights_backbone=None, aux_loss=False)


def _timm(name):
    def make():
        import timm

        return timm.create_model(name, pretrained=False)

    return make


def _unet(base, depth=4, transposed=True, ch=3, dims=2, out=1):
    """The plain UNet (Ronneberger et al.) with same-padding, as users write it; with `dims=3` the
    3-D UNet (Cicek et al.; MONAI's BasicUNet layout)."""
    import torch.nn as nn

    conv, norm = getattr(nn, f"Conv{dims}d"), getattr(nn, f"BatchNorm{dims}d")

    def block(i, o):
        return nn.Sequential(
            conv(i, o, 3, padding=1, bias=False),
            norm(o),
            nn.ReLU(),
            conv(o, o, 3, padding=1, bias=False),
            norm(o),
            nn.ReLU(),
        )

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            widths = [base * 2**i for i in range(depth + 1)]
            self.downs = nn.ModuleList([block(ch, widths[0])])
            self.downs.extend(block(widths[i], widths[i + 1]) for i in range(depth))
            self.ups = nn.ModuleList(
                getattr(nn, f"ConvTranspose{dims}d")(widths[i + 1], widths[i], 2, stride=2)
                if transposed
                else nn.Sequential(nn.Upsample(scale_factor=2), conv(widths[i + 1], widths[i], 1))
                for i in reversed(range(depth))
            )
            self.blocks = nn.ModuleList(block(2 * widths[i], widths[i]) for i in reversed(range(depth)))
            self.head = conv(widths[0], out, 1)
            self.pool = getattr(nn, f"MaxPool{dims}d")(2)

        def forward(self, x):
            import torch

            skips = []
            for i, d in enumerate(self.downs):
                x = d(x if i == 0 else self.pool(x))
                skips.append(x)
            skips.pop()
            for up, blk in zip(self.ups, self.blocks, strict=True):
                x = blk(torch.cat([up(x), skips.pop()], 1))
            return self.head(x)

    return UNet


def _audio_wav2vec():
    import torch.nn as nn

    layers, c = [], 1
    for k, s in [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2:
        layers += [nn.Conv1d(c, 512, k, s, bias=False), nn.GELU()]
        c = 512
    return nn.Sequential(*layers)


def _audio_m5():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv1d(1, 128, 80, 4),
        nn.MaxPool1d(4),
        nn.Conv1d(128, 128, 3),
        nn.MaxPool1d(4),
        nn.Conv1d(128, 256, 3),
        nn.MaxPool1d(4),
        nn.Conv1d(256, 512, 3),
    )


def _audio_whisper(d):
    import torch.nn as nn

    return lambda: nn.Sequential(nn.Conv1d(80, d, 3, padding=1), nn.GELU(), nn.Conv1d(d, d, 3, 2, 1))


def _dcgan():
    import torch.nn as nn

    class DCGAN(nn.Module):
        """DCGAN's generator and discriminator at 64x64 (Radford et al.; PyTorch's example)."""

        def __init__(self):
            super().__init__()
            self.g = nn.Sequential(
                nn.ConvTranspose2d(100, 512, 4, 1, 0, bias=False),
                nn.ConvTranspose2d(512, 256, 4, 2, 1, bias=False),
                nn.ConvTranspose2d(256, 128, 4, 2, 1, bias=False),
                nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False),
                nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False),
            )
            self.d = nn.Sequential(
                nn.Conv2d(3, 64, 4, 2, 1, bias=False),
                nn.Conv2d(64, 128, 4, 2, 1, bias=False),
                nn.Conv2d(128, 256, 4, 2, 1, bias=False),
                nn.Conv2d(256, 512, 4, 2, 1, bias=False),
                nn.Conv2d(512, 1, 4, 1, 0, bias=False),
            )

        def forward(self, z):
            return self.d(self.g(z))

    return DCGAN()


# (tier, name, constructor, input sizes without the batch): tier 0 first
MODELS = [
    (0, "resnet18", _tv("resnet18"), [(3, 224, 224)]),
    (0, "resnet50", _tv("resnet50"), [(3, 224, 224)]),
    (0, "resnet34", _tv("resnet34"), [(3, 224, 224)]),
    (0, "mobilenet_v2", _tv("mobilenet_v2"), [(3, 224, 224)]),
    (0, "efficientnet_b0", _tv("efficientnet_b0"), [(3, 224, 224)]),
    (0, "convnext_tiny", _tv("convnext_tiny"), [(3, 224, 224)]),
    (0, "mobilenet_v3_large", _tv("mobilenet_v3_large"), [(3, 224, 224)]),
    (0, "unet64", _unet(64), [(3, 256, 256)]),
    (0, "vgg16", _tv("vgg16"), [(3, 224, 224)]),
    (0, "timm_resnet50d", _timm("resnet50d"), [(3, 224, 224)]),
    (0, "timm_efficientnet_b0", _timm("efficientnet_b0"), [(3, 224, 224)]),
    (1, "resnet101", _tv("resnet101"), [(3, 224, 224)]),
    (1, "resnext50_32x4d", _tv("resnext50_32x4d"), [(3, 224, 224)]),
    (1, "wide_resnet50_2", _tv("wide_resnet50_2"), [(3, 224, 224)]),
    (1, "densenet121", _tv("densenet121"), [(3, 224, 224)]),
    (1, "mobilenet_v3_small", _tv("mobilenet_v3_small"), [(3, 224, 224)]),
    (1, "efficientnet_b1", _tv("efficientnet_b1"), [(3, 240, 240)]),
    (1, "efficientnet_b2", _tv("efficientnet_b2"), [(3, 288, 288)]),
    (1, "efficientnet_b3", _tv("efficientnet_b3"), [(3, 300, 300)]),
    (1, "efficientnet_v2_s", _tv("efficientnet_v2_s"), [(3, 384, 384)]),
    (1, "regnet_y_400mf", _tv("regnet_y_400mf"), [(3, 224, 224)]),
    (1, "regnet_y_800mf", _tv("regnet_y_800mf"), [(3, 224, 224)]),
    (1, "regnet_y_1_6gf", _tv("regnet_y_1_6gf"), [(3, 224, 224)]),
    (1, "regnet_x_400mf", _tv("regnet_x_400mf"), [(3, 224, 224)]),
    (1, "shufflenet_v2_x1_0", _tv("shufflenet_v2_x1_0"), [(3, 224, 224)]),
    (1, "squeezenet1_1", _tv("squeezenet1_1"), [(3, 224, 224)]),
    (1, "convnext_small", _tv("convnext_small"), [(3, 224, 224)]),
    (1, "vgg16_bn", _tv("vgg16_bn"), [(3, 224, 224)]),
    (1, "vit_b_16", _tv("vit_b_16"), [(3, 224, 224)]),
    (1, "swin_t", _tv("swin_t"), [(3, 224, 224)]),
    (1, "deeplabv3_resnet50", _tvseg("deeplabv3_resnet50"), [(3, 512, 512)]),
    (1, "fcn_resnet50", _tvseg("fcn_resnet50"), [(3, 512, 512)]),
    (1, "lraspp_mobilenet_v3_large", _tvseg("lraspp_mobilenet_v3_large"), [(3, 512, 512)]),
    (1, "deeplabv3_mobilenet_v3_large", _tvseg("deeplabv3_mobilenet_v3_large"), [(3, 512, 512)]),
    (1, "unet32_128", _unet(32), [(3, 128, 128)]),
    (1, "unet64_512", _unet(64, ch=1), [(1, 512, 512)]),
    (1, "wav2vec2_features", _audio_wav2vec, [(1, 16000)]),
    (1, "m5", _audio_m5, [(1, 16000)]),
    (1, "whisper_base_conv", _audio_whisper(512), [(80, 3000)]),
    (1, "whisper_small_conv", _audio_whisper(768), [(80, 3000)]),
    (1, "r3d_18", _tv("r3d_18"), [(3, 16, 112, 112)]),
    (1, "r2plus1d_18", _tv("r2plus1d_18"), [(3, 16, 112, 112)]),
    (1, "dcgan", _dcgan, [(100, 1, 1)]),
    (2, "resnet18_small", _tv("resnet18"), [(3, 32, 32), (3, 64, 64), (3, 128, 128), (3, 96, 96)]),
    (2, "resnet50_res", _tv("resnet50"), [(3, 256, 256), (3, 384, 384), (3, 160, 160), (3, 512, 512)]),
    (2, "resnet18_res", _tv("resnet18"), [(3, 256, 256), (3, 384, 384), (3, 160, 160), (3, 512, 512)]),
    (2, "mc3_18", _tv("mc3_18"), [(3, 16, 112, 112)]),
    (2, "resnext101_32x8d", _tv("resnext101_32x8d"), [(3, 224, 224)]),
    (2, "densenet169", _tv("densenet169"), [(3, 224, 224)]),
    (2, "regnet_y_3_2gf", _tv("regnet_y_3_2gf"), [(3, 224, 224)]),
    (2, "shufflenet_v2_x0_5", _tv("shufflenet_v2_x0_5"), [(3, 224, 224)]),
    (2, "squeezenet1_0", _tv("squeezenet1_0"), [(3, 224, 224)]),
    (2, "mnasnet1_0", _tv("mnasnet1_0"), [(3, 224, 224)]),
    (2, "googlenet", _tv("googlenet", init_weights=False, aux_logits=False), [(3, 224, 224)]),
    (2, "alexnet", _tv("alexnet"), [(3, 224, 224)]),
    (2, "timm_regnety_016", _timm("regnety_016"), [(3, 224, 224)]),
    (2, "timm_convnextv2_atto", _timm("convnextv2_atto"), [(3, 224, 224)]),
    (2, "timm_efficientnet_b2", _timm("efficientnet_b2"), [(3, 256, 256)]),
    (2, "timm_mobilevit_xs", _timm("mobilevit_xs"), [(3, 256, 256)]),
    (2, "efficientnet_b0_res", _tv("efficientnet_b0"), [(3, 256, 256), (3, 384, 384)]),
    (2, "convnext_tiny_384", _tv("convnext_tiny"), [(3, 384, 384)]),
    (2, "mobilenet_v2_res", _tv("mobilenet_v2"), [(3, 256, 256), (3, 160, 160), (3, 128, 128)]),
    (2, "unet64_interp", _unet(64, transposed=False), [(3, 256, 256)]),
]


def _x3d(width, depth, frames, res):
    """X3D (Feichtenhofer, 2020) as its reference implementation lays it out: a 1x3x3 stride-(1,2,2)
    stem with a 5x1x1 depthwise temporal convolution, bottlenecks of 1x1x1, 3x3x3 depthwise (spatial
    stride 2 first) and 1x1x1, squeeze-excitation's 1x1x1 pair on every other block, then 1x1x1 to
    2.25 x 192 channels. Only the convolutions matter here: no norms, activations or shortcuts."""
    import math

    import torch.nn as nn

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            hid = max(8, round(c * 0.0625 / 8) * 8)
            self.fc = nn.Sequential(nn.Conv3d(c, hid, 1), nn.Conv3d(hid, c, 1))

        def forward(self, x):
            return x * self.fc(x.mean((2, 3, 4), keepdim=True)).sigmoid()

    def make():
        c = 24
        layers = [
            nn.Conv3d(3, c, (1, 3, 3), (1, 2, 2), (0, 1, 1)),
            nn.Conv3d(c, c, (5, 1, 1), 1, (2, 0, 0), groups=c),
        ]
        for cout, n in zip((24, 48, 96, 192), depth, strict=True):
            cout = int(cout * width)
            inner = math.ceil(cout * 2.25)
            for i in range(n):
                layers += [
                    nn.Conv3d(c, inner, 1),
                    nn.Conv3d(inner, inner, 3, (1, 2, 2) if i == 0 else 1, 1, groups=inner),
                ]
                layers += [SE(inner)] * (i % 2 == 0) + [nn.Conv3d(inner, cout, 1)]
                c = cout
        layers.append(nn.Conv3d(c, math.ceil(c * 2.25), 1))
        return nn.Sequential(*layers)

    return make, [(3, frames, res, res)]


def _hifigan():
    """HiFi-GAN V1's generator (Kong et al.): a 7-wide Conv1d from 80 mel bins to 512, transposed
    Conv1d upsampling by 8, 8, 2, 2 (kernels 16, 16, 4, 4), each followed by residual blocks of
    kernels 3, 7, 11 with dilations 1, 3, 5, then a 7-wide Conv1d to one channel."""
    import torch.nn as nn

    layers, c = [nn.Conv1d(80, 512, 7, 1, 3)], 512
    for u, k in ((8, 16), (8, 16), (2, 4), (2, 4)):
        layers.append(nn.ConvTranspose1d(c, c // 2, k, u, (k - u) // 2))
        c //= 2
        for kr in (3, 7, 11):
            for d in (1, 3, 5):
                layers += [
                    nn.Conv1d(c, c, kr, 1, d * (kr - 1) // 2, d),
                    nn.Conv1d(c, c, kr, 1, (kr - 1) // 2),
                ]
    layers.append(nn.Conv1d(c, 1, 7, 1, 3))
    return nn.Sequential(*layers)


def _wavenet():
    """A WaveNet stack (van den Oord et al.): a causal 2-wide dilated Conv1d per layer, dilations 1 to
    512 twice over, 64 residual channels gated to 128, 1x1 residual and 256-wide skip convolutions."""
    import torch.nn as nn

    class Layer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dil = nn.Conv1d(64, 128, 2, dilation=d, padding=d)
            self.res = nn.Conv1d(64, 64, 1)
            self.skip = nn.Conv1d(64, 256, 1)

        def forward(self, x):
            h = self.dil(x)[..., : x.shape[-1]]
            a, b = h.chunk(2, 1)
            g = a.tanh() * b.sigmoid()
            self.skip(g)
            return x + self.res(g)

    return nn.Sequential(nn.Conv1d(1, 64, 1), *[Layer(2**i) for i in range(10)] * 2)


def _conformer_conv(d):
    """Conformer's convolution module (Gulati et al.): pointwise Conv1d to 2d (GLU), a 31-wide
    depthwise Conv1d, pointwise Conv1d back; with the 2-D subsampling front end of two 3x3 stride-2
    convolutions left to the 2-D models."""
    import torch.nn as nn

    class GLU(nn.Module):
        def forward(self, x):
            return nn.functional.glu(x, 1)

    return lambda: nn.Sequential(
        nn.Conv1d(d, 2 * d, 1), GLU(), nn.Conv1d(d, d, 31, 1, 15, groups=d), nn.Conv1d(d, d, 1)
    )


def _encodec():
    """EnCodec's/DAC's convolutional encoder shape (Defossez et al.): a 7-wide Conv1d to 32 channels,
    then per stage a 3-wide residual Conv1d and a strided Conv1d of kernel 2 x stride doubling the
    channels, strides 2, 4, 5, 8, and a 7-wide Conv1d to 128."""
    import torch.nn as nn

    layers, c = [nn.Conv1d(1, 32, 7, 1, 3)], 32
    for s in (2, 4, 5, 8):
        layers += [
            nn.Conv1d(c, c // 2, 3, 1, 1),
            nn.Conv1d(c // 2, c, 1),
            nn.Conv1d(c, 2 * c, 2 * s, s, s // 2),
        ]
        c *= 2
    layers.append(nn.Conv1d(c, 128, 7, 1, 3))
    return nn.Sequential(*layers)


# the second sweep (`problems OUT.json 2`): video and volumetric 3-D networks, 1-D audio stacks and
# image models the first list lacks; only problems the first list does not hold are swept
MODELS2 = [
    (0, "x3d_s", *_x3d(1, (3, 5, 11, 7), 13, 160)),
    (0, "x3d_m", *_x3d(1, (3, 5, 11, 7), 16, 224)),
    (0, "x3d_xs", *_x3d(1, (3, 5, 11, 7), 4, 160)),
    (0, "unet3d_32", _unet(32, ch=1, dims=3, out=2), [(1, 96, 96, 96), (1, 64, 128, 128)]),
    (0, "unet3d_16", _unet(16, ch=4, dims=3, out=2), [(4, 128, 128, 128)]),
    (0, "hifigan", _hifigan, [(80, 32)]),
    (0, "wavenet", _wavenet, [(1, 16000)]),
    (0, "conformer_conv_256", _conformer_conv(256), [(256, 500)]),
    (0, "encodec", _encodec, [(1, 24000)]),
    (1, "s3d", _tv("s3d"), [(3, 16, 224, 224)]),
    (1, "mvit_v2_s", _tv("mvit_v2_s"), [(3, 16, 224, 224)]),
    (1, "swin3d_t", _tv("swin3d_t"), [(3, 16, 224, 224)]),
    (1, "conformer_conv_512", _conformer_conv(512), [(512, 500)]),
    (1, "inception_v3", _tv("inception_v3", init_weights=False, aux_logits=False), [(3, 299, 299)]),
    (1, "maxvit_t", _tv("maxvit_t"), [(3, 224, 224)]),
    (1, "timm_cspdarknet53", _timm("cspdarknet53"), [(3, 256, 256)]),
    (1, "timm_dla34", _timm("dla34"), [(3, 224, 224)]),
    (1, "timm_ghostnet_100", _timm("ghostnet_100"), [(3, 224, 224)]),
    (1, "timm_repvgg_a2", _timm("repvgg_a2"), [(3, 224, 224)]),
    (1, "timm_hrnet_w18_small", _timm("hrnet_w18_small"), [(3, 224, 224)]),
    (1, "timm_mobilenetv3_large_100", _timm("mobilenetv3_large_100"), [(3, 224, 224)]),
    (1, "timm_mobilenetv4_conv_small", _timm("mobilenetv4_conv_small"), [(3, 224, 224)]),
    (1, "timm_convnext_nano", _timm("convnext_nano"), [(3, 224, 224)]),
    (1, "timm_resnet26d", _timm("resnet26d"), [(3, 224, 224)]),
    (1, "timm_seresnext26d_32x4d", _timm("seresnext26d_32x4d"), [(3, 224, 224)]),
    (1, "timm_efficientnetv2_rw_s", _timm("efficientnetv2_rw_s"), [(3, 288, 288)]),
    (1, "timm_res2net50_26w_4s", _timm("res2net50_26w_4s"), [(3, 224, 224)]),
    (1, "timm_rexnet_100", _timm("rexnet_100"), [(3, 224, 224)]),
    (1, "timm_xception41", _timm("xception41"), [(3, 299, 299)]),
    (2, "timm_fastvit_t8", _timm("fastvit_t8"), [(3, 256, 256)]),
    (2, "timm_edgenext_small", _timm("edgenext_small"), [(3, 256, 256)]),
    (2, "timm_mixnet_s", _timm("mixnet_s"), [(3, 224, 224)]),
    (2, "timm_dpn68", _timm("dpn68"), [(3, 224, 224)]),
    (2, "timm_nfnet_l0", _timm("nfnet_l0"), [(3, 224, 224)]),
    (2, "timm_regnetz_b16", _timm("regnetz_b16"), [(3, 224, 224)]),
    (2, "resnet50_det", _tv("resnet50"), [(3, 800, 800), (3, 640, 640)]),
    (2, "mobilenet_v3_large_det", _tv("mobilenet_v3_large"), [(3, 320, 320), (3, 640, 640)]),
]


def zoo_models():
    """The third model list: vision_zoo_sweep.py's models (torchvision's but the quantized, detection
    and optical-flow ones; two of each timm module) at each one's input size, tier 2."""
    import timm
    import vision_zoo_sweep as zoo
    from torchvision import models as tvm

    skip = set(tvm.list_models(module=tvm.detection)) | set(tvm.list_models(module=tvm.optical_flow))
    segmentation = set(tvm.list_models(module=tvm.segmentation))
    video = set(tvm.list_models(module=tvm.video))
    out = []
    for name in zoo.names():
        kind, arch = name.split("/", 1)
        if kind == "timm":
            cfg = timm.get_pretrained_cfg(arch)
            size = tuple(cfg.input_size) if cfg is not None and cfg.input_size else (3, 224, 224)
            out.append((2, name, _timm(arch), [size]))
        elif arch in segmentation:
            out.append((2, name, _tvseg(arch), [(3, 224, 224)]))
        elif arch in video:
            side = 224 if arch.startswith(("mvit", "swin3d", "s3d")) else 112
            frames = 16 if arch.startswith(("mvit", "s3d")) else 8
            out.append((2, name, _tv(arch), [(3, frames, side, side)]))
        elif arch not in skip:
            aux = arch in ("inception_v3", "googlenet")
            extra = {"init_weights": False, "aux_logits": False} if aux else {}
            side = 299 if arch == "inception_v3" else 224
            out.append((2, name, _tv(arch, **extra), [(3, side, side)]))
    return out


def extract(models=MODELS):
    """Every `aten.convolution` of the models' forward on the meta device, batch left out, first seen
    first: [{"x", "w", "stride", "padding", "dilation", "transposed", "output_padding", "groups",
    "tier", "models"}]."""
    import conv_problem
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Convs(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.convolution.default:
                # stride, padding, dilation, transposed, output_padding, groups: args[3:9]
                self.seen.append(conv_problem.fields(args[0].shape[1:], args[1].shape, *args[3:9]))
            return func(*args, **(kwargs or {}))

    problems = {}
    for tier, name, make, inputs in models:
        for sizes in inputs:
            mode = Convs()
            try:
                with torch.device("meta"):
                    model = make().eval()
                with torch.device("meta"), torch.no_grad(), mode:
                    model(torch.empty(1, *sizes))
            except (NotImplementedError, RuntimeError):
                # a model that reads data on the way (timm's MobileViT): on the CPU at batch 1
                mode = Convs()
                try:
                    model = make().eval()
                    with torch.no_grad(), mode:
                        model(torch.zeros(1, *sizes))
                except Exception as e:  # a zoo model that cannot run so is left out, named
                    print(f"{name}: left out ({type(e).__name__}: {str(e)[:120]})", file=sys.stderr)
                    continue
            except Exception as e:
                print(f"{name}: left out ({type(e).__name__}: {str(e)[:120]})", file=sys.stderr)
                continue
            for p in mode.seen:
                key = json.dumps(p, sort_keys=True)
                q = problems.setdefault(key, dict(p, tier=tier, models=[]))
                q["tier"] = min(q["tier"], tier)
                if name not in q["models"]:
                    q["models"].append(name)
    return list(problems.values())


def items(problems, batches=BATCHES, dtype_layouts=DTYPE_LAYOUTS):
    """The sweep's order: by batch rank + dtype/layout rank + tier, then the problems' order. A 1-D
    problem has no channels-last layout. A problem that names its batch, dtype and layout ("n",
    "dtype", "layout": a program's own call, `wild/benchmark_problems.py`) is that one item alone, in
    the problems' order before the swept ones."""
    out = []
    for pi, p in enumerate(problems):
        if "n" in p:
            out.append((-1, pi, 0, 0, dict(p)))
            continue
        for bi, n in enumerate(batches):
            for di, (dtype, layout) in enumerate(dtype_layouts):
                if layout == "nhwc" and len(p["x"]) == 2:
                    continue
                out.append((bi + di + 2 * p["tier"], pi, bi, di, dict(p, n=n, dtype=dtype, layout=layout)))
    out.sort(key=lambda t: t[:4])
    return [t[-1] for t in out]


def operand_bytes(item):
    """The largest of the item's input, weight and output in bytes."""
    x = [item["n"], *item["x"]]
    w = item["w"]
    k = w[1] * item["groups"] if item["transposed"] else w[0]
    o = [item["n"], k]
    for d in range(len(x) - 2):
        i, kk = x[d + 2], w[d + 2]
        s, p, dl = item["stride"][d], item["padding"][d], item["dilation"][d]
        if item["transposed"]:
            o.append((i - 1) * s - 2 * p + dl * (kk - 1) + item["output_padding"][d] + 1)
        else:
            o.append((i + 2 * p - dl * (kk - 1) - 1) // s + 1)
    item_size = 4 if item["dtype"] == "float32" else 2

    def numel(v):
        n = 1
        for s in v:
            n *= s
        return n

    return max(numel(x), numel(w), numel(o)) * item_size


def _operands(item, device, dtype=None):
    import torch

    dtype = dtype or getattr(torch, item["dtype"])
    fmt = torch.contiguous_format
    if item["layout"] == "nhwc":
        fmt = torch.channels_last if len(item["w"]) == 4 else torch.channels_last_3d
    # made in the layout, not `.contiguous(memory_format=fmt)`: that keeps a tensor whose spatial
    # sizes are all 1 as it is (already contiguous in both), and its NCHW strides make
    # `cudnn_conv_suggest_memory_format` NCHW, where a channels-last program's pooled (N, C, 1, 1)
    # input and `Module.to(memory_format=...)`'s 1x1 weights suggest channels-last (blind267/jh04)
    x = torch.empty([item["n"], *item["x"]], dtype=dtype, device=device, memory_format=fmt)
    w = torch.empty(item["w"], dtype=dtype, device=device, memory_format=fmt)
    return x, w


def _conv_args(item):
    return (
        item["stride"],
        item["padding"],
        item["dilation"],
        item["transposed"],
        item["output_padding"],
        item["groups"],
    )


def measure(item, device="cuda"):
    """Call the item's forward, dgrad and wgrad under ops_truth.py's mode (its records go to
    ops_truth's output)."""
    import ops_truth
    import torch

    aten = torch.ops.aten
    x, w = _operands(item, device)
    args = _conv_args(item)
    with ops_truth.OpsTruth():
        out = aten.convolution(x, w, None, *args)
    grad = torch.empty_like(out)  # the output's strides, as its gradient arrives in a model
    del out
    with ops_truth.OpsTruth():
        for mask in ([True, False, False], [False, True, False]):
            res = aten.convolution_backward(grad, x, w, None, *args, mask)
            del res


def measure_autocast(item, device="cuda"):
    """The item through `F.conv*` under `torch.autocast(item's dtype)` with float32 operands (and the
    float32 layout) and a real backward: the records ops_truth.py writes for a script that does this."""
    import ops_truth
    import torch
    import torch.nn.functional as F

    x, w = _operands(item, device, torch.float32)
    x.requires_grad_(True)
    w.requires_grad_(True)
    s, p, d, transposed, out_pad, g = _conv_args(item)
    nd = x.dim() - 2
    with ops_truth.OpsTruth():
        with torch.autocast(device, dtype=getattr(torch, item["dtype"])):
            if transposed:
                f = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][nd - 1]
                out = f(x, w, None, s, p, out_pad, g, d)
            else:
                out = [F.conv1d, F.conv2d, F.conv3d][nd - 1](x, w, None, s, p, d, g)
        grad = torch.empty_like(out)
        out.backward(grad)


def _fresh_thread(fn, *args):
    """`fn(*args)` in a new thread: `run_single_conv`'s `benchmark_cache` is `thread_local`
    (cudnn/Conv_v8.cpp), so the thread's convolutions find no plan timed before."""
    import threading

    box = {}

    def target():
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def measure_benchmark(item, device="cuda"):
    """The item's forward, dgrad and wgrad each called twice on fresh operands under ops_truth.py's
    mode, benchmark mode on: {op: [first call's record, second call's]}."""
    import ops_truth
    import torch

    aten = torch.ops.aten
    args = _conv_args(item)
    records = {}

    def call(name, make, fn):
        calls = []
        for _ in range(2):
            res = None
            operands = make()  # fresh, outside the mode
            lines = []
            ops_truth._out = _Lines(lines)
            with ops_truth.OpsTruth():
                res = fn(*operands)
            del operands
            (rec,) = [json.loads(line) for line in lines]  # OPS_TRUTH_ALL: the one op's line
            rec.pop("kwargs", None)
            calls.append(rec)
        records[name] = calls
        return res

    out = call("forward", lambda: _operands(item, device), lambda x, w: aten.convolution(x, w, None, *args))
    grad = torch.empty_like(out)  # the output's strides, as its gradient arrives in a model
    del out
    for name, mask in (("dgrad", [True, False, False]), ("wgrad", [False, True, False])):
        call(
            name,
            lambda: (torch.empty_like(grad), *_operands(item, device)),
            lambda g, x, w, mask=mask: aten.convolution_backward(g, x, w, None, *args, mask),
        )
    return records


def run_benchmark(problems_path, outdir, seconds, worker=0, workers=1, device="cuda", done_dirs=()):
    """`run`'s items under `torch.backends.cudnn.benchmark = True`, one line each (see the module's
    docstring)."""
    import ops_truth  # noqa: F401  (the records' mode)
    import torch

    os.environ["OPS_TRUTH_ALL"] = "1"
    torch.backends.cudnn.benchmark = True
    deadline = seconds if seconds > 1e9 else time.time() + seconds  # an epoch: the same for all
    problems = json.load(open(problems_path))
    every = items(problems)
    skip = reached(done_dirs, len(every))
    todo = [i for i in range(len(every)) if i not in skip][worker::workers]
    os.makedirs(outdir, exist_ok=True)
    err = open(os.path.join(outdir, f"w{worker}.err"), "a", buffering=1)
    out = open(os.path.join(outdir, f"w{worker}.jsonl"), "a", buffering=1)
    done = skipped = 0
    for i, index in enumerate(todo):
        if time.time() > deadline:
            todo_reached = todo[:i]
            break
        item = every[index]
        if operand_bytes(item) > MAX_OPERAND_BYTES:
            skipped += 1
            continue
        free = None
        if device == "cuda":
            torch.cuda.empty_cache()
            free = torch.cuda.mem_get_info(device)[0]
        ooms = torch.cuda.memory_stats(device).get("num_ooms", 0) if device == "cuda" else 0
        try:
            ops = _fresh_thread(measure_benchmark, item, device)
        except Exception as e:  # a problem cuDNN refuses is noted, not fatal
            err.write(json.dumps({"item": item, "error": f"{type(e).__name__}: {str(e)[:200]}"}) + "\n")
            continue
        if device == "cuda" and torch.cuda.memory_stats(device).get("num_ooms", 0) != ooms:
            # the search's workspace was halved (or a plan could not run): not the problem's own
            err.write(json.dumps({"item": item, "error": "out of memory: another plan"}) + "\n")
            continue
        shown = {k: v for k, v in item.items() if k != "models"}
        out.write(json.dumps({"index": index, "item": shown, "free": free, "ops": ops}) + "\n")
        done += 1
    else:
        todo_reached = todo
    summary = {"worker": worker, "done": done, "skipped": skipped, "todo": len(todo), "reached": todo_reached}
    err.write(json.dumps(summary) + "\n")
    return done


def reached(done_dirs, n_items):
    """The indices (in the sweep's order) of the items that the runs into `done_dirs` reached, from the
    summary line each worker wrote last in its w*.err: its `reached` indices, or, from a run that wrote
    none (session 17's), `done` + `skipped` items of every WORKERS-th from WORKER on, WORKERS being the
    number of summaries."""
    import glob

    out = set()
    for d in done_dirs:
        summaries = []
        for path in glob.glob(os.path.join(d, "w*.err")):
            lines = [json.loads(line) for line in open(path) if line.strip()]
            last = [r for r in lines if "worker" in r]
            if not last:
                raise SystemExit(f"{path}: no summary line (the worker did not finish)")
            summaries.append(last[-1])
        for r in summaries:
            if "reached" in r:
                out.update(r["reached"])
            else:
                out.update(range(r["worker"], n_items, len(summaries))[: r["done"] + r["skipped"]])
    return out


def run(problems_path, outdir, seconds, worker=0, workers=1, device="cuda", done_dirs=()):
    import ops_truth
    import torch

    os.environ["OPS_TRUTH_ALL"] = "1"
    deadline = seconds if seconds > 1e9 else time.time() + seconds  # an epoch: the same for all
    problems = json.load(open(problems_path))
    every = items(problems)
    skip = reached(done_dirs, len(every))
    todo = [i for i in range(len(every)) if i not in skip][worker::workers]
    cache_cap = (
        CACHE_SHARE * torch.cuda.get_device_properties(device).total_memory / workers
        if device == "cuda"
        else 0
    )
    os.makedirs(os.path.join(outdir, "autocast"), exist_ok=True)
    err = open(os.path.join(outdir, f"w{worker}.err"), "a", buffering=1)
    out = open(os.path.join(outdir, f"w{worker}.jsonl"), "a", buffering=1)
    auto = open(os.path.join(outdir, "autocast", f"w{worker}.jsonl"), "a", buffering=1)
    done = skipped = 0
    for i, index in enumerate(todo):
        if time.time() > deadline:
            todo_reached = todo[:i]
            break
        item = every[index]
        if operand_bytes(item) > MAX_OPERAND_BYTES:
            skipped += 1
            continue
        via_autocast = item["dtype"] != "float32" and i % 97 == 0
        for fn, dest in [(measure, out)] + [(measure_autocast, auto)] * via_autocast:
            lines = []
            ops_truth._out = _Lines(lines)
            ooms = torch.cuda.memory_stats(device).get("num_ooms", 0) if device == "cuda" else 0
            try:
                fn(item, device)
            except Exception as e:  # a problem cuDNN refuses is noted, not fatal
                err.write(json.dumps({"item": item, "error": f"{type(e).__name__}: {str(e)[:200]}"}) + "\n")
                continue
            if device == "cuda" and torch.cuda.memory_stats(device).get("num_ooms", 0) != ooms:
                err.write(json.dumps({"item": item, "error": "out of memory: another plan"}) + "\n")
                torch.cuda.empty_cache()
                continue
            dest.write("".join(lines))
        done += 1
        if device == "cuda" and torch.cuda.memory_reserved(device) > cache_cap:
            torch.cuda.empty_cache()  # the workers share the GPU: keep each one's cache bounded
    else:
        todo_reached = todo
    summary = {"worker": worker, "done": done, "skipped": skipped, "todo": len(todo), "reached": todo_reached}
    err.write(json.dumps(summary) + "\n")
    return done


class _Lines:
    """A file-like sink for ops_truth's records."""

    def __init__(self, lines):
        self.lines = lines

    def write(self, s):
        self.lines.append(s)


def split_key(key):
    """A problem's key (conv_table.py's line without the bytes) as the table's key without the batch
    (the input's sizes lose their first) and the batch."""
    f = key.split(" ")
    x = f[4].split(",") if len(f) == 11 else []
    if len(x) < 2:
        raise ValueError(f"not a convolution problem's key: {key!r}")
    return " ".join([*f[:4], ",".join(x[1:]), *f[5:]]), int(x[0])


def join_key(group, n):
    """`split_key`'s inverse."""
    f = group.split(" ")
    return " ".join([*f[:4], f"{n},{f[4]}", *f[5:]])


def open_text(path):
    """A text file, read through xz where its name ends in `.xz` (the table is stored so)."""
    return lzma.open(path, "rt") if str(path).endswith(".xz") else open(path)


def read_table(path):
    """(header lines, {problem key: bytes}) from the table (`KEY | N:BYTES ...` lines, KEY without the
    batch) or from conv_table.py's output (`KEY BYTES` lines, the batch in KEY)."""
    header, table = [], {}
    for line in open_text(path):
        line = line.rstrip("\n")
        if line.startswith("#"):
            header.append(line)
        elif " | " in line:
            group, pairs = line.split(" | ")
            for pair in pairs.split(" "):
                n, b = pair.split(":")
                table[join_key(group, int(n))] = int(b)
        elif line.strip():
            key, b = line.rsplit(" ", 1)
            table[key] = int(b)
    return header, table


def table_lines(table):
    """{problem key: bytes} as the table's lines: one for each problem without its batch, sorted by
    that key (the engine binary-searches it), then its batches' bytes, by batch."""
    groups = {}
    for key, b in table.items():
        group, n = split_key(key)
        groups.setdefault(group, []).append((n, b))
    return [f"{g} | " + " ".join(f"{n}:{b}" for n, b in sorted(groups[g])) for g in sorted(groups)]


def expand_key(key):
    """A problem's key (with or without its batch) with each one-value stride, padding, dilation and
    output_padding written once for every spatial dimension (the weight's sizes less two), as
    Convolution.cpp's `expand_param_if_needed` passes them to cuDNN (`convolution`,
    `convolution_backward`) and the twin looks them up (_kernels/conv.py `_conv`, 55cfc8f); HF's
    SigLIP patch embedding (padding="valid": `_convolution_mode` passes `{0}`), EDM2's
    `padding=(k // 2,)` and torch.nn.grad's `output_padding [0]` call with one value."""
    f = key.split(" ")
    if len(f) != 11:
        raise ValueError(f"not a convolution problem's key: {key!r}")
    nd = len(f[5].split(",")) - 2
    f[6:10] = [",".join([v] * nd) if "," not in v else v for v in f[6:10]]
    return " ".join(f)


def normalize(table):
    """`table` ({problem key: bytes}) with `expand_key`ed keys, and the counts of keys expanded to a
    key not there, expanded to one there with the same bytes (dropped) and with other bytes (printed on
    stderr; the expanded key's bytes kept: those the twin has been reading)."""
    out = {key: b for key, b in table.items() if expand_key(key) == key}
    expanded = agree = conflicts = 0
    for key, b in table.items():
        full = expand_key(key)
        if full == key:
            continue
        if full not in out:
            out[full] = b
            expanded += 1
        elif out[full] == b:
            agree += 1
        else:
            conflicts += 1
            print(f"conflict: {key} expands to {full}: {b}, there {out[full]}", file=sys.stderr)
    return out, expanded, agree, conflicts


def merge(table_path, *sources, correct=False):
    """The table's lines plus the sources' new ones (conv_table.py's output, or a table), in the table's
    format (header kept); a problem the table or an earlier source holds keeps its bytes, a
    disagreement goes to stderr. With `correct` the sources' bytes replace the table's where they
    disagree (for lines the table took from records since found misread: fixtures/run/README.md)."""
    header, table = read_table(table_path)
    table, *counts = normalize(table)
    if any(counts):
        print(
            "{} one-value keys in the table expanded: {} new, {} agreeing, {} conflicting".format(
                sum(counts), *counts
            ),
            file=sys.stderr,
        )
    old = len(table)
    agree = conflicts = 0
    for path in sources:
        for key, b in normalize(read_table(path)[1])[0].items():
            if key in table:
                if table[key] == b:
                    agree += 1
                else:
                    conflicts += 1
                    print(f"conflict: {key}: table {table[key]}, sweep {b}", file=sys.stderr)
                    if correct:
                        table[key] = b
            else:
                table[key] = b
    print(
        f"{old} lines in the table, {len(table) - old} new from the sweep, {agree} agreeing, "
        f"{conflicts} conflicting",
        file=sys.stderr,
    )
    return header + table_lines(table)


def affine(table_path, h100_path=None):
    """Leave-one-out test of 'the workspace is affine in the batch between measured batches', on the
    table's problems (batch left out) and, if given, the H100's batch sweeps of patch embeddings
    (fixtures/ops/conv_workspace_h100.jsonl.xz, every batch 1..128 or more): prints the counts."""
    groups, h100 = {}, {}
    for key, b in read_table(table_path)[1].items():
        group, n = split_key(key)
        groups.setdefault(group, {})[n] = b
    if h100_path:
        for line in lzma.open(h100_path, "rt") if h100_path.endswith(".xz") else open(h100_path):
            r = json.loads(line)
            key = f"{r['op']} {r['dtype']} {r['weight']} {r['image']} {r['stride']}"
            for n, b in r["workspace"]:
                h100.setdefault(key, {})[n] = b
    for name, g in [("H200 table", groups), ("H100 batch sweeps", h100)]:
        for strict in (False, True):
            if g:
                loo(name, g, strict)


def loo(name, groups, strict):
    """For each measured batch n of a problem with measured batches a < n < b next to it: the rule
    predicts the line through a and b if a third measured batch (the next below a or above b; with
    `strict`, both) lies on it. Prints how many held-out batches it predicts exactly and misses."""
    hit = nonzero = 0
    misses = []
    for key, pts in groups.items():
        ns = sorted(pts)
        for i, n in enumerate(ns):
            rest = ns[:i] + ns[i + 1 :]
            lo = [m for m in rest if m < n]
            hi = [m for m in rest if m > n]
            if not lo or not hi:
                continue
            a, b = lo[-1], hi[0]
            if (pts[b] - pts[a]) % (b - a):
                continue
            slope = (pts[b] - pts[a]) // (b - a)
            third = [m for m in (lo[-2] if len(lo) > 1 else None, hi[1] if len(hi) > 1 else None) if m]
            on = [pts[a] + slope * (m - a) == pts[m] for m in third]
            if not (len(on) == 2 and all(on) if strict else any(on)):
                continue
            pred = pts[a] + slope * (n - a)
            if pred == pts[n]:
                hit += 1
                nonzero += pred != 0
            else:
                misses.append((abs(pred - pts[n]), key, n, pts[n], pred))
    misses.sort(reverse=True)
    big = sum(1 for m in misses if m[0] >= 1 << 20)
    rule = "four points" if strict else "three points"
    print(f"{name} ({len(groups)} problems), {rule}: {hit} held-out batches exact ({nonzero} not 0),")
    print(f"  {len(misses)} missed ({big} by 1 MiB or more)")
    for m in misses[:3]:
        print(f"  e.g. {m[1]} at batch {m[2]}: {m[3]} bytes, the rule {m[4]}")
    return hit, misses


def smoke():
    """The run's code path on the CPU (no counters there: the records say 0 bytes)."""
    import tempfile

    import ops_truth

    problems = extract(
        [
            (0, "m5", _audio_m5, [(1, 4000)]),
            (0, "dcgan", _dcgan, [(100, 1, 1)]),
            (1, "resnet18", _tv("resnet18"), [(3, 32, 32)]),
        ]
    )
    print(len(problems), "problems;", len(items(problems)), "items")
    with tempfile.TemporaryDirectory() as d:
        json.dump(problems, open(os.path.join(d, "p.json"), "w"))
        run(os.path.join(d, "p.json"), d, 20, 0, 50, device="cpu")
        recs = [json.loads(line) for line in open(os.path.join(d, "w0.jsonl"))]
        print(len(recs), "records:", sorted({r["op"] for r in recs}))
        print(open(os.path.join(d, "w0.err")).read().strip())
        bench = os.path.join(d, "benchmark")
        run_benchmark(os.path.join(d, "p.json"), bench, 20, 0, 50, device="cpu")
        lines = [json.loads(line) for line in open(os.path.join(bench, "w0.jsonl"))]
        print(len(lines), "benchmark items:", sorted(lines[0]["ops"]), "two calls each")
        print(open(os.path.join(bench, "w0.err")).read().strip())
        import conv_benchmark_table

        entries = conv_benchmark_table.sweep_problems([bench])
        print(len(entries), "benchmark entries, e.g.", entries[0])
        item = dict(problems[0], n=2, dtype="bfloat16", layout="nchw")
        ops_truth._out = open(os.path.join(d, "autocast", "w0.jsonl"), "w")
        measure_autocast(item, "cpu")
        ops_truth._out.close()
        import conv_table

        for sub in ("", "autocast"):
            lines = conv_table.read(os.path.join(d, sub), os.path.join(d, sub))
            print(sub or "direct", len(lines), "lines, e.g.", next(iter(lines.items())))


def main():
    sys.path.insert(0, HERE)
    cmd = sys.argv[1]
    if cmd == "problems":
        problems = extract()
        if sys.argv[3:] in (["2"], ["3"]):
            # the second (third) list's problems that the earlier lists lack
            earlier = problems + (extract(MODELS2) if sys.argv[3] == "3" else [])
            seen = {
                json.dumps({k: p[k] for k in p if k not in ("tier", "models")}, sort_keys=True)
                for p in earlier
            }
            problems = [
                p
                for p in extract(MODELS2 if sys.argv[3] == "2" else zoo_models())
                if json.dumps({k: p[k] for k in p if k not in ("tier", "models")}, sort_keys=True) not in seen
            ]
        json.dump(problems, open(sys.argv[2], "w"))
        n = len(items(problems))
        print(f"{len(problems)} problems, {n} items ({3 * n} op calls)", file=sys.stderr)
    elif cmd == "run":
        worker, workers = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (0, 1)
        done_dirs = sys.argv[7].split(",") if len(sys.argv) > 7 else ()
        run(sys.argv[2], sys.argv[3], float(sys.argv[4]), worker, workers, done_dirs=done_dirs)
    elif cmd == "run-benchmark":
        worker, workers = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (0, 1)
        done_dirs = sys.argv[7].split(",") if len(sys.argv) > 7 else ()
        run_benchmark(sys.argv[2], sys.argv[3], float(sys.argv[4]), worker, workers, done_dirs=done_dirs)
    elif cmd == "smoke":
        smoke()
    elif cmd in ("merge", "normalize"):
        correct = cmd == "merge" and sys.argv[2] == "--correct"
        table, *sources = sys.argv[2 + correct :]
        if cmd == "normalize" and sources:
            sys.exit(__doc__)
        text = "\n".join(merge(table, *sources, correct=correct)) + "\n"
        if table.endswith(".xz"):  # the engine's table: rewritten in place, compressed as it was
            with lzma.open(table, "wt", preset=9 | lzma.PRESET_EXTREME) as f:
                f.write(text)
        else:
            sys.stdout.write(text)
    elif cmd == "affine":
        affine(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
