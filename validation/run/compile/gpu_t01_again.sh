#!/bin/bash
# Session 22 (issue #31), as xfer/graphs/go2.sh (record.sh, record.py and the script copied beside
# it): blind20/t01 recorded again (record.sh) on one H200, twice at once: default
# Inductor compile workers, and 2 (as gpu_graphs.sh ran its history), each with its own cold cache.
set -u
X="$(cd "$(dirname "$0")" && pwd)"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
W=/tmp/w2; rm -rf $W; mkdir -p $W
n=t01_hf_llama_static_cache_batch1
(TORCHINDUCTOR_CACHE_DIR=/tmp/ind_t1 TIMEOUT=150 bash $X/record.sh $W/default $X/$n.py > $W/default.log 2>&1) &
(TORCHINDUCTOR_COMPILE_THREADS=2 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_t2 TIMEOUT=150 bash $X/record.sh $W/threads2 $X/$n.py > $W/threads2.log 2>&1) &
wait
for d in default threads2; do sed "s/\"script\": \"$n\"/\"script\": \"$n\", \"run\": \"$d\"/" $W/$d/$n.jsonl; done > $OUT/run_t01_again_h200.jsonl
cat $W/*/summary.jsonl; cat $OUT/run_t01_again_h200.jsonl
