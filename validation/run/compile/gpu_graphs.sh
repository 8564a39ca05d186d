#!/bin/bash
# Session 22 (issue #31), as xfer/graphs/go.sh with T=165 (the scripts, record.sh, record.py and
# memory_history.py copied beside it): c05-c09 recorded (record.sh) and their allocator histories
# (memory_history.py), and t01's history, all at once on one H200, each process with its own
# Inductor cache (cold, as the twin takes it) and 2 compile workers.
set -u
X="$(cd "$(dirname "$0")" && pwd)"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TORCHINDUCTOR_COMPILE_THREADS=2
unset PYTORCH_CUDA_ALLOC_CONF
W=/tmp/w; rm -rf $W; mkdir -p $W/snap $W/rec
T=${T:-170}
for n in c05_reduce_overhead_mlp_inference c06_reduce_overhead_train_step c07_reduce_overhead_kept_outputs c08_reduce_overhead_two_modules_train c09_hf_llama_static_cache_generate; do
  (TORCHINDUCTOR_CACHE_DIR=/tmp/ind_r_$n TIMEOUT=$T bash $X/record.sh $W/rec/$n $X/$n.py > $W/rec/$n.log 2>&1; echo "rec $n $SECONDS" >> $W/summary.txt) &
  (cd $X && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s_$n SNAP=$W/snap/$n.pickle timeout -k 5 $T python3 $X/memory_history.py $X/$n.py > $W/snap/$n.out 2> $W/snap/$n.err; echo "snap $n rc=$? $SECONDS" >> $W/summary.txt) &
done
n=t01_hf_llama_static_cache_batch1
(cd $X && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s_$n SNAP=$W/snap/$n.pickle timeout -k 5 $T python3 $X/memory_history.py $X/$n.py > $W/snap/$n.out 2> $W/snap/$n.err; echo "snap $n rc=$? $SECONDS" >> $W/summary.txt) &
wait
cat $W/rec/*/c0*.jsonl > $OUT/run_compile_graphs_h200.jsonl
cp $W/rec/c05_reduce_overhead_mlp_inference/env.json $OUT/env.json
cd $W && tar czf $OUT/graphs.tgz . && cat summary.txt && ls -la $OUT
