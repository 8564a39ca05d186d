#!/bin/bash
# Run a record_lanes.py plan on the GPU machine: each lane's scripts through record.sh, one after
# another, the lanes at once; each lane in OUTDIR/LANE (record.sh's files), then OUTDIR/lanes.txt
# with each lane's seconds.
#   bash validation/run/record_lanes.sh OUTDIR PLAN.txt      (TIMEOUT= per script, as record.sh;
#                                                           DEADLINE= seconds for a lane, default 540)
set -u
out="${1:?usage: record_lanes.sh OUTDIR PLAN.txt}"
plan="${2:?usage: record_lanes.sh OUTDIR PLAN.txt}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
plan="$(cd "$(dirname "$plan")" && pwd)/$(basename "$plan")"
cd "$here"
# Each script compiles with its own cold Inductor cache (record.sh's INDUCTOR_CACHE_ROOT), as
# blind_gpu.sh runs it and the twin takes it: without it every process shares the default
# /tmp/torchinductor_$USER, and a script run before on the machine loads its kernels' autotuned
# configs (`.best_config`) and skips the timing and its memory (blind346/mk04's graph-tree warm-up)
caches="${INDUCTOR_CACHE_ROOT:-$(mktemp -d)}"
while read -r lane scripts; do
    [ -n "$lane" ] && [ "${lane#\#}" = "$lane" ] || continue
    (
        start=$(date +%s)
        # shellcheck disable=SC2086  # the plan's paths hold no spaces
        INDUCTOR_CACHE_ROOT="$caches/$lane" timeout "${DEADLINE:-540}" bash record.sh "$out/$lane" $scripts > "$out/$lane.log" 2>&1
        echo "$lane $(( $(date +%s) - start )) s" >> "$out/lanes.txt"
    ) &
done < "$plan"
wait
[ -n "${INDUCTOR_CACHE_ROOT:-}" ] || rm -rf "$caches"
