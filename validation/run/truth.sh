#!/bin/bash
# On a GPU machine: the per-op allocator truth (ops_truth.py) of the named scripts, several at once, and
# PyTorch's MemTracker (memtracker.py, plain and with MEMTRACKER_SWAP=1, two lanes) over every script,
# one at a time in each lane (its seconds are compared), then the 8B Llama step of benches/:
#   bash validation/run/truth.sh OUTDIR [NAME...]      (NAME: a script here or in a folder here, e.g. blind2's;
#                                                     NO_MEMTRACKER=1 skips MemTracker; INDUCTOR_CACHE_ROOT=DIR
#                                                     gives each script its own cold Inductor cache DIR/NAME;
#                                                     TRUTH_JOBS, default 3, scripts at once)
# -> OUTDIR/ops/NAME.jsonl, OUTDIR/memtracker.jsonl (plain) and memtracker1.jsonl (swap)
set -u
out="${1:?usage: truth.sh OUTDIR [NAME...]}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out/ops" && out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
names=("$@")
(
  for n in "${names[@]}"; do echo "$n"; done | xargs -P "${TRUTH_JOBS:-3}" -I{} sh -c \
    "f='$here/{}.py'; [ -f \"\$f\" ] || f=\$(ls '$here'/*/{}.py); [ -z '${INDUCTOR_CACHE_ROOT:-}' ] || export TORCHINDUCTOR_CACHE_DIR='${INDUCTOR_CACHE_ROOT:-}/{}'; OUT_JSONL='$out/ops/{}.jsonl' timeout -k 5 240 python3 '$here/ops_truth.py' \"\$f\" > '$out/ops/{}.out' 2>&1"
) &
[ -n "${NO_MEMTRACKER:-}" ] || for swap in "" 1; do
  (
    for f in "$here"/[0-9][0-9]_*.py "$here/../../benches/llama8b_train_step.py"; do
      MEMTRACKER_SWAP=$swap OUT_JSONL="$out/memtracker$swap.jsonl" timeout -k 5 180 python3 "$here/memtracker.py" "$f" \
        > /dev/null 2>> "$out/memtracker$swap.err" \
        || echo "{\"script\": \"$(basename "$f" .py)\", \"swap\": \"$swap\", \"rc\": $?}" >> "$out/memtracker$swap.jsonl"
    done
  ) &
done
wait
