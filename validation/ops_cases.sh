#!/bin/bash
# Measure every op/module case on a real GPU, one fresh process per case, several processes
# at once (the allocator's figures are per process), then gather the JSON lines in case order:
#   bash validation/ops_cases.sh OUTDIR      ->  OUTDIR/ops_h100.jsonl, OUTDIR/traces.tar.xz
# then copy OUTDIR/ops_h100.jsonl to fixtures/ops/.
set -u
out="${1:-ops_out}"
here="$(cd "$(dirname "$0")" && pwd)"
work="$out/work"
mkdir -p "$work"
names="linear2d linear3d gelu relu sigmoid silu dropout layernorm embedding mse ce seq mha_w mha_now mha_fast enc_post enc_pre enc_fast enc_fast_pre"
cases="env"
for n in $names; do for d in fp32 bf16; do cases="$cases $n:$d"; done; done
echo $cases | tr ' ' '\n' | xargs -P "${JOBS:-8}" -I{} python3 "$here/ops_cases.py" {} "$work"
: > "$out/ops_h100.jsonl"
for c in $cases; do cat "$work/${c/:/_}.jsonl" >> "$out/ops_h100.jsonl" || echo "{\"case\": \"$c\", \"error\": \"no output\"}" >> "$out/ops_h100.jsonl"; done
(cd "$work" && tar cJf ../traces.tar.xz *.trace.json *.pickle)
