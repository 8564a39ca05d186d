#!/usr/bin/env bash
# hf_zoo_sweep.py over every model type, 25 types a process, each process under a 12 GB address-space
# limit; a type whose process dies (out of memory) is written to OUT.jsonl as stage "killed" and the
# sweep goes on after it. Totals: `grep -c` the stages in OUT.jsonl.
#   bash validation/run/hf_zoo_sweep.sh OUT.jsonl
set -u
out="${1:?usage: hf_zoo_sweep.sh OUT.jsonl}"
here="$(cd "$(dirname "$0")" && pwd)"
py="${PY:-python}"
mapfile -t types < <("$py" -c "from transformers import CONFIG_MAPPING; print('\n'.join(sorted(CONFIG_MAPPING.keys())))")
: > "$out"
i=0
while [ "$i" -lt "${#types[@]}" ]; do
    chunk=("${types[@]:i:25}")
    log="$(mktemp)"
    (ulimit -v 12000000; timeout 900 "$py" -m vramscope run --quiet "$here/hf_zoo_sweep.py" "$out.part" "${chunk[@]}" > "$log" 2>&1)
    cat "$out.part" >> "$out"
    done_types=$(grep -c '^hf_zoo_sweep: ' "$log")
    if grep -q '^{"types"' "$log"; then
        i=$((i + ${#chunk[@]}))
    else
        last=$(grep '^hf_zoo_sweep: ' "$log" | tail -1 | cut -d' ' -f2)
        echo "{\"model_type\": \"$last\", \"stage\": \"killed\", \"detail\": \"its process ended without totals\"}" >> "$out"
        i=$((i + (done_types > 0 ? done_types : 1)))
    fi
    rm -f "$log" "$out.part"
done
