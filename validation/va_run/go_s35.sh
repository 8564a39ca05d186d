#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_run/go_s35.sh` -> DIR/eq04_maps.tar.xz (session 35; fixtures/va_maps/eq04_omp_s35_h200.tar.xz keeps its segments, first 2,000 events and maps).
# blind147/eq04 op by op with /proc/self/maps (first 4,000 ops), its memory history alone,
# and its memory history alone with OMP_NUM_THREADS=1 (whether OpenMP's workers move the segments)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/r; mkdir -p $R
S=$(ls validation/run/blind147/eq04_*.py)
P=validation/va_run_maps.py
OUT=$R/eq04.m MAX_OPS=4000 timeout 120 python3 $P $S > $R/eq04.m.out 2>&1 &
OUT=$R/eq04.h NO_MAPS=1 timeout 120 python3 $P $S > $R/eq04.h.out 2>&1 &
OMP_NUM_THREADS=1 OUT=$R/eq04.h1 NO_MAPS=1 timeout 120 python3 $P $S > $R/eq04.h1.out 2>&1 &
wait
nproc > $R/nproc.txt
cd $OUT && tar cJf eq04_maps.tar.xz r && rm -rf r && ls -la
