#!/bin/bash
# Every case of probe.py, each in a fresh python3 process, one JSON line each (a failed case's
# error as {"case": ..., "error": ...}):  bash validation/va_interned/run.sh OUT.jsonl [CASE...]
# (no CASE: every case)
set -u
out="${1:?usage: run.sh OUT.jsonl [CASE...]}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
: > "$out"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || read -ra cases <<< "$("$py" -c "import sys; sys.path.insert(0, '$here'); import probe; print(' '.join(probe.CASES))")"
for c in "${cases[@]}"; do
  "$py" "$here/probe.py" "$c" >> "$out" 2> /tmp/va_interned.err || echo "{\"case\": \"$c\", \"error\": \"$(tail -1 /tmp/va_interned.err | tr -d '\"')\"}" >> "$out"
done
