"""Probe (session 67, helper na): Inductor's timed pad_mm choices in blind283/jx05, run as it is.

blind283/jx05 (timm CSATv2, `torch.compile`, bf16 autocast, batch 64 x 3 x 512 x 512) ends its phases
with requested bytes equal to the H100's but allocated +2,449,408 and reserved -37,748,736 in the
twin (na-s67, with the compiled list index's constant lowered as the GPU's): the twin's end snapshot
holds 20 oversized blocks (a 2,383,936-byte fp32 (1544, 386) or 1,185,792-byte (768, 386) tensor in a
larger block: the compiled backward's gradients and Lion's `exp_avg`), so the blocks lie otherwise.
Inductor's pad_mm (torch/_inductor/fx_passes/pad_mm.py) times 29 matmuls of the graphs (CSATv2's
386-wide transformer: K, N or M = 386 in bf16) and pads those where the padded one is faster
(`is_padded_faster`: ori_time > 1.1 x pad_time); the twin takes each as not padded. A padded matmul
changes the graph's buffers (`constant_pad_nd` copies, sliced outputs), so where the gradients and
`exp_avg` go.

Runs the blind script unchanged (runpy) with `pad_mm.is_padded_faster` wrapped: one line per timed
choice, `pad KEY -> padded BOOL ori_ms pad_ms` (KEY: `should_pad_bench_key`'s mat1, mat2 (shape,
stride, dtype), exclude-padding flags, op, input), then the script's own lines. A fresh Inductor cache
directory, so no choice comes from an earlier run's cache. Run under history.py for the allocator
history as well (request: /work/notes/req67/na.md). ~110 s on the H100 (the blind run: 105 s), < 5 GB.
The twin times nothing: it prints no `pad` line (each choice taken as not padded).
"""

import os
import runpy
import sys
import tempfile

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="na67_inductor_")
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(
    HERE,
    "..",
    "blind283",
    "jx05_timm_csatv2_dct_stem_built_on_cuda_fft_linalg_inv_torch_compile_bf16_channels_last_cautious_lion_"
    "model_ema_v3_gpu_mixup_cutmix_then_ema_eager_inference_mode_eval.py",
)

from torch._inductor.fx_passes import pad_mm  # noqa: E402

original = pad_mm.is_padded_faster


def is_padded_faster(key, ori_time, pad_time):
    padded = original(key, ori_time, pad_time)
    print("pad", key, "-> padded", padded, f"{ori_time:.4f}", f"{pad_time:.4f}", flush=True)
    return padded


pad_mm.is_padded_faster = is_padded_faster
sys.argv = [SCRIPT]
runpy.run_path(SCRIPT, run_name="__main__")
