#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_host_built/go_s43.sh` -> DIR/hb43.tar.xz
# (fixtures/va_maps/host_built_s43_h200.tar.xz): validation/va_host_built.py over four blind scripts
# whose host-built models' segments part from the twin's (blind197/go02, blind194/gl01, blind198/gp05,
# blind191/gi05), all at once, one process each, 75 s each at most.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/h; mkdir -p $R
for s in blind197/go02 blind194/gl01 blind198/gp05 blind191/gi05; do
  f=$(ls validation/run/${s}_*.py | head -1); n=$(basename $s)
  OUT=$R/$n timeout 75 python3 validation/va_host_built.py $f > $R/$n.out 2>&1 &
done
wait
nproc > $R/nproc.txt
cd $OUT && tar cJf hb43.tar.xz h && rm -rf h && ls -la
