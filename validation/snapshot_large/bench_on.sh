#!/usr/bin/env bash
# Issue #36, session 9: the defaults of 5915b61's successor (the parallel
# decoder on at 8 cores or more; `inspect`, `diff` and `view` run with
# MIMALLOC_PURGE_DELAY=0) against the sequential reader, on the GPU
# machine's CPU: the three real snapshots of session 8 and a synthetic
# wrapped one of 3 M entries made there.
#
#   bash bench_on.sh OUTDIR DIR
#
# DIR holds c50/w50/p50.pickle.xz, `vramscope` (the new defaults),
# `vramscope-seq` (bench_par2.sh's binary: it reads sequentially unless
# VS_PAR is set) and `gen_snapshot`. One JSON line per measurement
# (measure.py); `cmp` of the two binaries' outputs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd)
M="python3 ${MEASURE:-$here/../snapshot_real/measure.py}"
V=$BIN/vramscope S=$BIN/vramscope-seq
mkdir -p "$OUT"
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
for n in c50 w50 p50; do xz -dc "$BIN/$n.pickle.xz" >"$OUT/$n.pickle"; done
$M "s3m gen_snapshot" "$BIN/gen_snapshot" --entries 3000000 --max-entries 3000000 --streams 3 \
    --conf expandable_segments:True --out "$OUT/s3m.pickle"
for n in c50 w50 p50 s3m; do
    echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s "$OUT/$n.pickle")}"
done
for n in c50 w50 p50; do
    for _ in 1 2; do
        $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$OUT/$n.pickle"
    done
done
for n in c50 w50 p50 s3m; do
    f=$OUT/$n.pickle
    reps=3
    [ "$n" = s3m ] && reps=2
    for _ in $(seq $reps); do
        $M "$n new --json" "$V" inspect --json "$f"
        $M "$n new --html" "$V" inspect --json --html "$OUT/new.html" "$f"
        MIMALLOC_PURGE_DELAY=1000 $M "$n new --json, MIMALLOC_PURGE_DELAY=1000" "$V" inspect --json "$f"
        $M "$n seq --json" "$S" inspect --json "$f"
        $M "$n seq --html" "$S" inspect --json --html "$OUT/seq.html" "$f"
    done
    "$V" inspect --json "$f" >"$OUT/new.json"
    "$S" inspect --json "$f" >"$OUT/seq.json"
    cmp "$OUT/new.json" "$OUT/seq.json" && echo "{\"label\": \"$n --json same\"}"
    cmp "$OUT/new.html" "$OUT/seq.html" && echo "{\"label\": \"$n --html same\"}"
done
# a corrupt byte near the end, and the file cut short
f=$OUT/s3m.pickle
len=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((len - 1000000)) conv=notrunc 2>/dev/null
$M "s3m corrupt at $((len - 1000000)) new" "$V" inspect --json "$f"
head -c $((len / 2)) "$f" >"$OUT/cut.pickle"
$M "s3m cut at $((len / 2)) new" "$V" inspect --json "$OUT/cut.pickle"
