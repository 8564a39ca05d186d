#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_modules/go.sh` (session 15, issue #31).
# 1. validation/va_modules.py: each op alone in a fresh process under validation/malloc_log.c
#    (-> fixtures/va_maps/modules_h200.tar.xz, the logs' marks and libcuda's requests kept);
# 2. validation/va_host_built.py over blind43/aq04, blind44/ar01 and blind3/c01, at once
#    (-> fixtures/va_maps/host_built_s15_h200.tar.xz).
# malloc_log.c logs its own process only (it unsets LD_PRELOAD), so it is preloaded into python3
# itself: the session-15 run preloaded it into `timeout`, and its logs of whole scripts were empty.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/r; mkdir -p $R/h $R/m
gcc -O2 -shared -fPIC -o $R/ml.so validation/malloc_log.c -ldl || exit 2
V=validation/run
for s in blind43/aq04_perceiver_cross_attention_checkpoint_bf16 blind44/ar01_hf_bert_qa_fp16_variable_lengths_inference blind3/c01_hf_qwen3_train_bf16_gc; do
  n=$(basename $s | cut -d_ -f1)
  OUT=$R/h/$n MAX_SEGS=200 timeout 100 python3 validation/va_host_built.py $V/$s.py > $R/h/$n.out 2>&1 &
done
python3 -c "
import re; print('\n'.join(re.findall(r'\"([a-z0-9_]+)\": lambda', open('validation/va_modules.py').read())))" > $R/names.txt
export R
timeout 150 xargs -P 14 -I{} sh -c 'MALLOC_LOG=$R/m/one_{}.mlog LD_PRELOAD=$R/ml.so python3 validation/va_modules.py one {} > $R/m/one_{}.out 2>&1' < $R/names.txt
wait
cd $R && tar cJf $OUT/hpl15.tar.xz h m && ls -la $OUT
