#!/bin/bash
# Every case of probe.py in a fresh python3 process, one JSON line each:
#   bash validation/va_pinned/run.sh OUT.jsonl [CASE...]   (no CASE: gg01 sizes first free many small)
set -u
out="${1:?usage: run.sh OUT.jsonl [CASE...]}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(gg01 sizes first free many small)
: > "$out"
for c in "${cases[@]}"; do
  python3 "$here/probe.py" "$c" >> "$out" 2> "$out.$c.err" || echo "{\"case\": \"$c\", \"error\": true}" >> "$out"
done
