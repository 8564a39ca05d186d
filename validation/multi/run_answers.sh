#!/bin/bash
# `vramscope run --nproc N --rank R` on the unmodified torchrun script of this folder, no GPU: one fresh
# process per case per rank, each writing the script's own lines (the schema of the GPUs' recording),
# then all of them concatenated:
#   bash validation/multi/run_answers.sh N OUT.jsonl [NAME...]      (GPU=h200 by default; RANKS="0 1";
#                                                                    CASES=FILE.json, multi_cases.json by default)
# Compare with: python3 validation/multi/compare.py fixtures/multi/multi_h200_n2.jsonl OUT.jsonl
set -u
n="${1:?usage: run_answers.sh N OUT.jsonl [NAME...]}"
out="${2:?usage: run_answers.sh N OUT.jsonl [NAME...]}"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
py="${PY:-python3}"
names=("$@")
cases="$(realpath "${CASES:-$here/multi_cases.json}")"
[ ${#names[@]} -gt 0 ] || mapfile -t names < <("$py" -c "import json; [print(c['name']) for c in json.load(open('$cases'))]")
tmp="$(mktemp -d)"
for r in ${RANKS:-$(seq 0 $((n - 1)))}; do
  for name in "${names[@]}"; do
    "$py" -m vramscope run --gpu "${GPU:-h200}" --nproc "$n" --rank "$r" --quiet \
      "$here/multi_cases.py" "$cases" "$name" "$tmp" > "$tmp/$name.rank$r.log" 2>&1
    echo "$name rank $r: exit $?"
  done
done
cat "$tmp"/*.rank*.jsonl > "$out"
rm -rf "$tmp"
