#!/bin/bash
# bash run_set.sh CASES.json OUTDIR: every case, one fresh process each, JOBS at a time, on GPU 0
set -u
cases="$1"; out="$2"; mkdir -p "$out"
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error CUDA_VISIBLE_DEVICES=0
python3 -c "import json,sys;print('\n'.join(c['name'] for c in json.load(open(sys.argv[1]))))" "$cases" \
  | xargs -P "${JOBS:-7}" -I{} sh -c "python3 llm_cases.py '$cases' {} '$out' > /dev/null 2> '$out/{}.err'"
