#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_run/go_s41.sh` -> DIR/s41.tar.xz (session 41).
# nested_bf16_probe_s40 op by op with /proc/self/maps (its host-built encoder's deepcopy, the move to
# the device and the first chunks) beside its memory history alone; blind175/fs03 likewise for its
# first 20,000 ops.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/r; mkdir -p $R
N=validation/run/nested_bf16_probe_s40.py
F=$(ls validation/run/blind175/fs03_*.py)
P=validation/va_run_maps.py
OUT=$R/nb.m MAX_OPS=5000 timeout 150 python3 $P $N > $R/nb.m.out 2>&1 &
OUT=$R/nb.h NO_MAPS=1 timeout 150 python3 $P $N > $R/nb.h.out 2>&1 &
OUT=$R/fs03.m MAX_OPS=20000 timeout 150 python3 $P $F > $R/fs03.m.out 2>&1 &
OUT=$R/fs03.h NO_MAPS=1 timeout 150 python3 $P $F > $R/fs03.h.out 2>&1 &
wait
nproc > $R/nproc.txt
cd $OUT && tar cJf s41.tar.xz r && rm -rf r && ls -la
