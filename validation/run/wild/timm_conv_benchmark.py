"""cuDNN benchmark-mode searches of timm's train.py runs (validation/run/wild/programs.py), on an H200.

    python validation/run/wild/timm_conv_benchmark.py OUTDIR [SECONDS]          (GPU; default 480 s)
    python validation/run/conv_benchmark_table.py python/vramscope/cudnn_benchmark_h200.json.xz \
        --sweep OUTDIR | xz -9e > T.xz                                          (here; then T.xz over it)

The twin answers the timm_train_* programs with `unmeasured` "cuDNN's benchmark mode ...: the search's
workspace and the timed plan's" (or "estimated on the line through the problem's measured batches"):
the convolution problems below are not in `cudnn_benchmark_h200.json.xz`, so the first call of each
allocates no search workspace and the heuristics' plan stands in for the timed one. Session 57's
records (/work/gpu_s57/wild/programs/gpu.jsonl) show what that costs: the twin's peak of
timm_train_vit_small_grad_checkpointing_layer_decay_bce_ema_warmup is 67,762,176 bytes under the
GPU's. With gradient checkpointing the activations are small, and the first step's wgrad of the patch
embedding (input 16x3x224x224, weight 384x3x16x16, fp16, stride 16; the last op of the backward) sets
the peak: giving that search 312,598,016 bytes in the twin (a probe, not a table entry) reproduces
both the GPU's peak_allocated (679,553,024) and its peak_reserved (853,540,864: a 150 x 2 MiB
segment), where 312,000,000 gives 2 MiB less reserved. The measured value is what this script gets.

The items (batch, dtype, layout, input without batch, weight, stride, padding, dilation, groups) are
those the twin met unmeasured or estimated in the seven timm_train_* runs of session 57 (read with a
probe over `_kernels/conv._benchmark_entry`), the patch embeddings first. Each runs through
`conv_sweep.run_benchmark` (forward, dgrad, wgrad, each twice on fresh operands in a fresh thread,
the cache emptied before each item), so the lines are conv_sweep.py's `run-benchmark` lines.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import conv_sweep  # noqa: E402

ITEMS = [
    [16, "float16", "nchw", [3, 224, 224], [384, 3, 16, 16], [16, 16], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [3, 224, 224], [192, 3, 16, 16], [16, 16], [0, 0], [1, 1], 1],
    [16, "bfloat16", "nchw", [3, 224, 224], [384, 3, 16, 16], [16, 16], [0, 0], [1, 1], 1],
    [16, "float32", "nchw", [3, 224, 224], [384, 3, 16, 16], [16, 16], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [672, 7, 7], [192, 672, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [1152, 7, 7], [192, 1152, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [24, "float16", "nchw", [3, 224, 224], [64, 3, 7, 7], [2, 2], [3, 3], [1, 1], 1],
    [24, "float16", "nchw", [64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [64, 56, 56], [128, 64, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [128, 28, 28], [128, 128, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [64, 56, 56], [128, 64, 1, 1], [2, 2], [0, 0], [1, 1], 1],
    [24, "float16", "nchw", [128, 28, 28], [256, 128, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [256, 14, 14], [256, 256, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [128, 28, 28], [256, 128, 1, 1], [2, 2], [0, 0], [1, 1], 1],
    [24, "float16", "nchw", [256, 14, 14], [512, 256, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [512, 7, 7], [512, 512, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [24, "float16", "nchw", [256, 14, 14], [512, 256, 1, 1], [2, 2], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [3, 224, 224], [32, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [32, 112, 112], [32, 1, 3, 3], [1, 1], [1, 1], [1, 1], 32],
    [16, "float16", "nchw", [32, 1, 1], [8, 32, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [8, 1, 1], [32, 8, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [32, 112, 112], [16, 32, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [16, 112, 112], [96, 16, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [96, 112, 112], [96, 1, 3, 3], [2, 2], [1, 1], [1, 1], 96],
    [16, "float16", "nchw", [96, 1, 1], [4, 96, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [4, 1, 1], [96, 4, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [96, 56, 56], [24, 96, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [24, 56, 56], [144, 24, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [144, 56, 56], [144, 1, 3, 3], [1, 1], [1, 1], [1, 1], 144],
    [16, "float16", "nchw", [144, 1, 1], [6, 144, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [6, 1, 1], [144, 6, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [144, 56, 56], [24, 144, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [144, 56, 56], [144, 1, 5, 5], [2, 2], [2, 2], [1, 1], 144],
    [16, "float16", "nchw", [144, 28, 28], [40, 144, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [40, 28, 28], [240, 40, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [240, 28, 28], [240, 1, 5, 5], [1, 1], [2, 2], [1, 1], 240],
    [16, "float16", "nchw", [240, 1, 1], [10, 240, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [10, 1, 1], [240, 10, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [240, 28, 28], [40, 240, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [240, 28, 28], [240, 1, 3, 3], [2, 2], [1, 1], [1, 1], 240],
    [16, "float16", "nchw", [240, 14, 14], [80, 240, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [80, 14, 14], [480, 80, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [480, 14, 14], [480, 1, 3, 3], [1, 1], [1, 1], [1, 1], 480],
    [16, "float16", "nchw", [480, 1, 1], [20, 480, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [20, 1, 1], [480, 20, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [480, 14, 14], [80, 480, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [480, 14, 14], [480, 1, 5, 5], [1, 1], [2, 2], [1, 1], 480],
    [16, "float16", "nchw", [480, 14, 14], [112, 480, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [112, 14, 14], [672, 112, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [672, 14, 14], [672, 1, 5, 5], [1, 1], [2, 2], [1, 1], 672],
    [16, "float16", "nchw", [672, 1, 1], [28, 672, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [28, 1, 1], [672, 28, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [672, 14, 14], [112, 672, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [672, 14, 14], [672, 1, 5, 5], [2, 2], [2, 2], [1, 1], 672],
    [16, "float16", "nchw", [192, 7, 7], [1152, 192, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [1152, 7, 7], [1152, 1, 5, 5], [1, 1], [2, 2], [1, 1], 1152],
    [16, "float16", "nchw", [1152, 1, 1], [48, 1152, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [48, 1, 1], [1152, 48, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [1152, 7, 7], [1152, 1, 3, 3], [1, 1], [1, 1], [1, 1], 1152],
    [16, "float16", "nchw", [1152, 7, 7], [320, 1152, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [320, 7, 7], [1280, 320, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [3, 224, 224], [64, 3, 7, 7], [2, 2], [3, 3], [1, 1], 1],
    [16, "float16", "nchw", [64, 56, 56], [64, 64, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [64, 56, 56], [256, 64, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [256, 56, 56], [64, 256, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [256, 56, 56], [128, 256, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [128, 56, 56], [128, 128, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [128, 28, 28], [512, 128, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [256, 56, 56], [512, 256, 1, 1], [2, 2], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [512, 28, 28], [128, 512, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [128, 28, 28], [128, 128, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [512, 28, 28], [256, 512, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [256, 28, 28], [256, 256, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [256, 14, 14], [1024, 256, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [512, 28, 28], [1024, 512, 1, 1], [2, 2], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [1024, 14, 14], [256, 1024, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [256, 14, 14], [256, 256, 3, 3], [1, 1], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [1024, 14, 14], [512, 1024, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [512, 14, 14], [512, 512, 3, 3], [2, 2], [1, 1], [1, 1], 1],
    [16, "float16", "nchw", [512, 7, 7], [2048, 512, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [1024, 14, 14], [2048, 1024, 1, 1], [2, 2], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [2048, 7, 7], [512, 2048, 1, 1], [1, 1], [0, 0], [1, 1], 1],
    [16, "float16", "nchw", [512, 7, 7], [512, 512, 3, 3], [1, 1], [1, 1], [1, 1], 1],
]


def items(_problems=None):
    """The sweep's items in `conv_sweep.items`' form (a problem with n, dtype and layout)."""
    out = []
    for n, dtype, layout, x, w, stride, padding, dilation, groups in ITEMS:
        p = {
            "x": x,
            "w": w,
            "stride": stride,
            "padding": padding,
            "dilation": dilation,
            "transposed": False,
            "output_padding": [0] * len(stride),
            "groups": groups,
            "tier": 0,
            "models": ["timm_train"],
        }
        out.append(dict(p, n=n, dtype=dtype, layout=layout))
    return out


def main():
    outdir = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 480.0
    device = os.environ.get("DEVICE", "cuda")
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "problems.json")
    json.dump([], open(path, "w"))
    conv_sweep.items = items  # run_benchmark takes its order from here
    done = conv_sweep.run_benchmark(path, outdir, seconds, device=device)
    print(done, "of", len(ITEMS), "items measured; lines in", os.path.join(outdir, "w0.jsonl"))


if __name__ == "__main__":
    main()
