#!/bin/bash
# HTC session 14 (run from xfer/htc/, scripts in xfer/htc/compile/): validation/run/compile
# (4 compiled scripts) recorded on the H200, compiled and
# with TORCH_COMPILE_DISABLE=1 (eager), all eight processes at once (per-process allocator figures)
set -u
cd "$(dirname "$0")/../../.."
R=$(pwd)/validation/run
H=$(pwd)/validation/run
export PYTHONUNBUFFERED=1
unset PYTORCH_CUDA_ALLOC_CONF
W=/tmp/w; mkdir -p $W/rec $W/eager $W/code
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())" > $W/env.txt 2>&1
for f in $H/compile/c0*.py; do
  n=$(basename $f .py)
  ( cd $H/compile && TORCHINDUCTOR_CACHE_DIR=$W/ind_$n OUT_JSONL=$W/rec/$n.jsonl timeout -k 5 ${T:-110} python3 $R/record.py $f > $W/rec/$n.out 2> $W/rec/$n.err; echo "$n rc=$? $SECONDS" >> $W/rec/summary.txt ) &
  ( cd $H/compile && TORCH_COMPILE_DISABLE=1 OUT_JSONL=$W/eager/$n.jsonl timeout -k 5 ${T:-110} python3 $R/record.py $f > $W/eager/$n.out 2> $W/eager/$n.err; echo "$n rc=$? $SECONDS" >> $W/eager/summary.txt ) &
done
wait
for d in $W/ind_*; do n=$(basename $d); mkdir -p $W/code/$n; grep -rl "def call(self, args)" $d 2>/dev/null | head -20 | while read p; do cp $p $W/code/$n/; done; done
cd $W && tar czf $OUT/htc.tgz rec eager code env.txt && ls -la $OUT && cat rec/summary.txt eager/summary.txt
