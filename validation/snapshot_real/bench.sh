#!/usr/bin/env bash
# Times `vramscope inspect` against Python's tools on real snapshots, on the
# GPU machine (issue #36): records the large ones there (record.py), brings
# in smaller ones recorded before (xz files), then per snapshot
# `pickle.load` and `python -m torch.cuda._memory_viz trace_plot` (each
# snapshot's chain beside the others'), then `vramscope inspect --json` and
# `--html` alone on the machine, REPS times each; also `inspect` on the
# largest file cut short, the reader alone (read_snapshot), and inspect
# under two mimalloc settings (diagnostics).
#
#   bash bench.sh OUTDIR VRAMSCOPE READ_SNAPSHOT "RECORD_CASES" "XZ_FILES" "NO_VIZ_NAMES"
#
# RECORD_CASES as run.sh's (NAME=GPU:ARGS); XZ_FILES: NAME.pickle.xz paths;
# NO_VIZ_NAMES: snapshots whose memory_viz run is skipped.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$2 READ=$3 CASES=$4 XZ=$5 NOVIZ=$6
REPS=${REPS:-2}
mkdir -p "$OUT"
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(python3 -c 'import torch; print(torch.__version__)')"
chain() { # NAME: Python's tools on one snapshot
    local name=$1 f=$OUT/$1.pickle
    python3 "$here/stats.py" "$f" >"$OUT/$name.stats" 2>&1
    python3 "$here/measure.py" "$name pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$f"
    if [[ " $NOVIZ " != *" $name "* ]]; then
        timeout 150 python3 "$here/measure.py" "$name memory_viz" python3 -m torch.cuda._memory_viz trace_plot "$f" -o "$OUT/$name.viz.html"
        [ -f "$OUT/$name.viz.html" ] && echo "{\"label\": \"$name memory_viz html bytes\", \"bytes\": $(stat -c %s "$OUT/$name.viz.html")}"
        rm -f "$OUT/$name.viz.html"
    fi
}
for c in $CASES; do
    name=${c%%=*} rest=${c#*=}
    gpu=${rest%%:*} args=${rest#*:}
    conf=""
    [[ $gpu == *x ]] && conf=expandable_segments:True gpu=${gpu%x}
    (
        CUDA_VISIBLE_DEVICES=$gpu PYTORCH_CUDA_ALLOC_CONF=$conf python3 "$here/record.py" --out "$OUT/$name.pickle" ${args//,/ } \
            >"$OUT/$name.record" 2>"$OUT/$name.record.err"
        chain "$name" >"$OUT/$name.times"
    ) &
done
for x in $XZ; do
    name=$(basename "$x" .pickle.xz)
    ( xz -dc "$x" >"$OUT/$name.pickle" && chain "$name" >"$OUT/$name.times" ) &
done
wait
ls -la "$OUT"
names=$(cd "$OUT" && ls *.pickle | sed 's/\.pickle$//')
for name in $names; do
    f=$OUT/$name.pickle
    for _ in $(seq "$REPS"); do
        python3 "$here/measure.py" "$name inspect --json" "$BIN" inspect --json "$f"
        python3 "$here/measure.py" "$name inspect --html" "$BIN" inspect --json --html "$OUT/r.html" "$f"
    done >>"$OUT/$name.times"
    echo "{\"label\": \"$name inspect html bytes\", \"bytes\": $(stat -c %s "$OUT/r.html")}" >>"$OUT/$name.times"
    "$BIN" inspect --json "$f" >"$OUT/$name.inspect.json" 2>&1
done
big=$(cd "$OUT" && ls -S *.pickle | head -1 | sed 's/\.pickle$//')
f=$OUT/$big.pickle
{
    python3 "$here/measure.py" "$big read_snapshot (reader alone, system allocator)" "$READ" "$f"
    MIMALLOC_ALLOW_THP=1 python3 "$here/measure.py" "$big inspect --json MIMALLOC_ALLOW_THP=1" "$BIN" inspect --json "$f"
    MIMALLOC_PURGE_DELAY=-1 python3 "$here/measure.py" "$big inspect --json MIMALLOC_PURGE_DELAY=-1" "$BIN" inspect --json "$f"
    n=$(($(stat -c %s "$f") * 9 / 10))
    head -c "$n" "$f" >"$OUT/cut.pickle"
    python3 "$here/measure.py" "$big cut at $n" "$BIN" inspect --json "$OUT/cut.pickle"
    "$BIN" inspect "$OUT/cut.pickle" 2>&1 | tail -1
    rm -f "$OUT/cut.pickle"
} >>"$OUT/$big.times" 2>&1
cat "$OUT"/*.record >"$OUT/record.jsonl" 2>/dev/null
cat "$OUT"/*.stats >"$OUT/stats.jsonl"
cat "$OUT"/*.times >"$OUT/times.jsonl"
tail -n 3 "$OUT"/*.record.err
cat "$OUT/record.jsonl" "$OUT/times.jsonl"
