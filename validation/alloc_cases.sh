#!/bin/bash
# Record every allocator fixture on a real GPU, one fresh process per case:
#   bash validation/alloc_cases.sh OUTDIR
# then copy OUTDIR/* to fixtures/alloc/.
set -u
out="${1:-alloc_out}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
run() { PYTORCH_CUDA_ALLOC_CONF="$2" python3 "$here/alloc_cases.py" "$1" "$out" || echo "case $1 FAILED"; }
run default ""
run expandable "expandable_segments:True"
run max_split "max_split_size_mb:64"
run roundup "roundup_power2_divisions:4"
run roundup_intervals "roundup_power2_divisions:[64:8,256:4,>:1]"
run non_split_rounding "max_split_size_mb:64,max_non_split_rounding_mb:100"
run empty_cache ""
run expandable_empty_cache "expandable_segments:True"
run gc "garbage_collection_threshold:0.6"
run oom_retry ""
run oom_retry_max_split "max_split_size_mb:100"
run streams ""
run training ""
run training_expandable "expandable_segments:True"
