#!/usr/bin/env bash
# A model-zoo sweep (hf_zoo_sweep.py, vision_zoo_sweep.py) over all its models, 25 a process, each
# process under a 12 GB address-space limit; a model whose process dies (out of memory) is written to
# OUT.jsonl as stage "killed" and the sweep goes on after it. Totals: `grep -c` the stages in OUT.jsonl.
#   bash validation/run/zoo_sweep.sh validation/run/vision_zoo_sweep.py OUT.jsonl
set -u
sweep="${1:?usage: zoo_sweep.sh SWEEP.py OUT.jsonl}"
out="${2:?usage: zoo_sweep.sh SWEEP.py OUT.jsonl}"
py="${PY:-python}"
mapfile -t names < <("$py" "$sweep" --list)
: > "$out"
i=0
while [ "$i" -lt "${#names[@]}" ]; do
    chunk=("${names[@]:i:25}")
    log="$(mktemp)"
    (ulimit -v 12000000; timeout 900 "$py" -m vramscope run --quiet "$sweep" "$out.part" "${chunk[@]}" > "$log" 2>&1)
    cat "$out.part" >> "$out"
    done_models=$(grep -c '^[a-z_]*zoo_sweep: ' "$log")
    if grep -q '^{"models"' "$log"; then
        i=$((i + ${#chunk[@]}))
    else
        last=$(grep '^[a-z_]*zoo_sweep: ' "$log" | tail -1 | cut -d' ' -f2)
        echo "{\"model\": \"$last\", \"stage\": \"killed\", \"detail\": \"its process ended without totals\"}" >> "$out"
        i=$((i + (done_models > 0 ? done_models : 1)))
    fi
    rm -f "$log" "$out.part"
done
