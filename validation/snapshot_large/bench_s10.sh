#!/usr/bin/env bash
# Issue #36, session 10: two binaries side by side on the GPU machine's CPU
# (the three real snapshots of session 8, brought as xz files), each run
# alternating with the other's: `inspect --json` and `inspect --json
# --html`, then each one's phases.
#
#   bash bench_s10.sh OUTDIR DIR OLD NEW
#
# DIR holds c50/w50/p50.pickle.xz and the binaries vramscope-OLD,
# vramscope-NEW, vramscope-OLD-hooks and vramscope-NEW-hooks (the last two
# built with measure_hooks_s10.patch: VS_PT=1 prints one JSON line per
# phase, with the main thread's CPU milliseconds). One JSON line per
# measurement (measure.py); `cmp` of the two binaries' outputs.
# FILES (default "c50 w50 p50") and REPS (default 5) narrow it; MEASURE
# names measure.py when this script runs from another folder than
# validation/snapshot_large.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd) OLD=$3 NEW=$4
M="python3 ${MEASURE:-$here/../snapshot_real/measure.py}"
FILES=${FILES:-c50 w50 p50} REPS=${REPS:-5}
mkdir -p "$OUT"
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
for n in $FILES; do
    xz -dc "$BIN/$n.pickle.xz" >"$OUT/$n.pickle"
    echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s "$OUT/$n.pickle")}"
done
for n in $FILES; do
    for _ in 1 2; do
        $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$OUT/$n.pickle"
    done
done
for n in $FILES; do
    f=$OUT/$n.pickle
    for _ in $(seq "$REPS"); do
        for b in $OLD $NEW; do
            $M "$n $b --json" "$BIN/vramscope-$b" inspect --json "$f"
        done
        for b in $OLD $NEW; do
            $M "$n $b --html" "$BIN/vramscope-$b" inspect --json --html "$OUT/$b.html" "$f"
        done
    done
    for b in $OLD $NEW; do
        "$BIN/vramscope-$b" inspect --json "$f" >"$OUT/$b.json"
    done
    cmp "$OUT/$OLD.json" "$OUT/$NEW.json" && echo "{\"label\": \"$n --json same\"}"
    cmp "$OUT/$OLD.html" "$OUT/$NEW.html" && echo "{\"label\": \"$n --html same\"}"
    for _ in 1 2 3; do
        for b in $OLD $NEW; do
            VS_PT=1 "$BIN/vramscope-$b-hooks" inspect --json "$f" 2>&1 >/dev/null |
                sed "s/^{/{\"file\": \"$n\", \"bin\": \"$b\", /"
        done
    done
done
