#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_run/go_s39.sh` -> DIR/s39.tar.xz (session 39).
# blind54/bb01's memory history with Python frames (where each micro-batch's OOM is raised, and what
# its handler's empty_cache() releases), and blind163/fg01 op by op with /proc/self/maps (first 12,000
# ops: its host-built models' bf16 conversion and first DPO step) beside its memory history alone.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/r; mkdir -p $R
B=$(ls validation/run/blind54/bb01_*.py)
F=$(ls validation/run/blind163/fg01_*.py)
P=validation/va_run_maps.py
STACKS=python OUT_PICKLE=$R/bb01.pickle timeout 150 python3 validation/run/history.py $B > $R/bb01.out 2>&1 &
OUT=$R/fg01.m MAX_OPS=12000 timeout 150 python3 $P $F > $R/fg01.m.out 2>&1 &
OUT=$R/fg01.h NO_MAPS=1 timeout 150 python3 $P $F > $R/fg01.h.out 2>&1 &
wait
nproc > $R/nproc.txt
cd $OUT && tar cJf s39.tar.xz r && rm -rf r && ls -la
