#!/usr/bin/env bash
# Issue #36, session 12: two binaries side by side on the GPU machine's CPU
# (bench_s10.sh's runs: pickle.load twice, then `inspect --json` and
# `inspect --json --html` alternating run by run, `cmp` of the outputs,
# each one's phases from its hooks build), plus NEW's `--json` with
# mimalloc's large OS pages allowed (an environment setting only).
#
#   bash bench_s12.sh OUTDIR DIR OLD NEW
#
# DIR holds c50/w50/p50.pickle.xz and vramscope-{OLD,NEW} with their
# -hooks builds (measure_hooks_s12.patch: VS_PT=1 prints one JSON line per
# phase). MEASURE names measure.py when this script runs from another
# folder than validation/snapshot_large; FILES and REPS narrow it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd) OLD=$3 NEW=$4
M="python3 ${MEASURE:-$here/../snapshot_real/measure.py}"
FILES=${FILES:-c50 w50 p50} REPS=${REPS:-5}
mkdir -p "$OUT"
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"thp\": \"$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)\", \"threads_per_core\": \"$(lscpu 2>/dev/null | grep -m1 'Thread(s) per core' | awk '{print $NF}')\", \"mhz\": \"$(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2)\"}"
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
        MIMALLOC_ALLOW_LARGE_OS_PAGES=1 $M "$n $NEW --json large-pages" "$BIN/vramscope-$NEW" inspect --json "$f"
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
