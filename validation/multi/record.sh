#!/bin/bash
# Record every case of validation/multi/multi_cases.json on N GPUs of one host, one fresh torchrun
# launch per case:   NPROC=2 bash validation/multi/record.sh OUTDIR [CASES.json]
#   -> OUTDIR/multi_n$NPROC.jsonl (every rank's every phase, case by case) and OUTDIR/errs.txt
# DEADLINE=S launches no case after S seconds of this script (the rest are named in OUTDIR/errs.txt);
# ONLY="NAME..." runs those cases alone.
set -u
out="${1:-multi_out}"; here="$(cd "$(dirname "$0")" && pwd)"
cases="$(realpath "${2:-$here/multi_cases.json}")"; n="${NPROC:-2}"
mkdir -p "$out/work"
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
for name in ${ONLY:-$(python3 -c "import json;print(' '.join(c['name'] for c in json.load(open('$cases'))))")}; do
  if [ -n "${DEADLINE:-}" ] && [ "$SECONDS" -ge "$DEADLINE" ]; then echo "$name not run (DEADLINE)" >> "$out/errs.txt"; continue; fi
  timeout 90 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" "$here/multi_cases.py" "$cases" "$name" "$out/work" \
    > "$out/work/$name.log" 2>&1 || echo "$name failed rc=$?" >> "$out/errs.txt"
done
for name in $(python3 -c "import json;print(' '.join(c['name'] for c in json.load(open('$cases'))))"); do
  for r in $(seq 0 $((n - 1))); do cat "$out/work/$name.rank$r.jsonl" 2>/dev/null; done
done > "$out/multi_n$n.jsonl"
tail -n 5 "$out"/work/*.log > "$out/logs.txt" 2>/dev/null
(cd "$out/work" && tar czf ../traces_n$n.tgz *.trace.json)
