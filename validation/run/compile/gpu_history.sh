#!/bin/bash
# Session 15 (HTC): c01-c03 of validation/run/compile on the GPU, each twice at once: the allocator's
# history (memory_history.py -> snap/NAME.pickle) and the per-op truth (ops_truth_compiled.py ->
# ops/NAME.jsonl). Ran on the H200 as xfer/htc/gpu2.sh with T=90 (the same, these two scripts under
# other names); its output is
# fixtures/run/truth_compile_h200.tar.xz.
set -u
cd "$(dirname "$0")/../../.."
C=$(pwd)/validation/run/compile
export PYTHONUNBUFFERED=1
unset PYTORCH_CUDA_ALLOC_CONF
W=/tmp/w; mkdir -p $W/snap $W/ops
for n in c01_mlp_compile_adamw c02_nanogpt_compile_autocast c03_resnet18_compile_train; do
  ( cd $C && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_s_$n SNAP=$W/snap/$n.pickle timeout -k 5 ${T:-100} python3 $C/memory_history.py $C/$n.py > $W/snap/$n.out 2> $W/snap/$n.err; echo "snap $n rc=$? $SECONDS" >> $W/summary.txt ) &
  ( cd $C && TORCHINDUCTOR_CACHE_DIR=/tmp/ind_o_$n OUT_JSONL=$W/ops/$n.jsonl timeout -k 5 ${T:-100} python3 $C/ops_truth_compiled.py $C/$n.py > $W/ops/$n.out 2> $W/ops/$n.err; echo "ops $n rc=$? $SECONDS" >> $W/summary.txt ) &
done
wait
cd $W && tar czf $OUT/htc15.tgz snap ops summary.txt && cat summary.txt
