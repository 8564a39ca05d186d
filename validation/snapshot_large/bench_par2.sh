#!/usr/bin/env bash
# Issue #36, session 9: the parallel decoder against the sequential reader
# on the GPU machine's CPU, on the three real snapshots of session 8
# (c50, w50, p50: brought as xz files, not recorded again).
#
#   bash bench_par2.sh OUTDIR DIR
#
# DIR holds c50/w50/p50.pickle.xz, `vramscope` and `read_snapshot` built
# with the measurement hooks of session 9 (not on main): VS_PAR=N forces
# the parallel decoder on N threads, VS_PT=1 prints one JSON line per
# phase (milliseconds since the read began, VmHWM in kB). One JSON line per
# measurement (measure.py); `cmp` of the sequential and parallel outputs.
# FILES (default "c50 w50 p50") and REPS (default 3) narrow it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd)
M="python3 ${MEASURE:-$here/../snapshot_real/measure.py}"
V=$BIN/vramscope
FILES=${FILES:-c50 w50 p50} REPS=${REPS:-3}
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
        $M "$n seq --json" "$V" inspect --json "$f"
        VS_PAR=16 $M "$n par16 --json" "$V" inspect --json "$f"
        VS_PAR=8 $M "$n par8 --json" "$V" inspect --json "$f"
        VS_PAR=4 $M "$n par4 --json" "$V" inspect --json "$f"
        MIMALLOC_PURGE_DELAY=0 $M "$n seq --json purge0" "$V" inspect --json "$f"
        VS_PAR=16 MIMALLOC_PURGE_DELAY=0 $M "$n par16 --json purge0" "$V" inspect --json "$f"
        VS_PAR=8 MIMALLOC_PURGE_DELAY=0 $M "$n par8 --json purge0" "$V" inspect --json "$f"
        $M "$n seq --html" "$V" inspect --json --html "$OUT/seq.html" "$f"
        VS_PAR=16 $M "$n par16 --html" "$V" inspect --json --html "$OUT/par.html" "$f"
    done
    for mode in seq par16 par8 par16p0; do
        case $mode in
            seq) env=() ;;
            par16) env=(VS_PAR=16) ;;
            par8) env=(VS_PAR=8) ;;
            par16p0) env=(VS_PAR=16 MIMALLOC_PURGE_DELAY=0) ;;
        esac
        env "${env[@]}" VS_PT=1 "$V" inspect --json "$f" 2>&1 >/dev/null |
            sed "s/^{/{\"file\": \"$n\", \"mode\": \"$mode\", /"
    done
    "$V" inspect --json "$f" >"$OUT/seq.json"
    for t in 16 8 4; do
        VS_PAR=$t "$V" inspect --json "$f" >"$OUT/par.json"
        cmp "$OUT/seq.json" "$OUT/par.json" && echo "{\"label\": \"$n par$t --json same\"}"
    done
    cmp "$OUT/seq.html" "$OUT/par.html" && echo "{\"label\": \"$n par16 --html same\"}"
    VS_THREADS=16 "$BIN/read_snapshot" "$f" --split
done
