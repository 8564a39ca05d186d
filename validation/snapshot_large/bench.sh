#!/usr/bin/env bash
# Issue #36 on the GPU machine's CPU (session 5): `vramscope inspect` and
# `diff`, before and after, against Python's tools on the real 45-48 MB
# snapshots (validation/snapshot_real; brought as xz files), then a large
# synthetic snapshot made there (gen_snapshot: wrapped, 3 streams,
# expandable segments) read whole, over a --range, diffed, and with one
# byte near its end set to 0xff (the lex names it before decoding does).
#
#   bash bench.sh OUTDIR DIR_WITH_BINARIES_AND_XZ ENTRIES
#   SMALL_ONLY=1 bash bench.sh OUTDIR DIR   # a short call (session 6):
#       pickle.load and inspect only, on the three real snapshots
#   SMALL_ONLY=1 VIZ=1 REPS=3 bash bench.sh OUTDIR DIR   # session 7: also
#       memory_viz trace_plot, each vramscope command REPS times, and
#       (when DIR holds them) read_snapshot (the reader alone, new) and
#       lex_file (the parallel lex alone, all cores)
#   RECORD=1 SMALL_ONLY=1 VIZ=1 REPS=3 bash bench.sh OUTDIR DIR   # session 8:
#       the three snapshots recorded there first (validation/snapshot_real/
#       record.py, all three on GPU 0 at once, w50 with expandable
#       segments) instead of brought as xz files; also read_snapshot-old
#       (the reader alone, old) when DIR holds it
#
# DIR holds vramscope-old, vramscope-new, gen_snapshot, lex_file and
# {c50,w50,p50}.pickle.xz; one JSON line per measurement (measure.py).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd) ENTRIES=${3:-20000000}
M="python3 $here/../snapshot_real/measure.py"
mkdir -p "$OUT"
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"torch\": \"$(python3 -c 'import torch; print(torch.__version__)')\"}"
small="c50 w50 p50"
if [ -n "${RECORD:-}" ]; then
    R="python3 $here/../snapshot_real/record.py"
    CUDA_VISIBLE_DEVICES=0 $R --out "$OUT/c50.pickle" --target-mb 50 >"$OUT/c50.record" 2>"$OUT/c50.record.err" &
    CUDA_VISIBLE_DEVICES=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $R --out "$OUT/w50.pickle" \
        --target-mb 50 --wrap --streams 3 --oom-at 0.7 >"$OUT/w50.record" 2>"$OUT/w50.record.err" &
    CUDA_VISIBLE_DEVICES=0 $R --out "$OUT/p50.pickle" --target-mb 50 --stacks python >"$OUT/p50.record" 2>"$OUT/p50.record.err" &
    wait
    cat "$OUT"/*.record
    tail -n 2 "$OUT"/*.record.err
    for n in $small; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s "$OUT/$n.pickle")}"; done
else
    for n in $small; do xz -dc "$BIN/$n.pickle.xz" >"$OUT/$n.pickle" & done
    wait
fi
# Python's tools, each snapshot's chain beside the others'
for n in $small; do
    (
        f=$OUT/$n.pickle
        for _ in 1 2; do
            $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$f"
        done
        # (a `continue` here, in the subshell, skipped nothing: session 6's
        # SMALL_ONLY ran memory_viz too)
        if [ -z "${SMALL_ONLY:-}" ] || [ -n "${VIZ:-}" ]; then
            timeout 100 $M "$n memory_viz" python3 -m torch.cuda._memory_viz trace_plot "$f" -o "$OUT/$n.viz.html"
            rm -f "$OUT/$n.viz.html"
        fi
    ) >"$OUT/$n.py.times" &
done
wait
cat "$OUT"/*.py.times
# vramscope alone on the machine, before and after, alternating
for n in $small; do
    for _ in $(seq "${REPS:-2}"); do
        for b in old new; do
            $M "$n $b inspect --json" "$BIN/vramscope-$b" inspect --json "$OUT/$n.pickle"
            $M "$n $b inspect --html" "$BIN/vramscope-$b" inspect --json --html "$OUT/r.html" "$OUT/$n.pickle"
        done
    done
done
for n in $small; do
    for _ in $(seq "${REPS:-2}"); do
        [ -x "$BIN/read_snapshot" ] && $M "$n new read_snapshot" "$BIN/read_snapshot" "$OUT/$n.pickle"
        [ -x "$BIN/read_snapshot-old" ] && $M "$n old read_snapshot" "$BIN/read_snapshot-old" "$OUT/$n.pickle"
        [ -n "${RECORD:-}" ] && "$BIN/read_snapshot" "$OUT/$n.pickle" --split
        [ -x "$BIN/lex_file" ] && $M "$n lex_file" "$BIN/lex_file" "$OUT/$n.pickle" &&
            $M "$n lex_file 1 MiB pieces" "$BIN/lex_file" "$OUT/$n.pickle" 1048576
    done
done
[ -n "${SMALL_ONLY:-}" ] && exit 0
for _ in 1 2; do
    for b in old new; do
        $M "w50 c50 $b diff --json" "$BIN/vramscope-$b" diff --json "$OUT/w50.pickle" "$OUT/c50.pickle"
    done
done
# a large synthetic snapshot
big=$OUT/big.pickle
$M "gen_snapshot $ENTRIES entries" "$BIN/gen_snapshot" --entries "$ENTRIES" --max-entries "$ENTRIES" \
    --streams 3 --conf expandable_segments:True --out "$big"
echo "{\"label\": \"big bytes\", \"bytes\": $(stat -c %s "$big")}"
$M "big lex_file (the lex alone, all cores)" "$BIN/lex_file" "$big"
# one byte near the end of a copy set to 0xff
cp "$big" "$OUT/bad.pickle"
bad=$OUT/bad.pickle
at=$(($(stat -c %s "$bad") * 19 / 20))
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); print("{\"label\": \"corrupted byte\", \"offset\": %s, \"was\": %d}" % (sys.argv[2], f.read(1)[0])); f.seek(int(sys.argv[2])); f.write(b"\xff")' "$bad" "$at"
$M "big corrupt lex_file" "$BIN/lex_file" "$bad"
$M "big corrupt new inspect --json" "$BIN/vramscope-new" inspect --json "$bad"
timeout 60 $M "big corrupt old inspect --json" "$BIN/vramscope-old" inspect --json "$bad"
rm -f "$bad"
for b in new old; do
    $M "big $b inspect --json" "$BIN/vramscope-$b" inspect --json "$big"
done
$M "big new inspect --json --html" "$BIN/vramscope-new" inspect --json --html "$OUT/r.html" "$big"
echo "{\"label\": \"big html bytes\", \"bytes\": $(stat -c %s "$OUT/r.html")}"
$M "big new inspect --json --range mid 100k" "$BIN/vramscope-new" inspect --json --range "$((ENTRIES / 2))..$((ENTRIES / 2 + 100000))" "$big"
$M "big big new diff --json" "$BIN/vramscope-new" diff --json "$big" "$big"
