#!/usr/bin/env bash
# Issue #36 (session 6): `inspect` before and after, against
# `pickle.load`, on the real 45-48 MB snapshots (brought as xz files), in
# one short call: the three decompressed at once; `pickle.load` of each
# twice, the three side by side; then each `vramscope` command alone,
# old and new alternating, three times.
#
#   bash quick.sh OUTDIR DIR_WITH_BINARIES_AND_XZ
#
# DIR holds vramscope-old, vramscope-new and {c50,w50,p50}.pickle.xz; one
# JSON line per measurement (../snapshot_real/measure.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd)
M="python3 $here/../snapshot_real/measure.py"
mkdir -p "$OUT"
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\"}"
small="c50 w50 p50"
for n in $small; do xz -dc "$BIN/$n.pickle.xz" >"$OUT/$n.pickle" & done
wait
for n in $small; do
    (
        for _ in 1 2; do
            $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$OUT/$n.pickle"
        done
    ) >"$OUT/$n.py.times" &
done
wait
cat "$OUT"/*.py.times
for _ in 1 2 3; do
    for n in $small; do
        for b in old new; do
            $M "$n $b inspect --json" "$BIN/vramscope-$b" inspect --json "$OUT/$n.pickle"
            $M "$n $b inspect --html" "$BIN/vramscope-$b" inspect --json --html "$OUT/r.html" "$OUT/$n.pickle"
        done
    done
done
