#!/bin/bash
# On a GPU (H200), from the repo root: `OUT=DIR bash validation/va_host_built/go_s59_iy03.sh` -> DIR/hb59.tar.xz
# (session 59, helper pr; not run yet). blind258/iy03's phase 0: the H200's memory history
# (/work/gpu_s59/probes/iy03_phase0.pickle) parts from the twin's at segment 6, which the twin puts at
# B+352 MiB in the host-built ViT's freed range (rule 11) and the H200 at B-648 (rule 1); the H200's
# first chunk above the context is segment 10 at B+544 (32 mod 64 MiB: the top half of a 64 MiB
# aligned hole). The suspect: `torch.zeros(1, 197, 768)` (the ViT's `pos`, 151,296 elements) is the
# first parallel host loop, before the context: OpenMP's 15 stacks and the arenas of the workers with
# a share (rule 15, session 41: "workers started before the context", not laid out by the twin), so
# the blocks' tensors fill the 64 MiB holes between the arenas and no freed range of 64 MiB exists
# until a whole hole is freed. This reads /proc/self/maps before the context and at every change of
# reserved memory (validation/va_host_built.py) over the script's first 66 lines, twice: as is, and
# with OMP_NUM_THREADS=1 (no workers: the twin's rule 11 layout should then hold).
export PYTHONUNBUFFERED=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/h; mkdir -p $R
f=$(ls validation/run/blind258/iy03_*.py | head -1)
head -66 "$f" > $R/iy03_head.py
OUT=$R/iy03 MAX_SEGS=40 timeout 120 python3 validation/va_host_built.py $R/iy03_head.py > $R/iy03.out 2>&1
OMP_NUM_THREADS=1 OUT=$R/iy03_omp1 MAX_SEGS=40 timeout 120 python3 validation/va_host_built.py $R/iy03_head.py > $R/iy03_omp1.out 2>&1
nproc > $R/nproc.txt
cd $OUT && tar cJf hb59.tar.xz h && rm -rf h && ls -la
