#!/usr/bin/env bash
# Records real nanoGPT snapshots on a GPU machine and times Python's tools and
# `vramscope inspect` on each, on that machine (issue #36). One fresh Python
# process per snapshot; the snapshots of one GPU record at the same time.
#
#   bash run.sh OUTDIR VRAMSCOPE_BINARY "CASES"
#
# CASES: space-separated NAME=GPU:ARGS (ARGS of record.py, commas for spaces;
# a GPU field ending in "x" sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).
# Writes OUTDIR/record.jsonl (record.py's lines), stats.jsonl (stats.py's),
# times.jsonl (measure.py's) and the snapshots OUTDIR/NAME.pickle.
# Environment: REPS (vramscope runs per command, default 3), VIZ=0 skips
# memory_viz, CUT=NAME:BYTES also times inspect on NAME cut at BYTES.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$2 CASES=$3
REPS=${REPS:-3}
mkdir -p "$OUT"
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count())')"
for c in $CASES; do
    name=${c%%=*} rest=${c#*=}
    gpu=${rest%%:*} args=${rest#*:}
    conf=""
    [[ $gpu == *x ]] && conf=expandable_segments:True gpu=${gpu%x}
    CUDA_VISIBLE_DEVICES=$gpu PYTORCH_CUDA_ALLOC_CONF=$conf python3 "$here/record.py" --out "$OUT/$name.pickle" ${args//,/ } \
        >"$OUT/$name.record" 2>"$OUT/$name.record.err" &
done
wait
cat "$OUT"/*.record >"$OUT/record.jsonl"
tail -n 3 "$OUT"/*.record.err
ls -la "$OUT"
# Python's tools: each snapshot's chain runs beside the others'
for c in $CASES; do
    name=${c%%=*} f=$OUT/$name.pickle
    [ -s "$f" ] || continue
    (
        python3 "$here/stats.py" "$f" >"$OUT/$name.stats" 2>&1
        python3 "$here/measure.py" "$name pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$f"
        [ "${VIZ:-1}" = 1 ] && python3 "$here/measure.py" "$name memory_viz" python3 -m torch.cuda._memory_viz trace_plot "$f" -o "$OUT/$name.viz.html"
        [ -f "$OUT/$name.viz.html" ] && python3 -c 'import os,sys; print("{\"label\": \"%s memory_viz html bytes\", \"bytes\": %d}" % (sys.argv[1], os.path.getsize(sys.argv[2])))' "$name" "$OUT/$name.viz.html"
        rm -f "$OUT/$name.viz.html"
    ) >"$OUT/$name.times" &
done
wait
# vramscope alone on the machine, one command at a time
for c in $CASES; do
    name=${c%%=*} f=$OUT/$name.pickle
    [ -s "$f" ] || continue
    for _ in $(seq "$REPS"); do
        python3 "$here/measure.py" "$name inspect --json" "$BIN" inspect --json "$f"
        python3 "$here/measure.py" "$name inspect --html" "$BIN" inspect --json --html "$OUT/r.html" "$f"
    done >>"$OUT/$name.times"
    "$BIN" inspect --json "$f" >"$OUT/$name.inspect.json" 2>&1
    python3 -c 'import os,sys; print("{\"label\": \"%s inspect html bytes\", \"bytes\": %d}" % (sys.argv[1], os.path.getsize(sys.argv[2])))' "$name" "$OUT/r.html" >>"$OUT/$name.times"
    rm -f "$OUT/r.html"
done
if [ -n "${CUT:-}" ]; then
    name=${CUT%%:*} n=${CUT#*:}
    head -c "$n" "$OUT/$name.pickle" >"$OUT/cut.pickle"
    python3 "$here/measure.py" "$name cut at $n" "$BIN" inspect --json "$OUT/cut.pickle" >>"$OUT/$name.times"
    "$BIN" inspect --json "$OUT/cut.pickle" 2>&1 | tail -2 >>"$OUT/cut.err"
    rm -f "$OUT/cut.pickle"
fi
cat "$OUT"/*.stats >"$OUT/stats.jsonl"
cat "$OUT"/*.times >"$OUT/times.jsonl"
cat "$OUT/record.jsonl" "$OUT/stats.jsonl" "$OUT/times.jsonl"
